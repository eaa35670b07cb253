"""Folder sources end to end on a real directory: add, sync, change, delete, rename, access from an ACL map and
POSIX groups, an unreachable folder, a run killed at each step and run again, removal; through the CLI and the
sync engine, over SQLite and an in-memory store with a hash embedder (counting what it embeds)."""

from __future__ import annotations

import grp
import os
from pathlib import Path

import pytest

from docqa.audit.events import (
    DOCUMENT_ACCESS_CHANGED,
    DOCUMENT_DELETED,
    DOCUMENT_INGESTED,
    SOURCE_DEFINED,
    SOURCE_REMOVED,
)
from docqa.cli import main
from docqa.ingestion.database import job_sessions
from docqa.settings import Settings
from docqa.sources import sync as sync_module
from docqa.sources.definitions import SourceExistsError, define_source, list_sources, source_status
from docqa.sources.models import SourceEntry
from docqa.sources.sync import sync_source
from tests.support.conversion_bombs import zip_bomb_docx
from tests.support.sources_fakes import SharedRuntime, audit_events, sources_settings, stored_by_document


class Killed(BaseException):
    """Stands for SIGKILL: nothing of the run after it happens (no except clause catches it)."""


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return sources_settings(tmp_path, monkeypatch, DOCQA_INGEST_ITEMS_PER_TASK="2")


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "share"
    (root / "hr").mkdir(parents=True)
    (root / "finance").mkdir()
    (root / "hr" / "leave.md").write_text("# Leave\n\nEmployees get 30 days of paid leave per year. " * 3)
    (root / "finance" / "budget.txt").write_text("The travel budget for 2026 is 40,000 euros. " * 4)
    (root / "handbook.txt").write_text("Welcome to the company handbook. Offices open at nine. " * 3)
    (root / "notes.bin").write_bytes(b"\x00\x01 not a supported type")
    (root / ".hidden.txt").write_text("never read")
    return root


def _sync(settings: Settings, name: str = "share") -> sync_module.SyncReport:
    return sync_source(settings, tenant="default", name=name, actor="cli:test")


def _entries(settings: Settings) -> dict[str, SourceEntry]:
    with job_sessions(settings)() as session:
        return {e.key: e for e in session.query(SourceEntry).all()}


def test_cli_add_sync_change_delete_rename_and_remove(settings, folder, capsys) -> None:
    assert main(["sources", "add", "share", "--type", "folder", "--path", str(folder), "--allow", "group:staff",
                 "--collection", "share-docs", "--every", "15m"]) == 0
    assert main(["sources", "sync", "share"]) == 0
    out = capsys.readouterr().out
    assert "share: 3 added, 0 changed, 0 deleted" in out
    docs = stored_by_document()
    assert set(docs) == {"share:hr/leave.md", "share:finance/budget.txt", "share:handbook.txt"}
    for chunks in docs.values():
        assert {c.meta["source_name"] for c in chunks} == {"share"}
        assert {c.meta["collection"] for c in chunks} == {"share-docs"}
        assert {tuple(c.meta["access"]) for c in chunks} == {("group:staff",)}
    assert {c.meta["source"] for c in docs["share:hr/leave.md"]} == {"hr/leave.md"}  # what citations show
    embedded_first = len(SharedRuntime.embedder.embedded)

    # Nothing changed: nothing read into the queue, nothing embedded.
    assert main(["sources", "sync", "share"]) == 0
    assert "0 added, 0 changed, 0 deleted, 0 access changed, 3 unchanged" in capsys.readouterr().out
    assert len(SharedRuntime.embedder.embedded) == embedded_first

    # A touched file with the same bytes is unchanged; an edited one is re-ingested; a removed one deleted;
    # a renamed one is the old document deleted and the new one added.
    os.utime(folder / "handbook.txt", ns=(1, 1))
    (folder / "finance" / "budget.txt").write_text("The travel budget for 2026 was cut to 25,000 euros. " * 4)
    (folder / "hr" / "leave.md").unlink()
    (folder / "handbook.txt").rename(folder / "welcome.txt")
    assert main(["sources", "sync", "share"]) == 0
    assert "share: 1 added, 1 changed, 2 deleted, 0 access changed, 0 unchanged" in capsys.readouterr().out
    docs = stored_by_document()
    assert set(docs) == {"share:finance/budget.txt", "share:welcome.txt"}
    assert "25,000" in " ".join(c.content for c in docs["share:finance/budget.txt"])
    re_embedded = SharedRuntime.embedder.embedded[embedded_first:]
    assert set(re_embedded) == {c.id for key in docs for c in docs[key]}  # only the changed and the new

    deleted = audit_events(settings, DOCUMENT_DELETED)
    assert {e.target for e in deleted} == {"document:share:hr/leave.md", "document:share:handbook.txt"}
    assert all(e.before["access"] == ["group:staff"] and e.after is None for e in deleted)
    changed = [e for e in audit_events(settings, DOCUMENT_INGESTED) if e.before is not None]
    assert [e.target for e in changed] == ["document:share:finance/budget.txt"]
    assert changed[0].before["access"] == changed[0].after["access"] == ["group:staff"]

    assert main(["sources", "list"]) == 0
    listed = capsys.readouterr().out
    assert "share" in listed and "2 docs" in listed and "next:" in listed
    view = list_sources(settings)[0]
    assert view["last_counts"]["deleted"] == 2 and view["last_status"] == "succeeded"

    assert main(["sources", "remove", "share"]) == 0
    assert stored_by_document() == {}
    assert list_sources(settings) == []


