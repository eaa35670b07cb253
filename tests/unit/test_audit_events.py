"""Audit events: written with their change (or not at all), chained with the traces, replayed for "could X read
Y then?", listed and exported for auditors of their own tenant only."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from docqa.accounts import directory
from docqa.audit import events as ev
from docqa.audit.access import replay_access
from docqa.audit.events import FailureThrottle, append_event, event_around
from docqa.audit.export import export_jsonl, verify_jsonl
from docqa.audit.keys import hmac_key
from docqa.audit.models import AuditEvent
from docqa.audit.recorder import audit_session
from docqa.audit.verify import verify_chain, verify_for_tenant
from docqa.db import session_factory
from docqa.schema import upgrade_database
from docqa.settings import Settings
from tests.support.audit import fill, tamper, utc
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


@pytest.fixture
def server(tmp_path):
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="unused"))
    with TestClient(app) as client:
        yield client, keys, app.state.context.settings


def events_of(settings, **where) -> list[AuditEvent]:
    with session_factory(settings)() as session:
        query = select(AuditEvent).order_by(AuditEvent.seq)
        for column, value in where.items():
            query = query.where(getattr(AuditEvent, column) == value)
        return list(session.scalars(query))


def count(settings) -> int:
    with session_factory(settings)() as session:
        return session.scalar(select(func.count()).select_from(AuditEvent)) or 0


class TestAdminActionsThroughTheApi:
    def test_each_change_leaves_exactly_one_event_with_actor_target_and_request_id(self, server):
        client, keys, settings = server
        admin = {**auth(keys["root"]), "X-Request-ID": "req-42"}
        steps = [
            (lambda: client.post("/v1/admin/users", json={"id": "carol", "groups": ["sales"]}, headers=admin),
             ev.USER_CREATED, "user:carol"),
            (lambda: client.post("/v1/admin/groups", json={"name": "legal"}, headers=admin),
             ev.GROUP_CREATED, "group:legal"),
            (lambda: client.put("/v1/admin/groups/legal/members/carol", headers=admin),
             ev.GROUP_MEMBER_ADDED, "group:legal"),
            (lambda: client.delete("/v1/admin/groups/legal/members/carol", headers=admin),
             ev.GROUP_MEMBER_REMOVED, "group:legal"),
        ]
        for call, action, target in steps:
            before = count(settings)
            assert call().status_code in (200, 201)
            assert count(settings) == before + 1
            last = events_of(settings)[-1]
            assert (last.action, last.target, last.actor, last.tenant, last.request_id, last.result) == (
                action, target, "root", "acme", "req-42", "success")
        created = client.post("/v1/admin/keys", json={"user_id": "carol", "name": "laptop"}, headers=admin)
        key_id, secret = created.json()["id"], created.json()["key"]
        assert client.delete(f"/v1/admin/keys/{key_id}", headers=admin).status_code == 200
        assert client.delete("/v1/admin/users/carol", headers=admin).status_code == 200
        actions = [(e.action, e.target) for e in events_of(settings)[-3:]]
        assert actions == [(ev.KEY_ISSUED, f"key:{key_id}"), (ev.KEY_REVOKED, f"key:{key_id}"),
                           (ev.USER_DEACTIVATED, "user:carol")]
        # The key's secret is never stored in an event, in any form.
        dumped = json.dumps([[e.before, e.after, e.target, e.actor] for e in events_of(settings)])
        assert secret not in dumped and secret.split("_", 2)[2] not in dumped
        assert verify_chain(session_factory(settings)(), hmac_key(settings)).ok

    def test_a_refused_change_writes_no_event(self, server):
        client, keys, settings = server
        admin = auth(keys["root"])
        before = count(settings)
        assert client.post("/v1/admin/users", json={"id": "alice"}, headers=admin).status_code == 409
        assert client.delete("/v1/admin/keys/0123456789abcdef", headers=admin).status_code == 404
        assert client.put("/v1/admin/groups/nope/members/alice", headers=admin).status_code == 404
        assert client.delete("/v1/admin/users/zed", headers=admin).status_code == 404  # another tenant's
        assert count(settings) == before

    def test_a_change_that_fails_after_its_event_was_staged_leaves_neither(self, server, monkeypatch):
        client, keys, settings = server
        from docqa.server.routes import accounts

        real = accounts.append_event

        def then_fail(*args, **kwargs):
            real(*args, **kwargs)
            raise RuntimeError("disk full")

        monkeypatch.setattr(accounts, "append_event", then_fail)
        before = count(settings)
        with pytest.raises(RuntimeError):
            client.post("/v1/admin/users", json={"id": "dave"}, headers=auth(keys["root"]))
        assert count(settings) == before
        with session_factory(settings)() as session:
            assert directory.get_user(session, "acme", "dave") is None

    def test_a_store_deletion_that_fails_rolls_its_event_back(self, server):
        _, _, settings = server
        before = count(settings)
        with pytest.raises(OSError), event_around(settings, tenant="acme", actor="root",
                                                  action=ev.DOCUMENT_DELETED, target="document:x"):
            raise OSError("store unavailable")
        assert count(settings) == before

    def test_failed_sign_ins_are_events_at_most_once_a_minute_per_key(self, server):
        client, keys, settings = server
        from docqa.server import auth as auth_module

        auth_module.signin_failures = FailureThrottle()
        key_id = keys["alice"].split("_")[1]
        for _ in range(5):
            assert client.get("/v1/me", headers=auth(f"dq_{key_id}_wrong-secret")).status_code == 401
        failed = events_of(settings, action=ev.SIGNIN_FAILED)
        assert len(failed) == 1
        assert (failed[0].tenant, failed[0].target, failed[0].result) == ("acme", f"key:{key_id}", "failure")
        assert "wrong-secret" not in json.dumps(failed[0].after)


class TestThrottle:
    def test_one_event_per_source_per_window_and_a_global_ceiling(self):
        throttle = FailureThrottle(window_s=60, max_events=3, max_sources=100)
        assert throttle.admit("key:a", now=0) == 0
        assert throttle.admit("key:a", now=1) is None
        assert throttle.admit("key:a", now=2) is None
        assert throttle.admit("key:a", now=61) == 2  # reports the two it swallowed
        assert [throttle.admit(f"ip:{n}", now=62) for n in range(4)] == [0, 0, None, None]

    def test_tracked_sources_are_bounded(self):
        throttle = FailureThrottle(window_s=60, max_events=10**6, max_sources=10)
        for n in range(1000):
            throttle.admit(f"ip:{n}", now=0)
        assert len(throttle._seen) == 10


@pytest.fixture
def settings(tmp_path) -> Settings:
    settings = Settings(data_dir=tmp_path)
    upgrade_database(settings)
    return settings


def event(settings, at, action, target, **fields):
    with audit_session(settings) as session:
        return append_event(session, settings, tenant=fields.pop("tenant", "acme"), actor="root", action=action,
                            target=target, at=at, **fields).id


class TestChainWithEvents:
    def test_traces_and_events_share_one_chain_that_verifies(self, settings):
        fill(settings, 2)
        event(settings, utc(2026, 3, 1), ev.GROUP_CREATED, "group:finance", after={"members": []})
        fill(settings, 1)
        event(settings, utc(2026, 3, 1), ev.USER_CREATED, "user:bob", after={"groups": [], "active": True})
        with session_factory(settings)() as session:
            report = verify_chain(session, hmac_key(settings))
            assert (report.ok, report.checked, report.head_seq) == (True, 5, 5)
            mine = verify_for_tenant(session, hmac_key(settings), "acme")
            assert (mine.ok, mine.checked, mine.events_checked) == (True, 3, 2)
        assert [e.seq for e in events_of(settings)] == [3, 5]

    @pytest.mark.parametrize("sql", [
        "UPDATE audit_events SET after = '{\"groups\": [\"finance\"], \"active\": true}' WHERE seq = 3",
        "UPDATE audit_events SET actor = 'mallory' WHERE seq = 3",
        "UPDATE audit_events SET at = '2026-01-01 00:00:00' WHERE seq = 3",
    ])
    def test_an_edited_event_breaks_the_chain_at_that_event(self, settings, sql):
        fill(settings, 2)
        event_id = event(settings, utc(2026, 3, 1), ev.USER_CREATED, "user:bob", after={"groups": [], "active": True})
        fill(settings, 1)
        tamper(settings, (sql, {}))
        with session_factory(settings)() as session:
            report = verify_chain(session, hmac_key(settings))
            assert not report.ok and report.broken.seq == 3 and report.broken.trace_id == event_id
            assert "edited" in report.broken.reason
            tenant_view = verify_for_tenant(session, hmac_key(settings), "acme")
            assert tenant_view.broken.trace_id == event_id

    def test_a_deleted_event_breaks_the_chain(self, settings):
        fill(settings, 1)
        event(settings, utc(2026, 3, 1), ev.GROUP_CREATED, "group:x")
        fill(settings, 1)
        tamper(settings, ("DELETE FROM audit_events WHERE seq = 2", {}))
        with session_factory(settings)() as session:
            report = verify_chain(session, hmac_key(settings))
        assert not report.ok and report.broken.seq == 2 and "missing" in report.broken.reason

    def test_export_holds_events_and_verifies_offline(self, settings, tmp_path):
        fill(settings, 1)
        event(settings, utc(2026, 3, 1), ev.GROUP_CREATED, "group:x")
        fill(settings, 1)
        out = tmp_path / "audit.jsonl"
        with session_factory(settings)() as session:
            assert export_jsonl(session, out) == 3
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        assert ["event" in line for line in lines] == [False, True, False]
        assert verify_jsonl(out, hmac_key(settings)).ok
        lines[1]["event"]["target"] = "group:y"
        out.write_text("".join(json.dumps(line) + "\n" for line in lines))
        report = verify_jsonl(out, hmac_key(settings))
        assert not report.ok and report.broken.seq == 2


T0 = utc(2026, 3, 1, 9)


def scripted_history(settings):
    """bob (user) and finance: the memo is granted to finance, bob joins, leaves; a second doc to bob alone."""
    event(settings, T0, ev.USER_CREATED, "user:bob", after={"role": "user", "groups": [], "active": True})
    event(settings, T0, ev.GROUP_CREATED, "group:finance", after={"members": []})
    event(settings, T0 + timedelta(hours=1), ev.DOCUMENT_INGESTED, "document:memo.txt",
          after={"access": ["group:finance"], "chunk_ids": ["chunk-1", "chunk-2"]})
    event(settings, T0 + timedelta(days=1), ev.GROUP_MEMBER_ADDED, "group:finance",
          before={"members": []}, after={"members": ["bob"], "user": "bob"})
    event(settings, T0 + timedelta(days=3), ev.GROUP_MEMBER_REMOVED, "group:finance",
          before={"members": ["bob"]}, after={"members": [], "user": "bob"})
    event(settings, T0 + timedelta(days=1), ev.DOCUMENT_INGESTED, "document:plan.txt",
          after={"access": ["user:bob"], "chunk_ids": ["chunk-9"]})
    event(settings, T0 + timedelta(days=5), ev.DOCUMENT_DELETED, "document:plan.txt",
          before={"access": ["user:bob"], "chunk_ids": ["chunk-9"]})
    event(settings, T0, ev.USER_CREATED, "user:bob", tenant="globex",
          after={"role": "user", "groups": ["finance"], "active": True})


class TestAccessReplay:
    def ask(self, settings, document, at, principal="user:bob", tenant="acme"):
        with session_factory(settings)() as session:
            return replay_access(session, tenant=tenant, principal=principal, document=document, at=at)

    def test_a_group_grant_then_a_revocation(self, settings):
        scripted_history(settings)
        assert not self.ask(settings, "memo.txt", T0 + timedelta(hours=12)).allowed  # not yet a member
        yes = self.ask(settings, "memo.txt", T0 + timedelta(days=2))
        assert yes.allowed
        assert [e["action"] for e in yes.events] == [ev.USER_CREATED, ev.DOCUMENT_INGESTED, ev.GROUP_MEMBER_ADDED]
        no = self.ask(settings, "memo.txt", T0 + timedelta(days=4))
        assert not no.allowed and ev.GROUP_MEMBER_REMOVED in [e["action"] for e in no.events]
        assert self.ask(settings, "memo.txt", T0 + timedelta(days=2), principal="group:finance").allowed

    def test_chunk_ids_as_traces_cite_them(self, settings):
        scripted_history(settings)
        assert self.ask(settings, "chunk-2", T0 + timedelta(days=2)).allowed
        assert not self.ask(settings, "chunk-7", T0 + timedelta(days=2)).allowed

    def test_a_direct_grant_ends_with_the_documents_deletion_and_the_users_deactivation(self, settings):
        scripted_history(settings)
        assert not self.ask(settings, "plan.txt", T0).allowed  # not ingested yet
        assert self.ask(settings, "chunk-9", T0 + timedelta(days=2)).allowed
        gone = self.ask(settings, "plan.txt", T0 + timedelta(days=6))
        assert not gone.allowed and gone.events[-1]["action"] == ev.DOCUMENT_DELETED
        event(settings, T0 + timedelta(days=2), ev.USER_DEACTIVATED, "user:bob",
              before={"active": True}, after={"active": False})
        assert not self.ask(settings, "plan.txt", T0 + timedelta(days=2, hours=1)).allowed
        assert self.ask(settings, "plan.txt", T0 + timedelta(days=1, hours=1)).allowed

    def test_another_tenants_history_never_counts(self, settings):
        scripted_history(settings)
        # globex's bob is in globex's finance group, but the memo is acme's.
        assert not self.ask(settings, "memo.txt", T0 + timedelta(days=2), tenant="globex").allowed
        assert not self.ask(settings, "memo.txt", T0 + timedelta(days=2), principal="user:alice").allowed

    def test_cli_exits_0_for_yes_and_1_for_no(self, settings, monkeypatch, capsys):
        from docqa.audit.cli import access_command

        scripted_history(settings)

        class Args:
            principal, document, tenant, json = "user:bob", "memo.txt", "acme", False

        Args.at = T0 + timedelta(days=2)
        assert access_command(Args, settings) == 0
        assert "YES" in capsys.readouterr().out
        Args.at = T0 + timedelta(days=4)
        assert access_command(Args, settings) == 1
        assert "group.member_removed" in capsys.readouterr().out


class TestAuditorApi:
    def test_events_are_listed_filtered_and_exported_for_the_own_tenant_only(self, server):
        client, keys, _ = server
        admin = auth(keys["root"])
        client.post("/v1/admin/users", json={"id": "carol"}, headers=admin)
        client.post("/v1/admin/groups", json={"name": "legal"}, headers=admin)
        client.post("/v1/admin/users", json={"id": "zoe"}, headers=auth(keys["zadmin"]))
        page = client.get("/v1/audit/events", headers=auth(keys["audrey"])).json()
        assert [(e["action"], e["target"]) for e in page["events"]] == [
            (ev.GROUP_CREATED, "group:legal"), (ev.USER_CREATED, "user:carol")]
        only = client.get("/v1/audit/events", params={"action": "user.created", "actor": "root"},
                          headers=auth(keys["audrey"])).json()
        assert only["total"] == 1 and only["events"][0]["target"] == "user:carol"
        theirs = client.get("/v1/audit/events", headers=auth(keys["zaudit"])).json()
        assert [e["target"] for e in theirs["events"]] == ["user:zoe"]
        assert client.get("/v1/audit/events", headers=auth(keys["root"])).status_code == 403
        lines = client.get("/v1/audit/events/export", headers=auth(keys["audrey"])).text.splitlines()
        assert len(lines) == 2 and all("proof" in json.loads(line) for line in lines)
        ecs = [json.loads(line) for line in client.get("/v1/audit/events/export", params={"format": "ecs"},
                                                        headers=auth(keys["audrey"])).text.splitlines()]
        assert [r["event"]["action"] for r in ecs] == [ev.USER_CREATED, ev.GROUP_CREATED]
        assert {r["organization"]["id"] for r in ecs} == {"acme"}
        assert ecs[0]["user"]["name"] == "root" and ecs[0]["event"]["category"] == ["iam"]
        verified = client.post("/v1/traces/verify", headers=auth(keys["audrey"])).json()
        assert verified["ok"]

    def test_access_question_over_the_api(self, server):
        client, keys, settings = server
        admin = auth(keys["root"])
        client.post("/v1/admin/users", json={"id": "carol"}, headers=admin)
        client.post("/v1/admin/groups", json={"name": "legal"}, headers=admin)
        event(settings, None, ev.DOCUMENT_INGESTED, "document:brief.txt", after={"access": ["group:legal"]})
        client.put("/v1/admin/groups/legal/members/carol", headers=admin)
        params = {"principal": "user:carol", "document": "brief.txt", "at": "2100-01-01T00:00:00Z"}
        yes = client.get("/v1/audit/access", params=params, headers=auth(keys["audrey"])).json()
        assert yes["allowed"] and ev.GROUP_MEMBER_ADDED in [e["action"] for e in yes["events"]]
        client.delete("/v1/admin/groups/legal/members/carol", headers=admin)
        no = client.get("/v1/audit/access", params=params, headers=auth(keys["audrey"])).json()
        assert not no["allowed"]
        other = client.get("/v1/audit/access", params=params, headers=auth(keys["zaudit"])).json()
        assert not other["allowed"] and other["events"] == []
        naive = {**params, "at": "2100-01-01T00:00:00"}
        assert client.get("/v1/audit/access", params=naive, headers=auth(keys["audrey"])).status_code == 422


class TestUserChanges:
    def test_a_role_or_group_change_is_one_event_with_what_changed(self, server):
        client, keys, settings = server
        admin = auth(keys["root"])
        before = count(settings)
        changed = client.patch("/v1/admin/users/bob", json={"role": "admin", "groups": ["finance"]}, headers=admin)
        assert changed.status_code == 200 and changed.json()["role"] == "admin"
        last = events_of(settings)[-1]
        assert count(settings) == before + 1
        assert (last.action, last.target, last.before, last.after) == (
            ev.USER_CHANGED, "user:bob", {"groups": [], "role": "user"}, {"groups": ["finance"], "role": "admin"})
        assert client.patch("/v1/admin/users/bob", json={"role": "admin"}, headers=admin).status_code == 200
        assert client.patch("/v1/admin/users/zed", json={"role": "admin"}, headers=admin).status_code == 404
        assert client.patch("/v1/admin/users/bob", json={"role": "root"}, headers=admin).status_code == 422
        assert count(settings) == before + 1  # no-ops and refusals record nothing

    def test_a_group_change_by_patch_counts_in_the_access_replay(self, settings):
        event(settings, T0, ev.USER_CREATED, "user:bob", after={"role": "user", "groups": [], "active": True})
        event(settings, T0, ev.DOCUMENT_INGESTED, "document:memo.txt", after={"access": ["group:finance"]})
        event(settings, T0 + timedelta(days=1), ev.USER_CHANGED, "user:bob",
              before={"groups": []}, after={"groups": ["finance"]})
        event(settings, T0 + timedelta(days=2), ev.USER_CHANGED, "user:bob",
              before={"active": True}, after={"active": False})
        with session_factory(settings)() as session:
            def could(at):
                return replay_access(session, tenant="acme", principal="user:bob", document="memo.txt", at=at).allowed
            assert [could(T0 + timedelta(hours=h)) for h in (1, 25, 49)] == [False, True, False]


class TestDocumentEvents:
    def test_synchronous_ingestion_records_each_written_document(self, tmp_path):
        from docqa.ingestion.pipeline import ingest_paths
        from docqa.runtime import Runtime
        from docqa.stores.factory import build_document_store
        from tests.support.ingestion_fakes import CountingEmbedder

        settings = Settings(data_dir=tmp_path)
        runtime = Runtime(settings, document_store=build_document_store(settings))
        path = tmp_path / "memo.txt"
        path.write_text("The finance memo says the budget grows. " * 10)
        report = ingest_paths(runtime, [path], "acme", ["group:finance"], embedder=CountingEmbedder())
        assert len(report.written) == 1
        ingest_paths(runtime, [path], "acme", ["group:finance"], embedder=CountingEmbedder())  # unchanged: skipped
        [written] = events_of(settings)
        chunk_ids = [d.id for d in runtime.document_store.filter_documents()]
        assert (written.action, written.target, written.tenant) == (ev.DOCUMENT_INGESTED, "document:memo.txt", "acme")
        assert written.after["access"] == ["group:finance"] and sorted(written.after["chunk_ids"]) == sorted(chunk_ids)
        assert written.actor.startswith("cli:")

    def test_reingesting_with_another_access_list_records_before_and_after(self, tmp_path):
        from docqa.ingestion.pipeline import ingest_paths
        from docqa.runtime import Runtime
        from docqa.stores.factory import build_document_store
        from tests.support.ingestion_fakes import CountingEmbedder

        settings = Settings(data_dir=tmp_path)
        runtime = Runtime(settings, document_store=build_document_store(settings))
        path = tmp_path / "memo.txt"
        path.write_text("The finance memo says the budget grows. " * 10)
        ingest_paths(runtime, [path], "acme", ["group:finance", "user:bob"], embedder=CountingEmbedder())
        ingest_paths(runtime, [path], "acme", ["group:finance"], embedder=CountingEmbedder())
        first, second = events_of(settings)
        assert first.before is None
        assert second.before == {"access": ["group:finance", "user:bob"], "chunks": first.after["chunks"]}
        assert second.after["access"] == ["group:finance"]
        stored = runtime.document_store.filter_documents()
        assert stored and all(doc.meta["access"] == ["group:finance"] for doc in stored)

    def test_deleting_through_the_api_records_the_access_list_it_had(self, server):
        from docqa.ingestion.jobs import delete_document
        from docqa.ingestion.pipeline import Source, ingest_documents
        from tests.support.ingestion_fakes import CountingEmbedder

        client, keys, settings = server
        runtime = client.app.state.context.runtime
        ingest_documents(runtime, [Source("memo.txt", "memo.txt", text="Budget memo. " * 30)], "acme",
                         ["group:finance"], embedder=CountingEmbedder())
        store = runtime.document_store
        real = store.delete_documents

        def broken(ids):
            raise OSError("store unavailable")

        store.delete_documents = broken
        before = count(settings)
        with pytest.raises(OSError):
            delete_document(runtime, "acme", "memo.txt", actor="root")
        assert count(settings) == before  # the store refused: no event
        store.delete_documents = real
        response = client.delete("/v1/documents/memo.txt", headers={**auth(keys["root"]), "X-Request-ID": "del-1"})
        assert response.status_code == 200
        last = events_of(settings)[-1]
        assert (last.action, last.target, last.actor, last.request_id) == (
            ev.DOCUMENT_DELETED, "document:memo.txt", "root", "del-1")
        assert last.before["access"] == ["group:finance"] and last.after is None

    def test_a_job_records_each_written_item_with_its_outcome_and_nothing_for_failed_or_skipped_ones(
            self, tmp_path, monkeypatch):
        from haystack.document_stores.in_memory import InMemoryDocumentStore

        from docqa.ingestion.jobs import Upload, submit_job
        from tests.unit.test_ingestion_jobs import FakeRuntime

        FakeRuntime.store = InMemoryDocumentStore()
        monkeypatch.setattr("docqa.runtime.Runtime", FakeRuntime)
        settings = Settings(data_dir=tmp_path, chunk_words=20, chunk_overlap_words=5)
        uploads = [Upload("a.txt", b"alpha " * 30), Upload("sheet.xlsx", b"cells"), Upload("b.txt", b"beta " * 5)]
        job_id = submit_job(settings, tenant="acme", access=["group:hr"], uploads=uploads, submitted_by="root")
        submit_job(settings, tenant="acme", access=["group:hr"], uploads=uploads[:1], submitted_by="root")
        written = events_of(settings)
        assert [(e.action, e.target, e.actor, e.request_id) for e in written] == [
            (ev.DOCUMENT_INGESTED, "document:a.txt", "root", job_id),
            (ev.DOCUMENT_INGESTED, "document:b.txt", "root", job_id)]
        chunk = FakeRuntime.store.filter_documents()[0]
        with session_factory(settings)() as session:
            answer = replay_access(session, tenant="acme", principal="group:hr", document=chunk.id,
                                   at=utc(2100, 1, 1))
        assert answer.allowed and answer.events[0]["target"] == f"document:{chunk.meta['source_id']}"


class TestRetentionPolicy:
    """Retention is a policy with a floor: the default keeps about six months, nothing shorter is accepted."""

    def test_the_policy_archives_what_is_older_than_six_months_and_records_the_run(self, settings, tmp_path):
        from docqa.audit.retention import retain
        from tests.support.audit import record

        now = utc(2026, 11, 1)
        record(settings, asked_at=now - timedelta(days=200))
        record(settings, asked_at=now - timedelta(days=10))
        report = retain(settings, archive=tmp_path / "old.jsonl", now=now)
        assert (report.archived, report.up_to_seq) == (1, 1)
        run = events_of(settings, action=ev.RETENTION_RUN)
        assert len(run) == 1 and (run[0].after["policy_days"], run[0].after["floor_days"]) == (183, 183)

    def test_a_cut_off_inside_the_floor_is_refused_and_leaves_no_trace_of_a_run(self, settings, tmp_path):
        from docqa.audit.retention import RetentionFloorError, retain
        from tests.support.audit import record, traces

        now = utc(2026, 11, 1)
        record(settings, asked_at=now - timedelta(days=100))
        with pytest.raises(RetentionFloorError, match="183 days"):
            retain(settings, before=now - timedelta(days=30), archive=tmp_path / "a.jsonl", now=now)
        assert len(traces(settings)) == 1 and count(settings) == 0 and not (tmp_path / "a.jsonl").exists()

    def test_a_policy_shorter_than_the_floor_is_refused(self, settings, tmp_path, capsys):
        from docqa.audit.cli import retain_command
        from docqa.audit.retention import RetentionFloorError, retain

        short = settings.model_copy(update={"audit_retention_days": 90})
        with pytest.raises(RetentionFloorError, match="below the floor"):
            retain(short, archive=tmp_path / "a.jsonl")

        class Args:
            before, archive = None, tmp_path / "b.jsonl"

        assert retain_command(Args, short) == 2
        assert "below the floor" in capsys.readouterr().err
        # A lower floor, set deliberately, allows the shorter policy.
        lowered = short.model_copy(update={"audit_retention_floor_days": 30})
        assert retain(lowered, archive=tmp_path / "c.jsonl").archived == 0


class TestAdminActionsThroughTheCli:
    """`docqa users ...` / `docqa keys ...` record the same events as the API, with the operator as `cli:<user>`."""

    def run(self, settings, *argv):
        import argparse

        from docqa.server.cli import add_server_commands

        parser = argparse.ArgumentParser()
        add_server_commands(parser.add_subparsers(dest="command"))
        args = parser.parse_args(list(argv))
        return args.handler(args, settings)

    def test_each_cli_change_leaves_exactly_one_event_and_a_failed_one_none(self, settings, capsys):
        from docqa.errors import DocqaError

        assert self.run(settings, "users", "create", "bob", "--tenant", "acme", "--group", "finance") == 0
        capsys.readouterr()
        assert self.run(settings, "keys", "create", "bob", "--tenant", "acme") == 0
        secret = capsys.readouterr().out.strip()
        key_id = events_of(settings, action=ev.KEY_ISSUED)[0].target.removeprefix("key:")
        assert self.run(settings, "keys", "revoke", key_id, "--tenant", "acme") == 0
        assert self.run(settings, "keys", "revoke", key_id, "--tenant", "acme") == 0  # already revoked: no event
        assert self.run(settings, "users", "deactivate", "bob", "--tenant", "acme") == 0
        recorded = [(e.action, e.target, e.tenant, e.actor.startswith("cli:")) for e in events_of(settings)]
        assert recorded == [
            (ev.USER_CREATED, "user:bob", "acme", True), (ev.KEY_ISSUED, f"key:{key_id}", "acme", True),
            (ev.KEY_REVOKED, f"key:{key_id}", "acme", True), (ev.USER_DEACTIVATED, "user:bob", "acme", True)]
        assert events_of(settings, action=ev.USER_CREATED)[0].after["groups"] == ["finance"]
        assert len(secret) > 16 and all(secret not in json.dumps([e.before, e.after]) for e in events_of(settings))
        # A user created with --with-key is two events; a refused creation (the user exists) is none.
        assert self.run(settings, "users", "create", "carol", "--tenant", "acme", "--with-key") == 0
        assert [e.action for e in events_of(settings)][-2:] == [ev.USER_CREATED, ev.KEY_ISSUED]
        before = count(settings)
        with pytest.raises(DocqaError):
            self.run(settings, "users", "create", "carol", "--tenant", "acme")
        with pytest.raises(DocqaError):
            self.run(settings, "users", "deactivate", "nobody", "--tenant", "acme")
        assert count(settings) == before
        with session_factory(settings)() as session:
            assert verify_chain(session, hmac_key(settings)).ok


class TestConfigurationEvents:
    """Models and YAML strategies (by hash) are recorded when the server starts with a changed configuration."""

    def test_a_changed_configuration_is_one_event_and_an_unchanged_restart_none(self, settings, tmp_path):
        from docqa.audit.config_events import record_config_if_changed

        strategies = tmp_path / "strategies"
        strategies.mkdir()
        (strategies / "mine.yaml").write_text("components: {}\n")
        configured = settings.model_copy(update={"pipelines_dir": strategies})
        first = record_config_if_changed(configured)
        assert first is not None and record_config_if_changed(configured) is None
        (strategies / "mine.yaml").write_text("components: {}\n# a changed prompt\n")
        assert record_config_if_changed(configured) is not None
        recorded = events_of(settings, action=ev.CONFIG_LOADED)
        assert len(recorded) == 2
        assert recorded[0].after["pipeline_files"]["mine.yaml"] != recorded[1].after["pipeline_files"]["mine.yaml"]
        assert recorded[1].before == {"hash": recorded[0].after["hash"]}
        assert set(recorded[1].after["models"]) and recorded[1].tenant == ev.SYSTEM_TENANT

    def test_the_server_records_its_configuration_at_start_up_once(self, tmp_path):
        app, _ = build_test_app(tmp_path, ScriptedChatGenerator(default="unused"))
        settings = app.state.context.settings
        from docqa.server.app import create_app

        create_app(settings, runtime=app.state.context.runtime)  # a second worker, same configuration
        assert [e.action for e in events_of(settings, action=ev.CONFIG_LOADED)] == [ev.CONFIG_LOADED]


class TestTopicRefitEvents:
    def runtime(self, tmp_path):
        from haystack import Document

        from docqa.runtime import Runtime
        from docqa.stores.embedded import EmbeddedDocumentStore
        from tests.support.hash_embedder import HashDocumentEmbedder

        settings = Settings(data_dir=tmp_path)
        upgrade_database(settings)
        store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
        runtime = Runtime(settings, document_store=store,
                          chat_generator_factory=lambda role: ScriptedChatGenerator(default="x"))
        words = {"lab_result": "glucose cholesterol serum panel", "medication": "tablet oral dose daily"}
        documents = [Document(id=f"{kind}-{i}", content=f"{text} n{i}", meta={
            "tenant": "t", "access": ["alice"], "record_type": kind}) for kind, text in words.items() for i in range(6)]
        store.write_documents(HashDocumentEmbedder().run(documents=documents)["documents"])
        return runtime

    def test_a_refit_is_one_event_and_a_failed_rewrite_none(self, tmp_path, monkeypatch):
        from docqa.topics import refit_topic_model

        runtime = self.runtime(tmp_path)
        refit_topic_model(runtime, "t", actor="cli:ops")
        refitted = events_of(runtime.settings, action=ev.TOPICS_REFIT)
        assert [(e.tenant, e.actor, e.target, e.after["version"], e.after["documents"]) for e in refitted] == [
            ("t", "cli:ops", "topics:t", 1, 12)]

        def broken(*args, **kwargs):
            raise RuntimeError("store unavailable")

        monkeypatch.setattr(runtime.document_store, "write_documents", broken)
        with pytest.raises(RuntimeError):
            refit_topic_model(runtime, "t")
        assert len(events_of(runtime.settings, action=ev.TOPICS_REFIT)) == 1


def mixed_chain(settings) -> None:
    """Links 1..6: trace, event, trace, event, event, trace."""
    fill(settings, 1)
    event(settings, utc(2026, 3, 1), ev.USER_CREATED, "user:bob", after={"groups": [], "active": True})
    fill(settings, 1)
    event(settings, utc(2026, 3, 2), ev.GROUP_MEMBER_ADDED, "group:finance", after={"members": ["bob"], "user": "bob"})
    event(settings, utc(2026, 3, 3), ev.KEY_REVOKED, "key:k1", after={"revoked": True})
    fill(settings, 1)


def relink_with(settings, key: bytes, from_seq: int, edit) -> None:
    """Edit link `from_seq` with `edit(payload)`, then recompute it and every later link's MAC with `key`."""
    from docqa.audit.canonical import canonical_bytes, link_payload
    from docqa.audit.chain import link_mac
    from docqa.audit.verify import is_event, iter_links

    updates, prev = [], None
    with session_factory(settings)() as session:
        for link in iter_links(session):
            if link.seq < from_seq:
                prev = link.mac
                continue
            payload = link_payload(link)
            if link.seq == from_seq:
                edit(payload)
            mac = link_mac(key, link.seq, prev, canonical_bytes(payload))
            table = "audit_events" if is_event(link) else "audit_traces"
            updates.append((f"UPDATE {table} SET prev_mac = :p, mac = :m WHERE seq = :s",
                            {"p": prev, "m": mac, "s": link.seq}))
            if link.seq == from_seq and is_event(link):
                updates.append(("UPDATE audit_events SET actor = :a WHERE seq = :s",
                                {"a": payload["actor"], "s": link.seq}))
            prev = mac
    tamper(settings, *updates)


