"""The audit read side as a tenant's auditor sees it: out-of-range times are a 422 with a message on every audit
endpoint, and traces and events are numbered within the tenant (1..n, no gaps from other tenants' links), while
the operator's CLI keeps the chain's global numbers and verifies them."""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select

from docqa.audit.export import verify_jsonl
from docqa.audit.keys import hmac_key
from docqa.audit.models import AuditEvent, AuditTrace
from docqa.audit.timestamps import TimeOutOfRange, as_utc
from docqa.cli import main
from docqa.db import session_factory
from docqa.schema import downgrade_database, upgrade_database
from docqa.server.config import ServerSettings
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

EDGE_TIMES = ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"]
# Every audit endpoint that takes a time, and the parameter names it takes.
TIMED_ENDPOINTS = [
    ("/v1/traces", ("since", "until"), {}),
    ("/v1/traces/export", ("since", "until"), {}),
    ("/v1/audit/events", ("since", "until"), {}),
    ("/v1/audit/events/export", ("since", "until"), {}),
    ("/v1/audit/events/export", ("since", "until"), {"format": "ocsf"}),
    ("/v1/audit/events/export", ("since", "until"), {"format": "ecs"}),
    ("/v1/audit/access", ("at",), {"principal": "user:alice", "document": "memo.txt"}),
]


@pytest.fixture
def server(tmp_path):
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris."))
    with TestClient(app) as client:
        yield client, keys, ServerSettings(data_dir=tmp_path / "data")


def ask(client: TestClient, key: str, question: str) -> str:
    response = client.post("/v1/query", headers=auth(key), json={"question": question, "pipeline": "no_retrieval"})
    assert response.status_code == 200, response.text
    return response.json()["trace_id"]


class TestOutOfRangeTimes:
    @pytest.mark.parametrize("edge", EDGE_TIMES)
    @pytest.mark.parametrize(("path", "names", "extra"), TIMED_ENDPOINTS)
    def test_every_audit_time_parameter_refuses_a_time_with_no_utc_equivalent(self, server, path, names, extra,
                                                                               edge):
        client, keys, _ = server
        for name in names:
            response = client.get(path, params={**extra, name: edge}, headers=auth(keys["audrey"]))
            assert response.status_code == 422, (path, name, response.text)
            error = response.json()["error"]
            assert error["code"] == "invalid_request"
            assert name in error["message"] and "out of range" in error["message"], error

    @pytest.mark.parametrize(("path", "names", "extra"), TIMED_ENDPOINTS)
    def test_the_same_calendar_ends_in_utc_and_near_them_with_offsets_are_answered(self, server, path, names,
                                                                                   extra):
        client, keys, _ = server
        for value in ("0001-01-01T00:00:00Z", "9999-12-31T23:59:59Z", "0001-01-01T14:00:00+14:00",
                      "9999-12-31T09:59:59-14:00"):
            for name in names:
                response = client.get(path, params={**extra, name: value}, headers=auth(keys["audrey"]))
                assert response.status_code == 200, (path, name, value, response.text)

    def test_an_offset_time_filters_by_the_same_instant_in_utc(self, server):
        client, keys, _ = server
        ask(client, keys["alice"], "What is the capital of France?")
        asked_at = client.get("/v1/traces", headers=auth(keys["audrey"])).json()["traces"][0]["asked_at"]
        # One hour before the question, written in +14:00: the trace is after it. SQLite compares stored text, so a
        # time not normalised to UTC would compare its wall clock (14 hours later) and miss the trace.
        from datetime import datetime, timedelta, timezone

        before = datetime.fromisoformat(asked_at.replace("Z", "+00:00")) - timedelta(hours=1)
        since = before.astimezone(timezone(timedelta(hours=14))).isoformat()
        listed = client.get("/v1/traces", params={"since": since}, headers=auth(keys["audrey"])).json()
        assert listed["total"] == 1

    def test_access_still_needs_a_time_zone(self, server):
        client, keys, _ = server
        response = client.get("/v1/audit/access", params={"principal": "user:alice", "document": "memo.txt",
                                                          "at": "2026-03-03T10:00:00"}, headers=auth(keys["audrey"]))
        assert response.status_code == 422 and "time zone" in response.json()["error"]["message"]

    def test_as_utc_names_the_time_it_cannot_convert(self):
        from datetime import datetime

        with pytest.raises(TimeOutOfRange, match=r"0001-01-01T00:00:00\+14:00 is out of range"):
            as_utc(datetime.fromisoformat("0001-01-01T00:00:00+14:00"))

    @pytest.mark.parametrize("command", [["audit", "access", "--principal", "user:a", "--document", "d", "--at"],
                                         ["audit", "events", "--since"], ["audit", "export", "--out", "x", "--since"]])
    def test_the_cli_refuses_them_as_a_usage_error(self, tmp_path, monkeypatch, capsys, command):
        monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path / "data"))
        with pytest.raises(SystemExit) as exited:
            main([*command, EDGE_TIMES[0]])
        assert exited.value.code == 2
        assert "out of range" in capsys.readouterr().err


