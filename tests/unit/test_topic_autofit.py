"""Automatic topic model fits: when one is due (none yet, or the corpus grew), in-process or queued, and status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from haystack import Document

from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.embedded import EmbeddedDocumentStore
from docqa.topics import (
    MIN_DOCUMENTS,
    REFIT_TASK,
    refit_if_due,
    schedule_topic_refit,
    topic_model_status,
    topic_refit_due,
)
from tests.support.hash_embedder import HashDocumentEmbedder

WORDS = {"lab_result": "glucose cholesterol serum panel", "medication": "tablet oral dose daily"}


def _runtime(tmp_path: Path, **settings: Any) -> Runtime:
    store = EmbeddedDocumentStore(str(tmp_path / "store.sqlite3"))
    return Runtime(Settings(data_dir=tmp_path, **settings), document_store=store)


def _write(runtime: Runtime, count: int, start: int = 0, tenant: str = "t") -> None:
    documents = [Document(id=f"{tenant}-{i}", content=f"{WORDS[kind]} n{i}", meta={
        "tenant": tenant, "access": ["everyone"], "record_type": kind})
        for i in range(start, start + count) for kind in [list(WORDS)[i % 2]]]
    runtime.document_store.write_documents(HashDocumentEmbedder().run(documents=documents)["documents"])


def test_first_fit_is_due_once_the_tenant_has_enough_documents(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    _write(runtime, MIN_DOCUMENTS - 1)
    _write(runtime, 40, tenant="other")  # another tenant's documents never count
    plan = topic_refit_due(runtime, "t")
    assert not plan.due and "at least" in plan.reason
    assert refit_if_due(runtime, "t") is None
    _write(runtime, 1, start=MIN_DOCUMENTS - 1)
    assert topic_refit_due(runtime, "t").due
    outcome = refit_if_due(runtime, "t")
    assert outcome is not None and "fitted v1 automatically" in outcome and "no topic model yet" in outcome
    assert refit_if_due(runtime, "t") is None  # nothing new since


def test_refit_when_the_corpus_grew_by_the_configured_fraction(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path, topic_refit_growth=0.5)
    _write(runtime, 10)
    assert "v1" in (refit_if_due(runtime, "t") or "")
    _write(runtime, 4, start=10)  # 14 < 15 = 10 * 1.5
    plan = topic_refit_due(runtime, "t")
    assert (plan.due, plan.fitted_on, plan.documents, plan.version) == (False, 10, 14, 1)
    _write(runtime, 1, start=14)
    plan = topic_refit_due(runtime, "t")
    assert plan.due and "grew from 10 to 15" in plan.reason
    assert "fitted v2 automatically" in (refit_if_due(runtime, "t") or "")
    stored = {d.meta.get("topic_version") for d in runtime.document_store.filter_documents()
              if d.meta["tenant"] == "t"}
    assert stored == {2}
    status = topic_model_status(runtime, "t")
    assert (status.state, status.version, status.versions, status.fitted_on) == ("current", 2, (1, 2), 15)
    assert "earlier versions v1" in status.message() and "refit at 23" in status.message()


def test_autofit_off_fits_nothing(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path, topic_autofit=False)
    _write(runtime, 12)
    assert refit_if_due(runtime, "t") is None and schedule_topic_refit(runtime, "t") is None
    assert topic_model_status(runtime, "t").state == "missing"


def test_with_a_broker_the_fit_is_queued_for_the_workers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from docqa.ingestion import celery_app

    sent: list[tuple[str, list[Any]]] = []

    class FakeApp:
        def send_task(self, name: str, args: list[Any]) -> None:
            sent.append((name, args))

    monkeypatch.setattr(celery_app, "celery_app_for", lambda settings: FakeApp())
    runtime = _runtime(tmp_path, broker_url="redis://broker:6379/0")
    _write(runtime, 12)
    outcome = schedule_topic_refit(runtime, "t")
    assert outcome is not None and "queued for the workers" in outcome
    assert sent == [(REFIT_TASK, ["t"])]
    assert topic_model_status(runtime, "t").state == "missing"  # the worker fits it, not this process


def test_the_worker_task_fits_what_is_due(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from docqa.ingestion import tasks

    runtime = _runtime(tmp_path)
    _write(runtime, 12)
    monkeypatch.setattr(tasks, "_warm_runtime", lambda settings: (runtime, None))
    tasks.refit_topics.run("t")
    assert topic_model_status(runtime, "t").version == 1
