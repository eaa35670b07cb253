"""`docqa feedback export --principal P` keeps only approved answers whose cited documents P may read now
(checked against the document store's current access lists and P's current groups); `--all` exports everything
and says so; one of the two is required."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docqa.accounts import directory
from docqa.audit.recorder import TraceRecord, record_answer
from docqa.cli import main
from docqa.db import session_factory
from docqa.feedback import record_feedback
from docqa.ingestion.pipeline import ingest_paths
from docqa.result import Citation, PipelineResult, Step
from docqa.runtime import Runtime
from docqa.schema import upgrade_database
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.ingestion_fakes import CountingEmbedder


@pytest.fixture
def tenant(tmp_path, monkeypatch):
    """acme with bob (no groups) and hank (group hr); a payroll document for hr only and a handbook for everyone;
    alice approved five answers: citing the handbook, citing payroll, citing both, citing nothing after
    retrieving payroll, and citing nothing with nothing retrieved."""
    settings = Settings(data_dir=tmp_path / "data", tenant="acme")
    monkeypatch.setenv("DOCQA_DATA_DIR", str(settings.data_dir))
    upgrade_database(settings)
    with session_factory(settings)() as session:
        for user_id, groups in (("alice", ["hr"]), ("bob", []), ("hank", ["hr"])):
            directory.create_user(session, "acme", user_id, "user", groups)
        session.commit()
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "payroll.txt").write_text("Salaries are paid on the 25th. The CEO earns 900,000.")
    (docs / "handbook.txt").write_text("The office opens at eight.")
    runtime = Runtime(settings, document_store=build_document_store(settings))
    for name, access in (("payroll.txt", ["group:hr"]), ("handbook.txt", ["everyone"])):
        assert not ingest_paths(runtime, [docs / name], "acme", access, embedder=CountingEmbedder()).failed
    chunk = {doc.meta["source"]: doc.id for doc in runtime.document_store.filter_documents()}
    retrieved_payroll = Step(index=0, kind="retrieval", name="retriever",
                             outputs={"documents": [{"id": chunk["payroll.txt"], "score": 1.0}]})
    answers = {
        "When does the office open?": ("At eight [1].", [chunk["handbook.txt"]], []),
        "What does the CEO earn?": ("900,000 [1].", [chunk["payroll.txt"]], []),
        "Summarise both.": ("Eight; 900,000 [1][2].", [chunk["handbook.txt"], chunk["payroll.txt"]], []),
        "Who earns most?": ("The CEO, 900,000.", [], [retrieved_payroll]),
        "What is two plus two?": ("Four.", [], []),
    }
    for question, (answer, cited, steps) in answers.items():
        result = PipelineResult(pipeline="standard", question=question, answer=answer,
                                citations=[Citation(document_id=c) for c in cited], steps=steps)
        trace_id = record_answer(settings, TraceRecord(asked_by="alice", tenant="acme", question=question,
                                                       pipeline="standard", models={}, result=result))
        with session_factory(settings)() as session:
            record_feedback(session, tenant="acme", user_id="alice", trace_id=trace_id, rating="up")
            session.commit()
    return settings, tmp_path


def export(tmp_path: Path, *args: str) -> list[str]:
    out = tmp_path / "eval.jsonl"
    assert main(["feedback", "export", "--tenant", "acme", "--out", str(out), *args]) == 0
    return [json.loads(line)["question"] for line in out.read_text().splitlines()]


def test_a_principal_gets_only_answers_whose_cited_documents_they_may_read(tenant, capsys):
    _, tmp_path = tenant
    assert export(tmp_path, "--principal", "user:bob") == ["When does the office open?", "What is two plus two?"]
    assert "user:bob may read now" in capsys.readouterr().err
    everything = ["When does the office open?", "What does the CEO earn?", "Summarise both.",
                  "What is two plus two?"]
    assert export(tmp_path, "--principal", "user:hank") == everything
    assert export(tmp_path, "--principal", "group:hr") == everything
    # An answer that cites nothing but whose run read payroll is left out even for hr: its text may come from
    # documents it does not name.
    assert "Who earns most?" not in export(tmp_path, "--principal", "group:hr")


def test_access_is_checked_as_it_is_now(tenant):
    settings, tmp_path = tenant
    with session_factory(settings)() as session:
        directory.set_membership(session, "acme", "hr", "bob", True)
        directory.set_membership(session, "acme", "hr", "hank", False)
        session.commit()
    assert "What does the CEO earn?" in export(tmp_path, "--principal", "user:bob")
    assert "What does the CEO earn?" not in export(tmp_path, "--principal", "user:hank")


def test_all_exports_everything_and_says_so(tenant, capsys):
    _, tmp_path = tenant
    assert len(export(tmp_path, "--all")) == 5
    assert "EVERY approved answer of tenant acme" in capsys.readouterr().err


def test_one_of_principal_or_all_is_required_and_unknown_principals_are_refused(tenant, capsys):
    _, tmp_path = tenant
    with pytest.raises(SystemExit) as exited:
        main(["feedback", "export", "--tenant", "acme", "--out", str(tmp_path / "x.jsonl")])
    assert exited.value.code == 2
    for principal, message in (("user:nobody", "no active user 'nobody'"), ("hr", "user:<id> or group:<name>")):
        assert main(["feedback", "export", "--tenant", "acme", "--principal", principal]) == 2
        assert message in capsys.readouterr().err
