"""The audit trail's contract, run against every database it supports (SQLite in unit tests, PostgreSQL in
integration tests). A test class inherits `AuditTrailContract` and provides a `settings` fixture pointing at
a fresh, migrated database."""

from __future__ import annotations

import itertools
import multiprocessing
import threading
from pathlib import Path

import pytest
from sqlalchemy import func, select

from docqa.audit.canonical import trace_payload
from docqa.audit.chain import GENESIS_MAC, ChainPosition
from docqa.audit.checkpoint import create_checkpoint
from docqa.audit.export import export_jsonl, verify_jsonl
from docqa.audit.keys import hmac_key, signing_key, verify_key
from docqa.audit.models import AuditStep, AuditTrace
from docqa.audit.recorder import TraceRecord, audit_session, record_answer
from docqa.audit.retention import retain, verify_archive
from docqa.audit.verify import verify_chain
from docqa.questions.audited_run import AuditedRun
from tests.support.audit import (
    SCOPE,
    crash_mid_write,
    fill,
    record,
    relink,
    session_for,
    tamper,
    traces,
    tree_result,
    utc,
    write_traces_in_process,
)


def verify(settings, checkpoint=None):
    with session_for(settings) as session:
        return verify_chain(session, hmac_key(settings), checkpoint=checkpoint, public_key=verify_key(settings))


def head_checkpoint(settings):
    report = verify(settings)
    assert report.ok
    return create_checkpoint(seq=report.head_seq, mac=report.head_mac, signer=signing_key(settings))


class FailingPipeline:
    name = "failing"

    def config(self):
        return {"top_k": 3}

    def run(self, question, scope, filters=None):
        from docqa.recording import StepRecorder

        recorder = StepRecorder()
        with recorder.step("retrieval", "hybrid_retriever", inputs={"query": question}) as step:
            step.outputs["documents"] = [{"id": "doc-a", "score": 0.5}]
        with recorder.step("generation", "generator"):
            raise ConnectionError("LLM endpoint went away")


class TreePipeline:
    name = "tree_test"

    def config(self):
        return {"top_k": 2}

    def run(self, question, scope, filters=None):
        return tree_result(question)