class TestTamperBatteryOverMixedLinks:
    """Every kind of tampering with a chain of traces and events is caught, at the right link."""

    @pytest.mark.parametrize(("name", "statements", "seq", "reason"), [
        ("edit an event", [("UPDATE audit_events SET target = 'user:mallory' WHERE seq = 4", {})], 4, "edited"),
        ("edit a trace", [("UPDATE audit_traces SET answer = 'x' WHERE seq = 3", {})], 3, "edited"),
        ("delete an event", [("DELETE FROM audit_events WHERE seq = 2", {})], 2, "missing"),
        ("reorder an event and a trace", [("UPDATE audit_traces SET seq = 100 WHERE seq = 3", {}),
                                          ("UPDATE audit_events SET seq = 3 WHERE seq = 4", {}),
                                          ("UPDATE audit_traces SET seq = 4 WHERE seq = 100", {})], 3, "MAC"),
        # A forged event (no key: it copies link 5's MAC) slipped in as link 6, the last trace pushed to 7.
        ("insert an event between links", [
            ("UPDATE audit_traces SET seq = 7 WHERE seq = 6", {}),
            ("INSERT INTO audit_events (id, seq, at, tenant, actor, action, target, before, after, result, "
             "request_id, prev_mac, mac) SELECT 'forged', 6, at, tenant, actor, 'user.created', 'user:eve', "
             "before, after, result, request_id, mac, mac FROM audit_events WHERE seq = 5", {})], 6, "forged"),
    ])
    def test_tampering_is_caught_at_its_link(self, settings, name, statements, seq, reason):
        mixed_chain(settings)
        tamper(settings, *statements)
        with session_factory(settings)() as session:
            report = verify_chain(session, hmac_key(settings))
        assert not report.ok, name
        assert report.broken.seq == seq and reason.lower() in report.broken.reason.lower(), report.broken

    def test_truncating_the_tail_is_caught_by_a_signed_checkpoint(self, settings):
        from tests.support.audit_contract import head_checkpoint, verify

        mixed_chain(settings)
        checkpoint = head_checkpoint(settings)
        tamper(settings, ("DELETE FROM audit_steps WHERE trace_id IN (SELECT id FROM audit_traces WHERE seq = 6)", {}),
               ("DELETE FROM audit_traces WHERE seq = 6", {}), ("DELETE FROM audit_events WHERE seq = 5", {}))
        assert verify(settings).ok  # the shorter chain is consistent on its own...
        report = verify(settings, checkpoint)
        assert not report.ok and "truncated" in report.broken.reason  # ...but not with what was signed

    def test_recomputing_the_macs_without_the_key_is_caught(self, settings):
        mixed_chain(settings)
        relink_with(settings, b"attacker-guess-" * 3, 4, lambda payload: payload.update(actor="mallory"))
        with session_factory(settings)() as session:
            report = verify_chain(session, hmac_key(settings))
        assert not report.ok and report.broken.seq == 4

    def test_recomputing_with_the_key_is_what_the_checkpoint_is_for(self, settings):
        from tests.support.audit_contract import head_checkpoint, verify

        mixed_chain(settings)
        checkpoint = head_checkpoint(settings)
        relink_with(settings, hmac_key(settings), 4, lambda payload: payload.update(actor="mallory"))
        assert verify(settings).ok  # a key holder can rewrite the live chain consistently...
        report = verify(settings, checkpoint)
        assert not report.ok and "rewritten" in report.broken.reason  # ...but not the signed head
