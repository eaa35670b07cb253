"""OCSF export of the audit chain: each link is a valid event of its class (the classes' required attributes),
verifies with the chain proofs it carries, and a killed or refused export resumes with no gap and no duplicate."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from docqa.audit import events as ev
from docqa.audit.canonical import canonical_bytes
from docqa.audit.chain import link_mac
from docqa.audit.events import append_event
from docqa.audit.keys import hmac_key
from docqa.audit.models import AuditEvent
from docqa.audit.ocsf import ocsf_lines, ocsf_record, verify_ocsf_lines
from docqa.audit.recorder import audit_session
from docqa.audit.shipping import FileSink, HttpSink, StdoutSink, ship
from docqa.audit.verify import iter_links
from docqa.db import session_factory
from docqa.schema import upgrade_database
from docqa.settings import Settings
from tests.support.audit import fill, utc

ROOT = Path(__file__).resolve().parents[2]

# Required attributes per OCSF 1.3 class (base event + class), and each class's category and activity ids.
BASE_REQUIRED = ("activity_id", "category_uid", "class_uid", "metadata", "severity_id", "time", "type_uid")
CLASSES = {
    3001: {"category": 3, "activities": {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 99}, "required": ("user",)},
    3002: {"category": 3, "activities": {0, 1, 2, 3, 4, 5, 6, 7, 99}, "required": ("user",)},
    6003: {"category": 6, "activities": {0, 1, 2, 3, 4, 99}, "required": ("actor", "api", "src_endpoint")},
}


def ocsf_problems(record: dict) -> list[str]:
    """What makes `record` an invalid OCSF event of its class (empty: valid)."""
    problems = [f"missing {name}" for name in BASE_REQUIRED if name not in record]
    if problems:
        return problems
    spec = CLASSES.get(record["class_uid"])
    if spec is None:
        return [f"unexpected class {record['class_uid']}"]
    problems += [f"missing {name}" for name in spec["required"] if name not in record]
    if record["category_uid"] != spec["category"]:
        problems.append("category does not match the class")
    if record["activity_id"] not in spec["activities"]:
        problems.append(f"activity {record['activity_id']} not in the class")
    if record["type_uid"] != record["class_uid"] * 100 + record["activity_id"]:
        problems.append("type_uid is not class_uid * 100 + activity_id")
    if not isinstance(record["time"], int) or record["time"] < 10**12:
        problems.append("time is not epoch milliseconds")
    if record["severity_id"] not in {0, 1, 2, 3, 4, 5, 6, 99}:
        problems.append("severity_id out of range")
    if record.get("status_id") not in {0, 1, 2, 99}:
        problems.append("status_id missing or out of range")
    metadata = record["metadata"]
    if not re.fullmatch(r"\d+\.\d+\.\d+", str(metadata.get("version"))):
        problems.append("metadata.version is not a schema version")
    product = metadata.get("product") or {}
    if not (product.get("vendor_name") and product.get("name")):
        problems.append("metadata.product lacks vendor_name/name")
    if "api" in record and not record["api"].get("operation"):
        problems.append("api.operation missing")
    for who in ("user", "actor"):
        if who in record:
            user = record[who]["user"] if who == "actor" else record[who]
            if not (user.get("uid") or user.get("name")):
                problems.append(f"{who} names nobody")
    if "src_endpoint" in record and not set(record["src_endpoint"]) & {"ip", "name", "hostname", "uid", "svc_name"}:
        problems.append("src_endpoint has none of ip/name/hostname/uid")
    return problems


@pytest.fixture
def settings(tmp_path) -> Settings:
    settings = Settings(data_dir=tmp_path)
    upgrade_database(settings)
    return settings


def add_events(settings: Settings, count: int, tenant: str = "acme") -> None:
    with audit_session(settings) as session:
        for n in range(count):
            append_event(session, settings, tenant=tenant, actor="root", action=ev.GROUP_MEMBER_ADDED,
                         target=f"group:g{n % 7}", before={"members": []},
                         after={"members": [f"u{n}"], "user": f"u{n}"},
                         request_id=f"req-{n}")


def every_action(settings: Settings) -> None:
    at = utc(2026, 3, 1, 9)
    with audit_session(settings) as session:
        for n, action in enumerate(ev.ACTIONS):
            target = {"key.": "key:k1", "user.": "user:bob", "group.": "group:finance", "auth.": "key:unknown"}
            append_event(session, settings, tenant="acme", actor="root" if n % 2 else "cli:ops", action=action,
                         target=next((t for p, t in target.items() if action.startswith(p)), "document:memo.txt"),
                         after={"user": "bob", "address": "10.0.0.9"},
                         result=ev.RESULT_FAILURE if action == ev.SIGNIN_FAILED else ev.RESULT_SUCCESS,
                         request_id="req-1" if n % 3 else None, at=at + timedelta(minutes=n))


def shipped_seqs(lines: list[bytes]) -> list[int]:
    return [json.loads(line)["metadata"]["sequence"] for line in lines]


class TestOcsfShape:
    def test_every_action_and_a_trace_is_a_valid_event_of_its_class(self, settings):
        fill(settings, 1)
        every_action(settings)
        with session_factory(settings)() as session:
            records = [ocsf_record(link) for link in iter_links(session)]
        assert len(records) == len(ev.ACTIONS) + 1
        assert {r["class_uid"] for r in records} == {3001, 3002, 6003}
        for record in records:
            assert ocsf_problems(record) == [], record
        by_action = {r["unmapped"]["docqa"]["payload"].get("action"): r for r in records}
        signin = by_action[ev.SIGNIN_FAILED]
        assert (signin["class_uid"], signin["activity_id"], signin["status_id"]) == (3002, 1, 2)
        assert signin["src_endpoint"] == {"ip": "10.0.0.9"}
        assert by_action[ev.USER_DEACTIVATED]["user"]["uid"] == "bob"
        assert by_action[ev.GROUP_MEMBER_ADDED]["user"]["uid"] == "bob"
        deleted = by_action[ev.DOCUMENT_DELETED]
        assert (deleted["type_uid"], deleted["resources"][0]["uid"]) == (600304, "document:memo.txt")
        assert deleted["time"] == int(utc(2026, 3, 1, 9).timestamp() * 1000) + ev.ACTIONS.index(
            ev.DOCUMENT_DELETED) * 60_000
        assert by_action[None]["api"]["operation"] == "question.answered"

    def test_the_checker_catches_a_broken_record(self):
        # The validator used above must be able to fail.
        assert "missing user" in ocsf_problems({**dict.fromkeys(BASE_REQUIRED, 0), "class_uid": 3001,
                                                "category_uid": 3, "metadata": {}})

    def test_lines_verify_with_the_key_and_an_edit_or_a_dropped_line_does_not(self, settings):
        fill(settings, 1)
        add_events(settings, 3)
        fill(settings, 1)
        with session_factory(settings)() as session:
            lines = [line for _, line in ocsf_lines(session)]
        key = hmac_key(settings)
        assert verify_ocsf_lines(lines, key).checked == 5
        edited = json.loads(lines[2])
        edited["unmapped"]["docqa"]["payload"]["actor"] = "mallory"
        report = verify_ocsf_lines([*lines[:2], json.dumps(edited).encode(), *lines[3:]], key)
        assert not report.ok and report.broken.seq == 3
        report = verify_ocsf_lines([*lines[:2], *lines[3:]], key)
        assert not report.ok and "missing" in report.broken.reason
        assert verify_ocsf_lines(lines[2:], key).ok  # a resumed export verifies from its first line
        assert not verify_ocsf_lines(lines, b"x" * 32).ok


KILLER = """
import os, signal, sys
from pathlib import Path
from docqa.audit import shipping
from docqa.audit.ocsf import ocsf_lines
from docqa.db import session_factory
from docqa.settings import Settings

