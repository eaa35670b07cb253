"""Audit trail on a real PostgreSQL (throwaway database per test) and every registered pipeline's traces."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.exc import DBAPIError

from docqa.access import AccessScope
from docqa.audit.models import AUDIT_TABLES
from docqa.audit.recorder import close_interrupted_runs, open_run
from docqa.questions.audited_run import AuditedRun
from docqa.schema import downgrade_database, upgrade_database
from docqa.settings import Settings
from tests.support.audit import SECRET, fill, schema_differences, traces
from tests.support.audit_contract import AuditTrailContract, verify
from tests.support.postgres import database_url, login_role, throwaway_database

pytestmark = pytest.mark.integration


@pytest.fixture
def pg_url():
    with throwaway_database("audit") as url:
        yield url


@pytest.fixture
def settings(pg_url, tmp_path):
    settings = Settings(data_dir=tmp_path / "data", database_url=pg_url, llm_api_key=SECRET)
    upgrade_database(settings)
    return settings


class TestAuditTrailOnPostgres(AuditTrailContract):
    pass


def triggers(url: str) -> set[str]:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal"))
            return {r[0] for r in rows}
    finally:
        engine.dispose()


class TestPostgresMigrations:
    def test_upgrade_downgrade_upgrade_and_models_match(self, pg_url, tmp_path):
        settings = Settings(data_dir=tmp_path, database_url=pg_url)
        upgrade_database(settings)
        assert "audit_traces_append_only" in triggers(pg_url)
        downgrade_database(settings, "base")
        engine = create_engine(pg_url)
        assert not set(AUDIT_TABLES) & set(inspect(engine).get_table_names())
        engine.dispose()
        assert triggers(pg_url) == set()
        upgrade_database(settings)
        assert schema_differences(pg_url) == []
        assert {f"{t}_append_only" for t in AUDIT_TABLES} <= triggers(pg_url)


class TestAppendOnlyOnPostgres:
    def run_sql(self, url: str, sql: str) -> None:
        engine = create_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(text(sql))
        finally:
            engine.dispose()

    def test_application_role_can_append_and_read_but_never_change(self, settings, pg_url, tmp_path):
        database = pg_url.rsplit("/", 1)[1]
        with login_role("docqa_app") as role:
            app = Settings(data_dir=settings.data_dir, database_url=database_url(database, role))
            fill(app, 2)
            assert verify(app).ok and len(traces(app)) == 2
            for sql in ("UPDATE audit_traces SET answer = 'x'", "DELETE FROM audit_steps",
                        "DELETE FROM audit_traces", "TRUNCATE audit_traces CASCADE",
                        "UPDATE audit_anchors SET mac = 'x'"):
                with pytest.raises(DBAPIError, match="permission denied"):
                    self.run_sql(app.resolved_database_url(), sql)

    def test_application_role_starts_settles_and_closes_runs_but_never_rewrites_one(self, settings, pg_url):
        database = pg_url.rsplit("/", 1)[1]
        with login_role("docqa_app") as role:
            app = Settings(data_dir=settings.data_dir, database_url=database_url(database, role))
            open_run(app, run_id="run-1", asked_by="alice", tenant="acme", question="Q?", pipeline="p",
                     config={}, models={}, asked_at=datetime.now(UTC))
            with pytest.raises(DBAPIError, match="permission denied"):
                self.run_sql(app.resolved_database_url(), "UPDATE audit_runs SET pid = 1")
            assert close_interrupted_runs(app) == []  # its owner, this process, is alive
            self.run_sql(pg_url, "UPDATE audit_runs SET boot_id = 'an-earlier-boot'")  # as after a power cut
            assert close_interrupted_runs(app) == ["run-1"]
            assert [t.status for t in traces(app)] == ["interrupted"] and verify(app).ok

    def test_trigger_rejects_changes_even_by_the_owner(self, settings, pg_url):
        fill(settings, 1)
        for sql in ("UPDATE audit_traces SET answer = 'x'", "DELETE FROM audit_steps",
                    "TRUNCATE audit_traces CASCADE"):
            with pytest.raises(DBAPIError, match="append-only"):
                self.run_sql(pg_url, sql)
        assert verify(settings).ok


class TestEventsOnPostgres:
    def add_event(self, settings, target="group:x"):
        from docqa.audit import events as ev
        from docqa.audit.events import append_event
        from docqa.audit.recorder import audit_session

        with audit_session(settings) as session:
            return append_event(session, settings, tenant="acme", actor="root", action=ev.GROUP_CREATED,
                                target=target).id

    def test_events_interleave_with_traces_and_are_append_only(self, settings, pg_url):
        fill(settings, 1)
        self.add_event(settings)
        fill(settings, 1)
        assert verify(settings).ok and verify(settings).checked == 3
        for sql in ("UPDATE audit_events SET actor = 'mallory'", "DELETE FROM audit_events",
                    "TRUNCATE audit_events"):
            with pytest.raises(DBAPIError, match="append-only"):
                TestAppendOnlyOnPostgres().run_sql(pg_url, sql)
        database = pg_url.rsplit("/", 1)[1]
        with login_role("docqa_app") as role:
            app = Settings(data_dir=settings.data_dir, database_url=database_url(database, role))
            self.add_event(app, "group:y")
            with pytest.raises(DBAPIError, match="permission denied"):
                TestAppendOnlyOnPostgres().run_sql(app.resolved_database_url(), "UPDATE audit_events SET actor = 'x'")
        assert verify(settings).ok and verify(settings).checked == 4

    def test_concurrent_admin_changes_and_answers_never_fork_the_chain(self, settings):
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(4) as pool:
            jobs = [pool.submit(self.add_event, settings, f"group:g{n}") for n in range(20)]
            jobs += [pool.submit(fill, settings, 1) for _ in range(10)]
            for job in jobs:
                job.result()
        report = verify(settings)
        assert report.ok and report.checked == 30 and report.head_seq == 30


class TestEventsExportAndConfigOnPostgres:
    def test_workers_starting_together_record_the_configuration_once(self, settings):
        from concurrent.futures import ThreadPoolExecutor

        from sqlalchemy import func, select

        from docqa.audit.config_events import record_config_if_changed
        from docqa.audit.models import AuditEvent
        from docqa.db import session_factory

        with ThreadPoolExecutor(4) as pool:
            recorded = [job.result() for job in [pool.submit(record_config_if_changed, settings) for _ in range(8)]]
        assert sum(r is not None for r in recorded) == 1
        with session_factory(settings)() as session:
            assert session.scalar(select(func.count()).select_from(AuditEvent)) == 1
        assert verify(settings).ok

    def test_an_ocsf_file_export_cut_off_mid_line_resumes_without_gaps_or_duplicates(self, settings, tmp_path):
        import json

        from docqa.audit.keys import hmac_key
        from docqa.audit.ocsf import ocsf_lines, verify_ocsf_lines
        from docqa.audit.shipping import FileSink, ship
        from docqa.db import session_factory

        fill(settings, 2)
        for n in range(40):
            TestEventsOnPostgres().add_event(settings, f"group:g{n}")
        fill(settings, 1)
        out = tmp_path / "ocsf.jsonl"
        with session_factory(settings)() as session:
            assert ship(session, FileSink(out), render=ocsf_lines, batch=10) == 43
        data = out.read_bytes()
        out.write_bytes(data[: len(data) * 2 // 3])  # what a kill mid-write leaves: a prefix, cut inside a line
        with session_factory(settings)() as session:
            ship(session, FileSink(out), render=ocsf_lines, resume=True, batch=10)
        lines = out.read_bytes().splitlines()
        assert [json.loads(line)["metadata"]["sequence"] for line in lines] == list(range(1, 44))
        assert verify_ocsf_lines(lines, hmac_key(settings)).ok


@pytest.fixture(scope="module")
def corpus_runtime(tmp_path_factory):
    """An embedded store with a few documents, the packaged embedder, and scripted LLMs for every role."""
    from docqa.ingestion.pipeline import Source, ingest_documents
    from docqa.runtime import Runtime
    from tests.support.scripted_chat import ScriptedChatGenerator

    settings = Settings(data_dir=tmp_path_factory.mktemp("corpus"))
    runtime = Runtime(settings, chat_generator_factory=lambda role: ScriptedChatGenerator(
        rules=[(r"(?i)yes or no|sufficient|answer yes", "Yes")], default="Jane Roe founded Acme in 1901 [1]."))
    ingest_documents(runtime, [
        Source("acme", "acme.txt", text="Acme Corporation was founded by Jane Roe in 1901 in Springfield."),
        Source("roe", "roe.txt", text="Jane Roe was an engineer born in 1870 who later founded Acme."),
    ], "acme", ["everyone"])
    return runtime


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_every_registered_pipeline_traces_round_trip(backend, corpus_runtime, tmp_path):
    from docqa.pipelines.registry import available_pipelines, build_pipeline

    with throwaway_database("pipelines") if backend == "postgresql" else _no_database() as url:
        settings = Settings(data_dir=tmp_path / "audit", database_url=url)
        upgrade_database(settings)
        scope = AccessScope(tenant="acme", principals=frozenset({"user:alice"}))
        outcomes = {}
        for spec in available_pipelines():
            pipeline = build_pipeline(spec.name, corpus_runtime)
            try:
                outcomes[spec.name] = AuditedRun(pipeline, "Who founded Acme?", scope, "alice", settings).run()
            except Exception as exc:  # a failing strategy must still leave its failed trace
                outcomes[spec.name] = exc
        stored = {t.pipeline: t for t in traces(settings)}
        assert set(stored) == set(outcomes)
        for name, outcome in outcomes.items():
            trace = stored[name]
            if isinstance(outcome, Exception):
                assert trace.status == "failed" and type(outcome).__name__ in trace.error
                continue
            assert trace.id == outcome.trace_id and trace.status == "completed"
            assert trace.answer == outcome.answer
            assert trace.config_hash == outcome.config["config_hash"]
            assert [(s.position, s.parent, s.kind, s.name) for s in trace.steps] == [
                (s.index, s.parent, s.kind, s.name) for s in outcome.steps
            ]
            assert sum(s.llm_calls for s in trace.steps) == outcome.totals.llm_calls
        # The scripted LLM answers every prompt, so each strategy completes; a failed one is shown here.
        assert {n: type(o).__name__ for n, o in outcomes.items() if isinstance(o, Exception)} == {}
        assert verify(settings).ok


class _no_database:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False
