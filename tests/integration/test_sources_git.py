"""Git sources end to end against a real repository reached by a file URL with the `git` CLI: the files at the
branch head, a commit that adds, changes, deletes and renames files, another branch left alone, and an
unreachable repository."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from docqa.audit.events import DOCUMENT_DELETED
from docqa.settings import Settings
from docqa.sources.definitions import define_source
from docqa.sources.scheduler import remove_source
from docqa.sources.sync import sync_source
from tests.support.sources_fakes import SharedRuntime, audit_events, sources_settings, stored_by_document

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="the git command is not installed")


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@example.org", "HOME": str(repo), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return sources_settings(tmp_path, monkeypatch)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "wiki"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "docs").mkdir()
    (repo / "docs" / "deploy.md").write_text("# Deploy\n\nDeploys happen on Tuesdays after the review. " * 3)
    (repo / "docs" / "oncall.md").write_text("# On call\n\nThe on-call rota changes every Monday. " * 3)
    (repo / "README.md").write_text("Team wiki. Ask in the team channel before editing. " * 3)
    (repo / ".github").mkdir()
    (repo / ".github" / "notes.md").write_text("hidden folder, never read")
    (repo / "tool.py").write_text("print('not a document type')")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    return repo


def _sync(settings: Settings):
    return sync_source(settings, tenant="default", name="wiki", actor="cli:test")


def test_git_branch_head_synced_commit_by_commit(settings, repo, tmp_path) -> None:
    define_source(settings, name="wiki", type="git", tenant="default",
                  config={"url": repo.as_uri(), "branch": "main"}, allow=["group:eng"])
    report = _sync(settings)
    assert (report.added, report.failed, report.status) == (3, 0, "succeeded")
    assert set(stored_by_document()) == {"wiki:docs/deploy.md", "wiki:docs/oncall.md", "wiki:README.md"}

    # Work on another branch is not the synced branch's.
    git(repo, "checkout", "-q", "-b", "draft")
    (repo / "draft.md").write_text("A draft nobody approved yet. " * 5)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "draft")
    git(repo, "checkout", "-q", "main")
    report = _sync(settings)
    assert (report.added, report.changed, report.deleted, report.unchanged) == (0, 0, 0, 3)

    embedded = len(SharedRuntime.embedder.embedded)
    (repo / "docs" / "deploy.md").write_text("# Deploy\n\nDeploys now happen on Thursdays. " * 3)
    git(repo, "rm", "-q", "docs/oncall.md")
    git(repo, "mv", "README.md", "docs/index.md")
    (repo / "docs" / "faq.md").write_text("# FAQ\n\nThe wiki is backed up nightly. " * 3)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "second")
    report = _sync(settings)
    assert (report.added, report.changed, report.deleted, report.unchanged) == (2, 1, 2, 0)
    docs = stored_by_document()
    assert set(docs) == {"wiki:docs/deploy.md", "wiki:docs/index.md", "wiki:docs/faq.md"}
    assert "Thursdays" in docs["wiki:docs/deploy.md"][0].content
    assert all(c.meta["source_name"] == "wiki" for chunks in docs.values() for c in chunks)
    new_chunks = {c.id for key in ("wiki:docs/deploy.md", "wiki:docs/index.md", "wiki:docs/faq.md")
                  for c in docs[key]}
    assert set(SharedRuntime.embedder.embedded[embedded:]) == new_chunks
    assert {e.target for e in audit_events(settings, DOCUMENT_DELETED)} == {
        "document:wiki:docs/oncall.md", "document:wiki:README.md"}

    # The repository goes away: the run fails with git's reason, and the documents stay.
    repo.rename(tmp_path / "moved")
    report = _sync(settings)
    assert report.status == "failed" and "cannot fetch" in report.error
    assert len(stored_by_document()) == 3

    assert remove_source(settings, "default", "wiki", actor="cli:test") == 3
    assert stored_by_document() == {}
    assert not (settings.data_dir / "sources" / "git" / "default" / "wiki").exists()


def test_unknown_branch_fails_with_reason(settings, repo) -> None:
    define_source(settings, name="wiki", type="git", tenant="default",
                  config={"url": str(repo), "branch": "no-such-branch"}, allow=["group:eng"])
    report = _sync(settings)
    assert report.status == "failed" and "cannot clone" in report.error and "no-such-branch" in report.error
    assert stored_by_document() == {}