sends = 0
real_send = shipping.FileSink.send

def send(self, lines, first, last):
    global sends
    sends += 1
    if sends == 3:  # die in the middle of writing the third batch, half a line on disk
        data = b"".join(lines)
        self._fh.write(data[: len(data) // 2 + 7])
        self._fh.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    real_send(self, lines, first, last)

shipping.FileSink.send = send
settings = Settings(data_dir=Path(sys.argv[1]))
with session_factory(settings)() as session:
    shipping.ship(session, shipping.FileSink(Path(sys.argv[2])), render=ocsf_lines, batch=50, resume=True)
"""


class TestResume:
    def test_a_killed_file_export_resumes_without_gaps_or_duplicates(self, settings, tmp_path):
        fill(settings, 3)
        add_events(settings, 300)
        out = tmp_path / "ocsf.jsonl"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        killed = subprocess.run([sys.executable, "-c", KILLER, str(settings.data_dir), str(out)], env=env,
                                cwd=ROOT, timeout=120)
        assert killed.returncode == -signal.SIGKILL
        assert not out.read_bytes().endswith(b"\n")  # the kill left half a line
        # Two batches were whole; the complete lines of the third count, its cut-off line does not.
        resumed_at = FileSink(out).resume_seq()
        assert 100 < resumed_at < 150
        with session_factory(settings)() as session:
            assert ship(session, FileSink(out), render=ocsf_lines, resume=True, batch=50) == 303 - resumed_at
        lines = out.read_bytes().splitlines(keepends=True)
        assert shipped_seqs(lines) == list(range(1, 304))
        assert verify_ocsf_lines(lines, hmac_key(settings)).ok
        with session_factory(settings)() as session:  # nothing new: nothing shipped, nothing duplicated
            assert ship(session, FileSink(out), render=ocsf_lines, resume=True) == 0
        assert len(out.read_bytes().splitlines()) == 303

    def test_stdout_resumes_from_its_state_file(self, settings, tmp_path, capsysbinary):
        add_events(settings, 5)
        state = tmp_path / "stdout.state"
        with session_factory(settings)() as session:
            assert ship(session, StdoutSink(state), render=ocsf_lines, resume=True, batch=2) == 5
            add_events(settings, 2)
            assert ship(session, StdoutSink(state), render=ocsf_lines, resume=True, batch=2) == 2
        assert shipped_seqs(capsysbinary.readouterr().out.splitlines()) == list(range(1, 8))


class Collector(BaseHTTPRequestHandler):
    received: ClassVar[list[bytes]] = []
    ranges: ClassVar[list[str]] = []
    fail_on: ClassVar[set[int]] = set()
    calls = 0

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).calls += 1
        if type(self).calls in self.fail_on:
            self.send_response(503)
            self.end_headers()
            return
        type(self).received.extend(body.splitlines(keepends=True))
        type(self).ranges.append(self.headers["X-Docqa-Audit-Seq"])
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def collector():
    Collector.received, Collector.ranges, Collector.fail_on, Collector.calls = [], [], set(), 0
    server = HTTPServer(("127.0.0.1", 0), Collector)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/ingest", Collector
    server.shutdown()
    server.server_close()


class TestHttpCollector:
    def test_a_refused_batch_stops_the_export_and_the_next_run_resumes_there(self, settings, tmp_path, collector):
        url, received = collector
        fill(settings, 1)
        add_events(settings, 9)
        received.fail_on = {3}
        state = tmp_path / "http.state"
        with session_factory(settings)() as session:
            with pytest.raises(OSError):
                ship(session, HttpSink(url, state=state), render=ocsf_lines, resume=True, batch=3)
            assert json.loads(state.read_text()) == {"seq": 6}
            assert ship(session, HttpSink(url, state=state), render=ocsf_lines, resume=True, batch=3) == 4
        assert shipped_seqs(received.received) == list(range(1, 11))
        assert received.ranges == ["1-3", "4-6", "7-9", "10-10"]
        assert verify_ocsf_lines(received.received, hmac_key(settings)).ok

    def test_the_cli_ships_to_the_configured_collector(self, settings, collector, capsys):
        from docqa.audit.cli import export_command

        url, received = collector
        add_events(settings, 2)
        add_events(settings, 1, tenant="globex")
        settings = settings.model_copy(update={"audit_export_url": url})

        class Args:
            format, out, url, since, until, after_seq, resume, state = "ocsf", None, None, None, None, 0, True, None
            tenant, events_only = "acme", True

        assert export_command(Args, settings) == 0
        assert shipped_seqs(received.received) == [1, 2]
        assert "2 OCSF records shipped" in capsys.readouterr().err
        assert verify_ocsf_lines(received.received, hmac_key(settings), contiguous=False).ok


class TestAuditorExport:
    def test_an_auditor_exports_and_counts_only_their_tenants_events_as_valid_ocsf(self, tmp_path):
        from fastapi.testclient import TestClient

        from tests.support.scripted_chat import ScriptedChatGenerator
        from tests.support.server_app import auth, build_test_app

        app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="unused"))
        with TestClient(app) as client:
            client.post("/v1/admin/users", json={"id": "carol"}, headers=auth(keys["root"]))
            client.put("/v1/admin/groups/legal/members/carol", headers=auth(keys["root"]))  # no such group: refused
            client.post("/v1/admin/groups", json={"name": "legal"}, headers=auth(keys["root"]))
            client.put("/v1/admin/groups/legal/members/carol", headers=auth(keys["root"]))
            client.post("/v1/admin/users", json={"id": "zoe"}, headers=auth(keys["zadmin"]))
            client.get("/v1/me", headers={"Authorization": "Bearer dq_wrong"})  # a failed sign-in, no tenant
            lines = client.get("/v1/audit/events/export", params={"format": "ocsf"},
                               headers=auth(keys["audrey"])).content.splitlines()
            total = client.get("/v1/audit/events", headers=auth(keys["audrey"])).json()["total"]
            other = client.get("/v1/audit/events/export", params={"format": "ocsf"},
                               headers=auth(keys["zaudit"])).content.splitlines()
        records = [json.loads(line) for line in lines]
        assert [r["metadata"]["tenant_uid"] for r in records] == ["acme"] * len(records) and total == len(records) == 3
        assert [(r["class_uid"], r["activity_id"]) for r in records] == [(3001, 1), (6003, 1), (3001, 7)]
        assert all(ocsf_problems(r) == [] for r in records)
        assert [json.loads(line)["user"]["uid"] for line in other] == ["zoe"]
        # Numbered within the tenant, without the chain position (operators verify the chain itself); each
        # record's MAC is its link's in the chain, over the payload it carries.
        settings = app.state.context.settings
        assert [r["unmapped"]["docqa"]["chain"]["seq"] for r in records] == [1, 2, 3]
        assert verify_ocsf_lines(lines, hmac_key(settings), contiguous=False).broken is not None
        with session_factory(settings)() as session:
            for record in records:
                docqa = record["unmapped"]["docqa"]
                link = session.get(AuditEvent, docqa["payload"]["id"])
                payload = canonical_bytes(docqa["payload"])
                assert link_mac(hmac_key(settings), link.seq, link.prev_mac, payload) == docqa["chain"]["mac"]


def test_docqa_audit_verify_checks_an_ocsf_file(settings, tmp_path, capsys):
    import argparse

    from docqa.audit import cli

    fill(settings, 1)
    add_events(settings, 3)
    out = tmp_path / "ocsf.jsonl"
    with session_factory(settings)() as session:
        ship(session, FileSink(out), render=ocsf_lines)

    def run(*argv):
        parser = argparse.ArgumentParser()
        cli.add_audit_commands(parser.add_subparsers(dest="command"))
        args = parser.parse_args(list(argv))
        return args.handler(args, settings)

    assert run("audit", "verify", "--ocsf", str(out)) == 0
    assert "OK: 4 links verified" in capsys.readouterr().out
    lines = out.read_bytes().splitlines(keepends=True)
    out.write_bytes(lines[0] + b"".join(lines[2:]))
    assert run("audit", "verify", "--ocsf", str(out)) == 1
    assert "BROKEN at link 2" in capsys.readouterr().out
