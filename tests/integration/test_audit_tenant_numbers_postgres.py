"""Per-tenant link numbers on a real PostgreSQL: concurrent writers of two tenants never duplicate or skip a
number, the application role may advance the counters, and migration 0009 numbers existing links through the
append-only triggers, which stay in force afterwards."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, select, text
from sqlalchemy.exc import DBAPIError

from docqa.audit import events as ev
from docqa.audit.events import append_event
from docqa.audit.models import AuditEvent, AuditTrace
from docqa.audit.recorder import TraceRecord, audit_session, record_answer
from docqa.db import session_factory
from docqa.schema import downgrade_database, upgrade_database
from docqa.settings import Settings
from tests.support.audit import tree_result
from tests.support.audit_contract import verify
from tests.support.postgres import database_url, login_role, throwaway_database

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(tmp_path):
    with throwaway_database("tenantseq") as url:
        settings = Settings(data_dir=tmp_path / "data", database_url=url)
        upgrade_database(settings)
        yield settings


def answer(settings: Settings, tenant: str) -> str:
    return record_answer(settings, TraceRecord(asked_by="someone", tenant=tenant, question="q?", pipeline="tree_test",
                                               models={}, result=tree_result()))


def event(settings: Settings, tenant: str, n: int) -> str:
    with audit_session(settings) as session:
        return append_event(session, settings, tenant=tenant, actor="root", action=ev.GROUP_CREATED,
                            target=f"group:g{n}").id


def numbers(settings: Settings, model: type) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    with session_factory(settings)() as session:
        for row in session.scalars(select(model).order_by(model.seq)):
            found.setdefault(row.tenant, []).append(row.tenant_seq)
    return found


def test_concurrent_writers_of_two_tenants_number_each_tenant_without_gaps(settings):
    with ThreadPoolExecutor(4) as pool:
        jobs = [pool.submit(answer, settings, tenant) for tenant in ["acme", "globex"] * 8]
        jobs += [pool.submit(event, settings, tenant, n) for n, tenant in enumerate(["acme", "globex"] * 5)]
        for job in jobs:
            job.result()
    assert numbers(settings, AuditTrace) == {"acme": list(range(1, 9)), "globex": list(range(1, 9))}
    events = numbers(settings, AuditEvent)
    assert events["acme"] == list(range(1, 6)) and events["globex"] == list(range(1, 6))
    assert verify(settings).ok


def test_the_application_role_advances_the_counters(settings):
    answer(settings, "acme")
    database = settings.resolved_database_url().rsplit("/", 1)[1]
    with login_role("docqa_app") as role:
        app = Settings(data_dir=settings.data_dir, database_url=database_url(database, role))
        answer(app, "acme")
        event(app, "acme", 1)
    assert numbers(settings, AuditTrace) == {"acme": [1, 2]}
    assert numbers(settings, AuditEvent)["acme"] == [1]


def test_the_migration_backfills_through_the_triggers_and_leaves_them_on(settings):
    for tenant in ("acme", "globex", "acme", "globex", "globex"):
        answer(settings, tenant)
    event(settings, "acme", 1)
    downgrade_database(settings, "0008_ingest_job_collection")
    upgrade_database(settings)
    assert numbers(settings, AuditTrace) == {"acme": [1, 2], "globex": [1, 2, 3]}
    assert numbers(settings, AuditEvent)["acme"] == [1]
    answer(settings, "globex")
    assert numbers(settings, AuditTrace)["globex"] == [1, 2, 3, 4]
    engine = create_engine(settings.resolved_database_url())
    try:
        with pytest.raises(DBAPIError, match="append-only"), engine.begin() as conn:
            conn.execute(text("UPDATE audit_traces SET tenant_seq = 7"))
    finally:
        engine.dispose()
    assert verify(settings).ok