def test_defining_and_removing_a_source_are_audit_events_with_its_access(settings, folder, tmp_path) -> None:
    acl = tmp_path / "share.acl"
    acl.write_text("finance/**  group:finance\n")
    assert main(["sources", "add", "share", "--type", "folder", "--path", str(folder), "--allow", "group:staff",
                 "--acl-map", str(acl), "--every", "1h"]) == 0
    assert main(["sources", "add", "hr", "--type", "folder", "--path", str(folder / "hr"), "--allow", "group:hr"]) == 0
    with pytest.raises(SourceExistsError):  # a refused definition changes nothing and records nothing
        define_source(settings, name="share", type="folder", tenant="default", config={"path": str(folder)},
                      allow=["everyone"], created_by="cli:test")
    defined = audit_events(settings, SOURCE_DEFINED)
    assert [e.target for e in defined] == ["source:share", "source:hr"]
    assert all(e.actor.startswith("cli:") and e.tenant == "default" and e.before is None for e in defined)
    assert defined[0].after == {"type": "folder", "config": {"path": str(folder), "posix_groups": False},
                                "access": ["group:staff"], "acl_map": str(acl), "collection": "main",
                                "every_s": 3600}
    assert defined[1].after["access"] == ["group:hr"]

    assert main(["sources", "sync", "--all"]) == 0
    assert main(["sources", "remove", "share"]) == 0
    assert main(["sources", "remove", "hr", "--keep-documents"]) == 0
    removed = audit_events(settings, SOURCE_REMOVED)
    assert [e.target for e in removed] == ["source:share", "source:hr"]
    assert removed[0].before == defined[0].after and removed[0].after is None
    assert removed[1].before["access"] == ["group:hr"]
    assert removed[1].after == {"documents_deleted": 0, "documents_kept": 1}  # hr/leave.md stays, readable by hr
    assert set(stored_by_document()) == {"hr:leave.md"}
    # The share's documents were deleted (each its own event) before the removal that ends the source.
    deleted = [e for e in audit_events(settings, DOCUMENT_DELETED) if e.target.startswith("document:share:")]
    assert len(deleted) == 3 and max(e.seq for e in deleted) < removed[0].seq


def test_acl_map_and_posix_group_change_access_without_reembedding(settings, folder, tmp_path) -> None:
    acl = tmp_path / "share.acl"
    acl.write_text("finance/**  group:finance\nhr/*  group:hr user:dana\n")
    define_source(settings, name="share", type="folder", tenant="default",
                  config={"path": str(folder), "posix_groups": True}, allow=["group:staff"], acl_map=str(acl))
    assert _sync(settings).added == 3
    own_group = f"group:{grp.getgrgid(os.getgid()).gr_name}"
    docs = stored_by_document()
    assert docs["share:finance/budget.txt"][0].meta["access"] == sorted(["group:finance", own_group])
    assert docs["share:hr/leave.md"][0].meta["access"] == sorted(["group:hr", "user:dana", own_group])
    assert docs["share:handbook.txt"][0].meta["access"] == sorted(["group:staff", own_group])
    embedded = len(SharedRuntime.embedder.embedded)

    acl.write_text("finance/**  group:finance group:board\n")  # hr/ falls back to --allow
    report = _sync(settings)
    assert (report.access_changed, report.changed, report.unchanged) == (2, 0, 1)
    assert len(SharedRuntime.embedder.embedded) == embedded  # access re-applied, nothing re-embedded
    docs = stored_by_document()
    assert all(c.meta["access"] == sorted(["group:board", "group:finance", own_group])
               for c in docs["share:finance/budget.txt"])
    assert all(c.embedding is not None for chunks in docs.values() for c in chunks)
    events = {e.target: e for e in audit_events(settings, DOCUMENT_ACCESS_CHANGED)}
    leave = events["document:share:hr/leave.md"]
    assert leave.before["access"] == sorted(["group:hr", "user:dana", own_group])
    assert leave.after["access"] == sorted(["group:staff", own_group])
    assert set(leave.after["chunk_ids"]) == {c.id for c in docs["share:hr/leave.md"]}
    assert _sync(settings).access_changed == 0  # applied once

    # A map that leaves a file with no reader removes its stored copy rather than keep the old access.
    acl.write_text("finance/**  group:finance\n")
    define_source(settings, name="mapped", type="folder", tenant="default", config={"path": str(folder)},
                  allow=[], acl_map=str(acl))
    report = _sync(settings, "mapped")
    assert (report.added, report.failed) == (1, 2) and "no principal" in report.failures[0]["reason"]
    acl.write_text("hr/**  group:hr\n")
    report = _sync(settings, "mapped")
    assert "mapped:finance/budget.txt" not in stored_by_document() and "mapped:hr/leave.md" in stored_by_document()
    assert any("stored copy was deleted" in f["reason"] for f in report.failures)

    acl.write_text("finance/** not-a-principal\n")
    report = _sync(settings)
    assert report.status == "failed" and "not a principal" in report.error
    assert {key for key in stored_by_document() if key.startswith("share:")} == {
        "share:finance/budget.txt", "share:hr/leave.md", "share:handbook.txt"}