class AuditTrailContract:
    # --- writing and round-trip -------------------------------------------------------------------------

    def test_trace_round_trips_with_every_recorded_detail(self, settings):
        result = tree_result()
        trace_id = record(settings, result)
        [stored] = traces(settings)
        assert stored.id == trace_id and stored.seq == 1 and stored.status == "completed"
        assert stored.answer == result.answer and stored.asked_by == "alice" and stored.tenant == "acme"
        assert stored.config_hash == "f" * 64 and stored.models["summarizer"] == "summarizer-model"
        assert stored.citations == [c.to_dict() for c in result.citations]
        assert stored.totals["llm_calls"] == 4 and stored.stop_reason == "answered"
        assert [(s.position, s.parent, s.kind, s.name) for s in stored.steps] == [
            (s.index, s.parent, s.kind, s.name) for s in result.steps
        ]
        retrieval = stored.steps[1]
        assert retrieval.documents == [{"id": "doc-a", "score": 0.8123456789}, {"id": "doc-b", "score": 0.1 + 0.2}]
        assert stored.steps[0].outputs["llm_calls"][0]["prompt"].startswith("Split:")
        assert stored.steps[2].prompt_tokens == 40 and stored.steps[2].completion_tokens == 5
        assert stored.steps[2].duration_s == result.steps[2].duration_s
        assert verify(settings).ok

    def test_an_audited_run_commits_the_trace_before_returning(self, settings):
        result = AuditedRun(TreePipeline(), "Who founded Acme?", SCOPE, "alice", settings).run()
        [stored] = traces(settings)
        assert result.trace_id == stored.id and stored.tenant == "acme" and stored.status == "completed"
        assert set(stored.models) == {"reasoner", "summarizer", "generator", "grader", "planner"}

    def test_failed_run_leaves_a_failed_trace_with_the_error_and_steps_taken(self, settings):
        with pytest.raises(ConnectionError):
            AuditedRun(FailingPipeline(), "Who founded Acme?", SCOPE, "alice", settings).run()
        [stored] = traces(settings)
        assert stored.status == "failed" and stored.answer is None
        assert stored.error == "ConnectionError: LLM endpoint went away"
        assert [s.kind for s in stored.steps] == ["retrieval", "generation"]
        assert stored.steps[1].error == "ConnectionError: LLM endpoint went away"
        assert stored.config == {"top_k": 3}
        assert verify(settings).ok

    def test_a_trace_that_cannot_be_written_means_no_answer_and_no_partial_trace(self, settings, monkeypatch):
        import docqa.audit.recorder as recorder

        def broken_step_row(step, secrets):
            raise RuntimeError("disk full")

        # The first step row is built fine, the second fails: nothing of the trace may remain.
        real = recorder._step_row
        calls = iter([real, broken_step_row])
        monkeypatch.setattr(recorder, "_step_row", lambda step, secrets: next(calls, broken_step_row)(step, secrets))
        with pytest.raises(RuntimeError, match="disk full"):
            AuditedRun(TreePipeline(), "Who founded Acme?", SCOPE, "alice", settings).run()
        assert traces(settings) == []

    def test_rollback_after_staging_leaves_no_trace(self, settings):
        with pytest.raises(RuntimeError), audit_session(settings) as session:
            record_answer(settings, TraceRecord(asked_by="alice", tenant="acme", question="q", pipeline="tree_test",
                                                models={}, result=tree_result()), session=session)
            raise RuntimeError("the answer's own record failed")
        assert traces(settings) == []
        fill(settings, 1)
        assert [t.seq for t in traces(settings)] == [1]

    def test_process_killed_before_commit_leaves_no_partial_trace(self, settings, tmp_path):
        fill(settings, 2)
        marker = tmp_path / "staged.txt"
        proc = multiprocessing.get_context("spawn").Process(target=crash_mid_write, args=(settings, str(marker)))
        proc.start()
        proc.join(120)
        assert proc.exitcode == 17 and marker.exists()
        staged_id = marker.read_text()
        with session_for(settings) as session:
            assert session.get(AuditTrace, staged_id) is None
            assert session.scalar(select(func.count()).select_from(AuditStep).where(
                AuditStep.trace_id == staged_id)) == 0
        fill(settings, 1)
        report = verify(settings)
        assert report.ok and report.head_seq == 3

    def test_secrets_never_reach_the_database_or_the_logs(self, settings, caplog):
        secret = settings.llm_api_key.get_secret_value()
        result = tree_result(question=f"what is {secret}?")
        result.steps[0].outputs["llm_calls"][0]["prompt"] = f"header x-api-key: {secret}"
        result.config["api_key"] = secret
        result.config["headers"] = {"Authorization": "Bearer abcdef0123456789"}
        caplog.set_level("DEBUG")
        record_answer(settings, TraceRecord(asked_by="alice", tenant="acme", question=f"what is {secret}?",
                                            pipeline="tree_test", models={"generator": "gen"}, result=result,
                                            error=f"failed with key {secret}"))
        [stored] = traces(settings)
        dumped = repr(trace_payload(stored))
        assert secret not in dumped and "abcdef0123456789" not in dumped
        assert "***" in stored.question and stored.config["api_key"] == "***"
        assert secret not in caplog.text
        assert verify(settings).ok

    # --- concurrency ---------------------------------------------------------------------------------------

    def test_concurrent_threads_never_fork_or_gap_the_chain(self, settings):
        errors = []

        def writer():
            try:
                fill(settings, 5)
            except Exception as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=writer) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        stored = traces(settings)
        assert [t.seq for t in stored] == list(range(1, 41))
        assert all(b.prev_mac == a.mac for a, b in itertools.pairwise(stored))
        assert verify(settings).ok

    def test_concurrent_processes_never_fork_or_gap_the_chain(self, settings):
        fill(settings, 1)  # keys and schema exist before the writers race
        ctx = multiprocessing.get_context("spawn")
        procs = [ctx.Process(target=write_traces_in_process, args=(settings, 5)) for _ in range(4)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(300)
        assert [p.exitcode for p in procs] == [0, 0, 0, 0]
        report = verify(settings)
        assert report.ok and report.head_seq == 21 and report.checked == 21

    # --- tampering -----------------------------------------------------------------------------------------

    def test_edited_trace_field_is_detected(self, settings):
        fill(settings, 5)
        tamper(settings, ("UPDATE audit_traces SET answer = 'forged' WHERE seq = 3", {}))
        report = verify(settings)
        assert not report.ok and report.broken.seq == 3 and "MAC" in report.broken.reason

    def test_edited_step_is_detected(self, settings):
        ids = fill(settings, 3)
        tamper(settings, ("UPDATE audit_steps SET duration_s = 99.0 WHERE trace_id = :id AND position = 2",
                          {"id": ids[1]}))
        report = verify(settings)
        assert not report.ok and report.broken.seq == 2 and report.broken.trace_id == ids[1]

    def test_deleted_step_is_detected(self, settings):
        ids = fill(settings, 3)
        tamper(settings, ("DELETE FROM audit_steps WHERE trace_id = :id AND position = 4", {"id": ids[2]}))
        report = verify(settings)
        assert not report.ok and report.broken.seq == 3

    def test_deleted_row_is_detected(self, settings):
        ids = fill(settings, 5)
        tamper(settings, ("DELETE FROM audit_steps WHERE trace_id = :id", {"id": ids[2]}),
               ("DELETE FROM audit_traces WHERE id = :id", {"id": ids[2]}))
        report = verify(settings)
        assert not report.ok and report.broken.seq == 3 and "missing" in report.broken.reason
        assert report.checked == 2

    def test_reordered_rows_are_detected(self, settings):
        fill(settings, 5)
        tamper(settings, ("UPDATE audit_traces SET seq = -1 WHERE seq = 2", {}),
               ("UPDATE audit_traces SET seq = 2 WHERE seq = 3", {}),
               ("UPDATE audit_traces SET seq = 3 WHERE seq = -1", {}))
        report = verify(settings)
        assert not report.ok and report.broken.seq == 2

    def test_inserted_row_is_detected(self, settings):
        fill(settings, 4)
        victim = traces(settings)[1]
        tamper(settings,
               ("UPDATE audit_traces SET seq = seq + 1000 WHERE seq >= 2", {}),
               ("UPDATE audit_traces SET seq = seq - 999 WHERE seq >= 1000", {}),
               ("INSERT INTO audit_traces (id, seq, asked_by, tenant, asked_at, question, pipeline, config_hash, "
                "config, models, answer, citations, status, error, stop_reason, totals, prev_mac, mac) "
                "SELECT 'forged-trace', 2, asked_by, tenant, asked_at, 'planted', pipeline, config_hash, config, "
                "models, 'planted answer', citations, status, error, stop_reason, totals, prev_mac, mac "
                "FROM audit_traces WHERE id = :id", {"id": victim.id}))
        report = verify(settings)
        assert not report.ok and report.broken.seq == 2 and report.broken.trace_id == "forged-trace"

    def test_chain_recomputed_without_the_key_is_detected(self, settings):
        fill(settings, 5)
        tamper(settings, ("UPDATE audit_traces SET answer = 'forged' WHERE seq = 2", {}))
        relink(settings, b"g" * 32, from_seq=2)
        report = verify(settings)
        assert not report.ok and report.broken.seq == 2 and "without the key" in report.broken.reason

    def test_truncated_tail_is_detected_with_a_checkpoint(self, settings):
        ids = fill(settings, 5)
        checkpoint = head_checkpoint(settings)
        tamper(settings, ("DELETE FROM audit_steps WHERE trace_id IN (:a, :b)", {"a": ids[3], "b": ids[4]}),
               ("DELETE FROM audit_traces WHERE id IN (:a, :b)", {"a": ids[3], "b": ids[4]}))
        assert verify(settings).ok  # a clean prefix: only the checkpoint knows the chain was longer
        report = verify(settings, checkpoint)
        assert not report.ok and report.broken.seq == 4 and "truncated" in report.broken.reason

    def test_tail_rewritten_with_the_key_is_detected_with_a_checkpoint(self, settings):
        fill(settings, 5)
        checkpoint = head_checkpoint(settings)
        tamper(settings, ("UPDATE audit_traces SET answer = 'rewritten' WHERE seq = 4", {}))
        relink(settings, hmac_key(settings), from_seq=4)
        assert verify(settings).ok
        report = verify(settings, checkpoint)
        assert not report.ok and report.broken.seq == 5 and "rewritten" in report.broken.reason

    def test_checkpoint_still_verifies_after_more_appends(self, settings):
        fill(settings, 3)
        checkpoint = head_checkpoint(settings)
        fill(settings, 2)
        report = verify(settings, checkpoint)
        assert report.ok and report.head_seq == 5

    def test_checkpoint_signed_by_another_key_is_rejected(self, settings):
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        fill(settings, 2)
        report = verify(settings)
        forged = create_checkpoint(seq=1, mac=report.head_mac, signer=Ed25519PrivateKey.generate())
        result = verify(settings, forged)
        assert not result.ok and "signature" in result.broken.reason

    def test_forged_retention_anchor_is_detected(self, settings):
        ids = fill(settings, 4)
        tamper(settings, ("DELETE FROM audit_steps WHERE trace_id IN (:a, :b)", {"a": ids[0], "b": ids[1]}),
               ("DELETE FROM audit_traces WHERE id IN (:a, :b)", {"a": ids[0], "b": ids[1]}))
        assert verify(settings).broken.seq == 1
        row = traces(settings)[0]
        tamper(settings, ("INSERT INTO audit_anchors (up_to_seq, mac, archived_count, archive_sha256, created_at, "
                          "anchor_mac) VALUES (2, :mac, 2, :sha, :at, :forged)",
                          {"mac": row.prev_mac, "sha": "0" * 64, "at": row.asked_at, "forged": "1" * 64}))
        report = verify(settings)
        assert not report.ok and "anchor" in report.broken.reason

    # --- export and retention --------------------------------------------------------------------------------

    def test_export_carries_proofs_that_verify_and_catch_edits(self, settings, tmp_path):
        record(settings, asked_at=utc(2026, 1, 1))
        record(settings, asked_at=utc(2026, 2, 1))
        record(settings, asked_at=utc(2026, 3, 1))
        out = tmp_path / "export.jsonl"
        with session_for(settings) as session:
            assert export_jsonl(session, out, since=utc(2026, 1, 15)) == 2
        report = verify_jsonl(out, hmac_key(settings))
        assert report.ok and report.checked == 2 and report.head_seq == 3
        out.write_text(out.read_text().replace("Jane Roe in 1901", "John Doe in 1901", 1))
        assert verify_jsonl(out, hmac_key(settings)).broken.seq == 2
        with session_for(settings) as session:
            assert export_jsonl(session, out) == 3
        full = verify_jsonl(out, hmac_key(settings))
        assert full.ok and full.checked == 3
        lines = out.read_text().splitlines(keepends=True)
        out.write_text(lines[0] + lines[2])
        # Without a start a gap is allowed (a filtered export); continuing from the genesis it is not.
        assert verify_jsonl(out, hmac_key(settings)).ok
        assert verify_jsonl(out, hmac_key(settings), start=ChainPosition(0, GENESIS_MAC)).broken.seq == 2

    def test_retention_archives_a_prefix_and_the_chain_still_verifies(self, settings, tmp_path):
        for month in (1, 2, 3):
            record(settings, asked_at=utc(2025, month, 1))
        record(settings, asked_at=utc(2026, 6, 1))
        before = head_checkpoint(settings)
        archive = tmp_path / "audit-2025.jsonl"
        report = retain(settings, before=utc(2026, 1, 1), archive=archive)
        assert (report.archived, report.from_seq, report.up_to_seq) == (3, 1, 3)
        assert [t.seq for t in traces(settings)] == [4]
        # The retention run is itself a link (an `audit.retention` event, seq 5), committed with the deletion.
        fill(settings, 2)
        live = verify(settings, before)
        assert live.ok and live.start_seq == 3 and live.head_seq == 7 and live.checked == 4
        assert verify_archive(archive, hmac_key(settings), verify_key(settings)).ok
        # Archiving the links of the last weeks is allowed once they are older than the floor (183 days).
        second = retain(settings, before=utc(2027, 1, 1), archive=tmp_path / "audit-2026.jsonl",
                        now=utc(2027, 8, 1))
        assert (second.from_seq, second.up_to_seq) == (4, 7)
        assert verify(settings).ok and traces(settings) == []
        assert verify_archive(tmp_path / "audit-2026.jsonl", hmac_key(settings), verify_key(settings)).ok
        fill(settings, 1)
        assert verify(settings).head_seq == 9

    def test_tampered_archive_is_detected(self, settings, tmp_path):
        for month in (1, 2):
            record(settings, asked_at=utc(2025, month, 1))
        archive = tmp_path / "a.jsonl"
        retain(settings, before=utc(2026, 1, 1), archive=archive)
        lines = archive.read_text().splitlines(keepends=True)
        Path(archive).write_text(lines[0])
        report = verify_archive(archive, hmac_key(settings), verify_key(settings))
        assert not report.ok and "differs" in report.broken.reason

    def test_retention_refuses_to_archive_a_broken_chain(self, settings, tmp_path):
        from docqa.audit.retention import ArchiveIntegrityError

        for month in (1, 2):
            record(settings, asked_at=utc(2025, month, 1))
        tamper(settings, ("UPDATE audit_traces SET answer = 'x' WHERE seq = 2", {}))
        with pytest.raises(ArchiveIntegrityError):
            retain(settings, before=utc(2026, 1, 1), archive=tmp_path / "a.jsonl")
        assert len(traces(settings)) == 2 and not (tmp_path / "a.jsonl").exists()
