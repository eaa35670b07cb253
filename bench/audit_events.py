"""Audit event figures: the overhead an event adds to an admin change (p50/p95), verification time per 10,000
mixed links (traces and events), and ECS / OCSF export throughput.

    python bench/audit_events.py                 # PostgreSQL on 127.0.0.1:5432 (throwaway database) and SQLite
    python bench/audit_events.py --links 20000

The admin change is what `POST /v1/admin/groups` does: create a group and commit, timed without an event (a
plain session) and with its event (chain lock, tail lookup, HMAC, insert) in the same transaction; on
PostgreSQL also the real request through the app (TestClient), with the event append inside it timed apart.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from audit_chain import sample_result

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


@contextmanager
def postgres_database():
    from sqlalchemy import create_engine, text

    name = f"docqa_bench_events_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def admin_overhead(settings: Any, count: int) -> None:
    from docqa.accounts import directory
    from docqa.audit import events as ev
    from docqa.audit.events import append_event
    from docqa.audit.recorder import audit_session
    from docqa.db import session_factory

    plain, audited = [], []
    for n in range(count):
        started = time.perf_counter()
        with session_factory(settings)() as session:
            directory.create_group(session, "acme", f"plain-{n}")
            session.commit()
        plain.append(time.perf_counter() - started)
        started = time.perf_counter()
        with audit_session(settings) as session:
            directory.create_group(session, "acme", f"audited-{n}")
            append_event(session, settings, tenant="acme", actor="root", action=ev.GROUP_CREATED,
                         target=f"group:audited-{n}", after={"members": []}, request_id=uuid.uuid4().hex)
        audited.append(time.perf_counter() - started)
    ms = 1000
    print(f"  group creation, {count} each: without event p50 {statistics.median(plain) * ms:.2f} ms "
          f"p95 {pct(plain, 0.95) * ms:.2f} ms; with event p50 {statistics.median(audited) * ms:.2f} ms "
          f"p95 {pct(audited, 0.95) * ms:.2f} ms; overhead p50 "
          f"{(statistics.median(audited) - statistics.median(plain)) * ms:.2f} ms")


def api_overhead(settings: Any, count: int) -> None:
    """POST /v1/admin/groups through the app: the request's time and, within it, the event append's."""
    from fastapi.testclient import TestClient

    from docqa.accounts import directory
    from docqa.accounts.keys import create_key
    from docqa.db import session_factory
    from docqa.server.app import create_app
    from docqa.server.config import ServerSettings
    from docqa.server.routes import accounts

    # The per-key rate limit would otherwise throttle the loop (it is not what is measured).
    server_settings = ServerSettings(**settings.model_dump(), rate_limit_per_minute=10**6, rate_limit_burst=10**6)
    with session_factory(server_settings)() as session:
        directory.create_user(session, "acme", "bench-admin", "admin", [])
        key, _ = create_key(session, "acme", "bench-admin", name="bench")
        session.commit()
    appends: list[float] = []
    real_append = accounts.append_event

    def timed_append(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return real_append(*args, **kwargs)
        finally:
            appends.append(time.perf_counter() - started)

    accounts.append_event = timed_append
    requests: list[float] = []
    try:
        with TestClient(create_app(server_settings)) as client:
            for n in range(count):
                started = time.perf_counter()
                response = client.post("/v1/admin/groups", json={"name": f"api-{n}"},
                                       headers={"Authorization": f"Bearer {key}"})
                requests.append(time.perf_counter() - started)
                assert response.status_code == 201, response.text
    finally:
        accounts.append_event = real_append
    ms = 1000
    print(f"  POST /v1/admin/groups, {count} requests: request p50 {statistics.median(requests) * ms:.2f} ms "
          f"p95 {pct(requests, 0.95) * ms:.2f} ms; its event append (chain lock, tail, HMAC, insert) p50 "
          f"{statistics.median(appends) * ms:.2f} ms p95 {pct(appends, 0.95) * ms:.2f} ms")


def fill_mixed(settings: Any, links: int) -> None:
    from docqa.audit import events as ev
    from docqa.audit.events import append_event
    from docqa.audit.keys import hmac_key
    from docqa.audit.recorder import TraceRecord, append_trace, audit_session, build_trace

    result = sample_result()
    key = hmac_key(settings)
    with audit_session(settings) as session:
        for n in range(links):
            if n % 5 == 0:  # one trace (6 steps) per four events
                trace = build_trace(settings, TraceRecord(asked_by="alice", tenant="acme", question="q",
                                                          pipeline="bench", models={}, result=result))
                append_trace(session, trace, key)
            else:
                append_event(session, settings, tenant="acme", actor="root", action=ev.GROUP_MEMBER_ADDED,
                             target=f"group:g{n % 50}", before={"members": []},
                             after={"members": [f"u{n}"], "user": f"u{n}"})


def verify_and_export(settings: Any, links: int, tmp: Path) -> None:
    from docqa.audit.keys import hmac_key
    from docqa.audit.siem import export_ecs
    from docqa.audit.verify import verify_chain
    from docqa.db import session_factory

    started = time.perf_counter()
    fill_mixed(settings, links)
    print(f"  appended {links} mixed links (1 trace : 4 events) in {time.perf_counter() - started:.1f} s")
    with session_factory(settings)() as session:
        started = time.perf_counter()
        report = verify_chain(session, hmac_key(settings))
        took = time.perf_counter() - started
    print(f"  verify: ok={report.ok} {report.checked} links in {took:.2f} s "
          f"({took / report.checked * 10_000:.2f} s per 10,000 mixed links)")
    with session_factory(settings)() as session:
        started = time.perf_counter()
        count = export_ecs(session, tmp / f"ecs-{uuid.uuid4().hex[:6]}.jsonl")
        took = time.perf_counter() - started
    print(f"  ECS export: {count} records in {took:.2f} s ({count / took:,.0f} records/s)")
    from docqa.audit.ocsf import ocsf_lines
    from docqa.audit.shipping import FileSink, ship

    with session_factory(settings)() as session:
        started = time.perf_counter()
        count = ship(session, FileSink(tmp / f"ocsf-{uuid.uuid4().hex[:6]}.jsonl"), render=ocsf_lines)
        took = time.perf_counter() - started
    print(f"  OCSF export to a file (fsync per 200-line batch): {count} records in {took:.2f} s "
          f"({count / took:,.0f} records/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--links", type=int, default=10_000)
    parser.add_argument("--admin-actions", type=int, default=200)
    args = parser.parse_args()
    from docqa.schema import upgrade_database
    from docqa.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        with postgres_database() as url:
            settings = Settings(data_dir=Path(tmp) / "pg", database_url=url)
            upgrade_database(settings)
            print("PostgreSQL")
            admin_overhead(settings, args.admin_actions)
            api_overhead(settings, args.admin_actions)
            verify_and_export(settings, args.links, Path(tmp))
        settings = Settings(data_dir=Path(tmp) / "sqlite")
        upgrade_database(settings)
        print("SQLite")
        admin_overhead(settings, args.admin_actions)
        verify_and_export(settings, args.links, Path(tmp))


if __name__ == "__main__":
    main()