def test_a_link_out_of_the_folder_is_never_read(settings, folder, tmp_path) -> None:
    secret = tmp_path / "outside" / "payroll.txt"
    secret.parent.mkdir()
    secret.write_text("Outside the share: the payroll password is swordfish. " * 3)
    (folder / "hr" / "payroll.txt").symlink_to(secret)
    (folder / "inside-link.txt").symlink_to(folder / "handbook.txt")  # a link within the folder is read
    define_source(settings, name="share", type="folder", tenant="default", config={"path": str(folder)},
                  allow=["group:staff"])
    report = _sync(settings)
    assert report.status == "succeeded", report
    assert "skipped hr/payroll.txt: a link to outside the folder" in report.notes
    stored = stored_by_document()
    assert "share:hr/payroll.txt" not in stored and "share:inside-link.txt" in stored
    assert not any("swordfish" in (chunk.content or "") for chunks in stored.values() for chunk in chunks)


def test_unreachable_folder_fails_with_reason_and_keeps_documents(settings, folder) -> None:
    define_source(settings, name="share", type="folder", tenant="default", config={"path": str(folder)},
                  allow=["group:staff"])
    assert _sync(settings).added == 3
    folder.rename(folder.with_name("unmounted"))
    report = _sync(settings)
    assert report.status == "failed"
    assert "does not exist or is not a directory" in report.error
    assert len(stored_by_document()) == 3 and report.deleted == 0
    status = source_status(settings, "default", "share")
    assert status["last_status"] == "failed" and "does not exist" in status["last_error"]
    assert status["documents"] == 3


def test_failed_files_are_reported_and_retried(settings, folder, monkeypatch) -> None:
    (folder / "empty.txt").write_text("   ")  # fails in the ingestion worker: no text
    (folder / "huge.txt").write_text("word " * 3000)  # fails before it is queued: over the size limit
    settings = settings.model_copy(update={"max_file_bytes": 10_000})
    define_source(settings, name="share", type="folder", tenant="default", config={"path": str(folder)},
                  allow=["group:staff"])
    report = _sync(settings)
    assert (report.added, report.failed, report.status) == (3, 2, "completed_with_errors")
    reasons = {f["key"]: f["reason"] for f in report.failures}
    assert set(reasons) == {"empty.txt", "huge.txt"}
    assert "empty" in reasons["empty.txt"] and "limit" in reasons["huge.txt"]
    assert {f["key"] for f in source_status(settings, "default", "share")["failures"]} == set(reasons)
    assert _sync(settings).failed == 2  # tried again at every run while they fail
    (folder / "empty.txt").write_text("Now the file holds a sentence about the fire drill on Friday.")
    (folder / "huge.txt").unlink()
    report = _sync(settings)
    assert (report.added, report.deleted, report.failed, report.status) == (1, 1, 0, "succeeded")


def test_a_zip_bomb_in_a_synced_folder_fails_with_a_reason_inside_the_conversion_limits(settings, folder) -> None:
    # The sync path converts through the same bounded conversion as uploads and `docqa ingest`.
    (folder / "bomb.docx").write_bytes(zip_bomb_docx())
    define_source(settings, name="share", type="folder", tenant="default", config={"path": str(folder)},
                  allow=["group:staff"])
    report = _sync(settings)
    assert (report.added, report.failed, report.status) == (3, 1, "completed_with_errors")
    [failure] = report.failures
    assert failure["key"] == "bomb.docx" and "decompress" in failure["reason"].lower(), failure
    assert "share:bomb.docx" not in stored_by_document()


