"""A folder sync really killed: `docqa sources sync` in its own process, SIGKILLed while its items are being
embedded and written, then run again, ends in the state one uninterrupted run reaches in another data directory:
the same documents and chunks (nothing duplicated, nothing lost), the same entries, each document audited once.

Unlike the in-process kills of `test_sources_folder.py`, nothing of the killed process runs after the signal (no
`finally`, no lease release, whatever the embedded store was writing left as it was), and the rerun has to take
over the dead process's lease. Real packaged embedder, embedded store and SQLite.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import OperationalError

from docqa.audit.events import DOCUMENT_INGESTED
from docqa.ingestion.database import job_sessions
from docqa.ingestion.models import ITEM_WRITTEN, IngestItem
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.sources.definitions import define_source, source_status
from docqa.sources.models import SourceEntry
from tests.support.sources_fakes import audit_events

pytestmark = pytest.mark.integration

FILES = 120
TOPICS = ["budget", "travel", "hiring", "security", "facilities", "training", "payroll", "procurement"]
CHUNKING = {"DOCQA_CHUNK_WORDS": "40", "DOCQA_CHUNK_OVERLAP_WORDS": "10"}


@pytest.fixture(scope="module")
def share(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sigkill") / "share"
    for index in range(FILES):
        topic = TOPICS[index % len(TOPICS)]
        folder = root / topic
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"memo-{index:03d}.txt").write_text(
            f"Memo {index} on {topic}. "
            + " ".join(
                f"Point {point} of memo {index}: the {topic} rule number {index * 7 + point} applies from week "
                f"{(index + point) % 52 + 1} to every office of the region {index % 5}."
                for point in range(4)
            )
        )
    (root / "empty.txt").write_text("   ")  # fails in the ingestion step at every run: no text
    return root


def _settings(data_dir: Path) -> Settings:
    return Settings(data_dir=data_dir, chunk_words=40, chunk_overlap_words=10)


def _define(data_dir: Path, share: Path) -> Settings:
    settings = _settings(data_dir)
    define_source(
        settings,
        name="share",
        type="folder",
        tenant="default",
        config={"path": str(share)},
        allow=["group:staff"],
        created_by="cli:test",
    )
    return settings


def _sync_command(data_dir: Path) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCQA_")}
    env.update(DOCQA_DATA_DIR=str(data_dir), OMP_NUM_THREADS="1", HAYSTACK_TELEMETRY_ENABLED="False", **CHUNKING)
    return [sys.executable, "-m", "docqa.cli", "sources", "sync", "share"], env


def _run_sync(data_dir: Path) -> subprocess.CompletedProcess:
    command, env = _sync_command(data_dir)
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)


def _written(settings: Settings) -> int:
    """Items written so far (read while the sync writes: a locked database reads as none yet)."""
    try:
        with job_sessions(settings)() as session:
            return session.scalar(select(func.count()).where(IngestItem.status == ITEM_WRITTEN)) or 0
    except OperationalError:
        return 0


def _state(settings: Settings) -> dict[str, Any]:
    """Everything a sync leaves: chunks by document (id, text, access, source), entries, audited ingestions."""
    store = Runtime(settings).document_store
    chunks = store.filter_documents(filters={"field": "meta.tenant", "operator": "==", "value": "default"})
    documents: dict[str, list[tuple]] = {}
    for chunk in chunks:
        documents.setdefault(chunk.meta["source_id"], []).append(
            (chunk.id, chunk.content, tuple(chunk.meta["access"]), chunk.meta["source_name"])
        )
    with job_sessions(settings)() as session:
        entries = {
            e.key: (e.document_id, e.fingerprint, tuple(e.access or ()), e.status, e.reason, e.pending_item)
            for e in session.scalars(select(SourceEntry))
        }
    return {
        "chunk_ids": sorted(chunk.id for chunk in chunks),
        "documents": {key: sorted(value) for key, value in documents.items()},
        "entries": entries,
        "ingested": sorted(e.target for e in audit_events(settings, DOCUMENT_INGESTED)),
        "embeddings": {chunk.id: np.asarray(chunk.embedding) for chunk in chunks},
    }


def test_a_sync_sigkilled_mid_run_and_run_again_ends_as_one_uninterrupted_run(share, tmp_path) -> None:
    reference_settings = _define(tmp_path / "reference", share)
    uninterrupted = _run_sync(tmp_path / "reference")
    assert uninterrupted.returncode == 0, uninterrupted.stderr
    assert f"{FILES} added, 0 changed, 0 deleted" in uninterrupted.stdout, uninterrupted.stdout
    expected = _state(reference_settings)

    settings = _define(tmp_path / "killed", share)
    command, env = _sync_command(tmp_path / "killed")
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 1200
        written = 0
        while process.poll() is None and written < FILES // 3 and time.monotonic() < deadline:
            time.sleep(0.05)
            written = max(written, _written(settings))
        assert process.poll() is None, (
            f"the sync finished before it could be killed: {process.communicate()[0].decode()}"
        )
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == -signal.SIGKILL
    killed_at = _written(settings)
    status = source_status(settings, "default", "share")
    with job_sessions(settings)() as session:
        pending = session.scalar(select(func.count()).where(SourceEntry.pending_item.is_not(None)))
    # Killed mid-run: part of the items written, none of them settled, and the dead process holds the lease.
    assert FILES // 3 <= killed_at < FILES, killed_at
    assert pending == FILES + 1
    assert status["last_status"] == "running" and status["running"]

    rerun = _run_sync(tmp_path / "killed")
    assert rerun.returncode == 0, rerun.stderr
    assert "1 failed" in rerun.stdout, rerun.stdout
    state = _state(settings)

    assert len(state["chunk_ids"]) == len(set(state["chunk_ids"])), "a chunk is stored twice"
    assert state["chunk_ids"] == expected["chunk_ids"]
    assert state["documents"] == expected["documents"]
    assert len(state["documents"]) == FILES
    assert state["entries"] == expected["entries"]
    assert state["entries"]["empty.txt"][3] == "failed"
    assert state["ingested"] == expected["ingested"] and len(state["ingested"]) == FILES  # each audited once
    for chunk_id, vector in state["embeddings"].items():
        reference = expected["embeddings"][chunk_id]
        cosine = float(vector @ reference / (np.linalg.norm(vector) * np.linalg.norm(reference)))
        assert cosine > 0.99, (chunk_id, cosine)

    again = _run_sync(tmp_path / "killed")
    assert again.returncode == 0, again.stderr
    assert f"0 added, 0 changed, 0 deleted, 0 access changed, {FILES} unchanged" in again.stdout, again.stdout
    assert _state(settings)["chunk_ids"] == expected["chunk_ids"]