class TestPerTenantNumbers:
    def interleave(self, client, keys, rounds: int = 3) -> tuple[list[str], list[str]]:
        acme, globex = [], []
        for n in range(rounds):
            acme.append(ask(client, keys["alice"], f"acme question {n}"))
            globex.append(ask(client, keys["zed"], f"globex question {n}"))
            globex.append(ask(client, keys["zed"], f"globex follow-up {n}"))
        return acme, globex

    def test_each_auditor_sees_its_traces_numbered_one_to_n(self, server):
        client, keys, _ = server
        acme, globex = self.interleave(client, keys)
        for auditor, ids in (("audrey", acme), ("zaudit", globex)):
            page = client.get("/v1/traces", headers=auth(keys[auditor])).json()["traces"]
            assert [(t["id"], t["seq"]) for t in reversed(page)] == [(i, n) for n, i in enumerate(ids, start=1)]
            for number, trace_id in enumerate(ids, start=1):
                proof = client.get(f"/v1/traces/{trace_id}", headers=auth(keys[auditor])).json()["proof"]
                assert set(proof) == {"seq", "mac"} and proof["seq"] == number
            lines = [json.loads(line) for line in
                     client.get("/v1/traces/export", headers=auth(keys[auditor])).text.splitlines()]
            assert [(line["trace"]["id"], line["proof"]["seq"]) for line in lines] == [
                (i, n) for n, i in enumerate(ids, start=1)]
            assert all("prev_mac" not in line["proof"] for line in lines)

    def test_the_operator_keeps_the_global_chain_and_it_verifies(self, server, tmp_path, monkeypatch):
        client, keys, settings = server
        acme, globex = self.interleave(client, keys)
        monkeypatch.setenv("DOCQA_DATA_DIR", str(settings.data_dir))
        out = tmp_path / "all.jsonl"
        assert main(["audit", "export", "--out", str(out)]) == 0
        traces = [line for line in map(json.loads, out.read_text().splitlines()) if "trace" in line]
        global_seq = {line["trace"]["id"]: line["proof"]["seq"] for line in traces}
        assert [global_seq[i] for i in acme] != list(range(1, len(acme) + 1))
        assert sorted(global_seq[i] for i in acme + globex) == sorted(global_seq.values())
        assert verify_jsonl(out, hmac_key(settings)).ok

    def test_a_tenant_export_line_matches_its_link_in_the_chain(self, server):
        # What the operator checks for a line an auditor hands over: same payload, same MAC as the chain's link.
        from docqa.audit.canonical import canonical_bytes
        from docqa.audit.chain import link_mac

        client, keys, settings = server
        self.interleave(client, keys, rounds=2)
        lines = [json.loads(line) for line in
                 client.get("/v1/traces/export", headers=auth(keys["audrey"])).text.splitlines()]
        with session_factory(settings)() as session:
            for line in lines:
                row = session.get(AuditTrace, line["trace"]["id"])
                assert row.mac == line["proof"]["mac"]
                assert link_mac(hmac_key(settings), row.seq, row.prev_mac, canonical_bytes(line["trace"])) == row.mac

    def test_verifying_a_tenant_export_as_a_chain_says_what_it_is(self, server, tmp_path):
        client, keys, settings = server
        self.interleave(client, keys, rounds=1)
        out = tmp_path / "acme.jsonl"
        out.write_text(client.get("/v1/traces/export", headers=auth(keys["audrey"])).text)
        report = verify_jsonl(out, hmac_key(settings))
        assert not report.ok and "tenant's export" in report.broken.reason

    def test_events_are_numbered_within_the_tenant_in_lists_exports_and_access_answers(self, server):
        client, keys, settings = server
        for n in range(2):
            assert client.post("/v1/admin/users", json={"id": f"z{n}"}, headers=auth(keys["zadmin"])).status_code \
                == 201
            assert client.post("/v1/admin/users", json={"id": f"a{n}"}, headers=auth(keys["root"])).status_code == 201
        events = client.get("/v1/audit/events", headers=auth(keys["audrey"])).json()["events"]
        assert [e["seq"] for e in reversed(events)] == [1, 2]
        for fmt, sequence in (("jsonl", lambda r: r["proof"]["seq"]),
                              ("ocsf", lambda r: r["metadata"]["sequence"]),
                              ("ecs", lambda r: r["event"]["sequence"])):
            records = [json.loads(line) for line in client.get("/v1/audit/events/export", params={"format": fmt},
                                                                headers=auth(keys["zaudit"])).text.splitlines()]
            assert [sequence(r) for r in records] == [1, 2], fmt
        answer = client.get("/v1/audit/access", params={"principal": "user:a1", "document": "memo.txt",
                                                        "at": "9999-01-01T00:00:00Z"},
                            headers=auth(keys["audrey"])).json()
        assert [e["seq"] for e in answer["events"]] == [2]
        with session_factory(settings)() as session:
            global_seq = session.scalar(select(AuditEvent.seq).where(AuditEvent.target == "user:a1"))
        assert global_seq > 2  # the chain counts globex's events (and the server's) between acme's


def test_the_migration_numbers_existing_links_per_tenant_in_chain_order(server):
    client, keys, settings = server
    acme, globex = TestPerTenantNumbers().interleave(client, keys, rounds=2)
    downgrade_database(settings, "0008_ingest_job_collection")
    upgrade_database(settings)
    with session_factory(settings)() as session:
        numbered = {row.id: row.tenant_seq for row in session.scalars(select(AuditTrace))}
    assert [numbered[i] for i in acme] == [1, 2] and [numbered[i] for i in globex] == [1, 2, 3, 4]
    # The counters continue after the backfilled numbers.
    later = ask(client, keys["alice"], "after the upgrade")
    with session_factory(settings)() as session:
        assert session.get(AuditTrace, later).tenant_seq == 3