def _expected_state(settings: Settings) -> tuple[dict, dict]:
    docs = {key: sorted((c.id, c.content, tuple(c.meta["access"])) for c in chunks)
            for key, chunks in stored_by_document().items()}
    entries = {key: (e.fingerprint, tuple(e.access or ()), e.status, e.pending_item)
               for key, e in _entries(settings).items()}
    return docs, entries


@pytest.mark.parametrize("step", ["queued", "processed", "settled", "deleted"])
def test_sync_killed_at_each_step_and_run_again_ends_in_the_same_state(settings, folder, monkeypatch, step) -> None:
    define_source(settings, name="share", type="folder", tenant="default", config={"path": str(folder)},
                  allow=["group:staff"])
    _sync(settings)
    for index in range(5):
        (folder / f"new{index}.txt").write_text(f"New memo number {index} about the quarterly review. " * 3)
    (folder / "finance" / "budget.txt").write_text("Budget revised again: 31,000 euros. " * 4)
    (folder / "hr" / "leave.md").unlink()

    # Two items per job, so a run is killed with part of its work done: after the second job is queued (before
    # it is processed), after it is processed (before the entries take it over), before the deletions, and
    # after the store deleted a document (before its entry is gone).
    monkeypatch.setattr(sync_module, "ITEMS_PER_JOB", 2)
    if step == "deleted":
        monkeypatch.setattr(SharedRuntime.store, "delete_documents", _then(SharedRuntime.store.delete_documents,
                                                                           Killed))
    else:
        target, die_at = {"queued": ("_dispatch", 2), "processed": ("_settle", 2), "settled": ("_delete", 1)}[step]
        original = getattr(sync_module, target)
        calls = {"n": 0}

        def die_midway(*args, **kwargs):
            calls["n"] += 1
            if calls["n"] == die_at:
                raise Killed
            return original(*args, **kwargs)

        monkeypatch.setattr(sync_module, target, die_midway)
    with pytest.raises(Killed):
        _sync(settings)
    monkeypatch.undo()
    monkeypatch.setattr("docqa.runtime.Runtime", SharedRuntime)

    report = _sync(settings)
    assert report.status == "succeeded", report
    docs, entries = _expected_state(settings)
    assert set(docs) == {"share:finance/budget.txt", "share:handbook.txt",
                         *(f"share:new{i}.txt" for i in range(5))}
    assert "31,000" in str(docs["share:finance/budget.txt"])
    assert all(pending is None and status == "synced" for _, _, status, pending in entries.values())
    assert set(entries) == {key.removeprefix("share:") for key in docs}
    # Every change audited exactly once, however the work was split between the two runs.
    ingested = [e.target for e in audit_events(settings, DOCUMENT_INGESTED)]
    assert sorted(ingested) == sorted(
        ["document:share:hr/leave.md", "document:share:handbook.txt", "document:share:finance/budget.txt",
         "document:share:finance/budget.txt", *(f"document:share:new{i}.txt" for i in range(5))])
    assert [e.target for e in audit_events(settings, DOCUMENT_DELETED)] == ["document:share:hr/leave.md"]
    # A third run finds nothing to do.
    again = _sync(settings)
    assert (again.added, again.changed, again.deleted, again.unchanged) == (0, 0, 0, 7)


def _then(function, exc: type[BaseException]):
    def wrapped(*args, **kwargs):
        function(*args, **kwargs)
        raise exc

    return wrapped


def test_access_change_killed_after_the_store_write_is_audited_once(settings, folder, tmp_path,
                                                                    monkeypatch) -> None:
    acl = tmp_path / "share.acl"
    acl.write_text("finance/**  group:finance\n")
    define_source(settings, name="share", type="folder", tenant="default", config={"path": str(folder)},
                  allow=["group:staff"], acl_map=str(acl))
    _sync(settings)
    acl.write_text("finance/**  group:board\n")
    monkeypatch.setattr(SharedRuntime.store, "write_documents", _then(SharedRuntime.store.write_documents, Killed))
    with pytest.raises(Killed):
        _sync(settings)
    monkeypatch.undo()
    monkeypatch.setattr("docqa.runtime.Runtime", SharedRuntime)
    assert audit_events(settings, DOCUMENT_ACCESS_CHANGED) == []  # the store has it, the commit never came
    assert _sync(settings).access_changed == 1
    [event] = audit_events(settings, DOCUMENT_ACCESS_CHANGED)
    assert (event.before["access"], event.after["access"]) == (["group:finance"], ["group:board"])
    assert _sync(settings).access_changed == 0
