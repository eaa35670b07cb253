"""IMAP sources end to end against a real Dovecot on a loopback port (Debian's dovecot-imapd, installed by
scripts/test.sh): messages and their attachments from two folders, the mailbox owner and an ACL map on folders,
a new and an expunged message, a refused login, a missing password variable and a server that is down."""

from __future__ import annotations

from collections.abc import Iterator
from email.message import EmailMessage
from pathlib import Path

import pytest

from docqa.audit.events import DOCUMENT_DELETED
from docqa.settings import Settings
from docqa.sources.definitions import define_source
from docqa.sources.sync import sync_source
from tests.support.dovecot import DovecotServer, dovecot_available
from tests.support.sample_files import pdf_bytes
from tests.support.sources_fakes import SharedRuntime, audit_events, sources_settings, stored_by_document

pytestmark = pytest.mark.skipif(not dovecot_available(), reason="dovecot is not installed (scripts/test.sh does)")


def message(subject: str, body: str, attachment: tuple[str, bytes, str] | None = None) -> bytes:
    mail = EmailMessage()
    mail["From"], mail["To"], mail["Subject"] = "lee@example.org", "dana@example.org", subject
    mail.set_content(body)
    if attachment is not None:
        name, data, mime = attachment
        maintype, subtype = mime.split("/")
        mail.add_attachment(data, maintype=maintype, subtype=subtype, filename=name)
    return bytes(mail)


@pytest.fixture(scope="module")
def dovecot() -> Iterator[DovecotServer]:
    with DovecotServer(user="dana", password="imap-pass-123") as server:
        yield server


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("DANA_IMAP_PASSWORD", "imap-pass-123")
    return sources_settings(tmp_path, monkeypatch)


def _define(settings: Settings, dovecot: DovecotServer, name: str, folders: list[str], **extra) -> None:
    define_source(settings, name=name, type="imap", tenant="default",
                  config={"host": "127.0.0.1", "port": dovecot.port, "tls": False, "user": "dana",
                          "password_env": "DANA_IMAP_PASSWORD", "folders": folders}, allow=[], **extra)


def _sync(settings: Settings, name: str):
    return sync_source(settings, tenant="default", name=name, actor="scheduler")


def test_messages_with_attachments_access_additions_and_expunges(settings, dovecot, tmp_path) -> None:
    dovecot.append("Test1", message("Budget review", "The Atlas budget review is on Friday at ten.",
                                    ("minutes.pdf", pdf_bytes(["Atlas budget approved at 40,000 euros"]),
                                     "application/pdf")))
    dovecot.append("Test1", message("Lunch", "Team lunch moves to Thursday this week."))
    dovecot.append("Test1/Atlas", message("Atlas kickoff", "Atlas kicks off on March 3rd in room 4.",
                                          ("agenda.txt", b"Agenda: scope, staffing, schedule.", "text/plain")))
    acl = tmp_path / "mail.acl"
    acl.write_text("Test1/Atlas  group:atlas user:dana\n")
    _define(settings, dovecot, "mail", ["Test1", "Test1/Atlas"], acl_map=str(acl))
    report = _sync(settings, "mail")
    assert (report.added, report.failed, report.status) == (3, 0, "succeeded"), report
    docs = stored_by_document()
    assert len(docs) == 3
    by_subject = {chunks[0].meta["title"]: chunks for chunks in docs.values()}
    budget = by_subject["Budget review"]
    text = " ".join(c.content for c in budget)
    assert "Friday at ten" in text and "40,000 euros" in text  # the body and the PDF attachment
    assert {tuple(c.meta["access"]) for c in budget} == {("user:dana",)}  # the mailbox owner
    assert {tuple(c.meta["access"]) for c in by_subject["Atlas kickoff"]} == {("group:atlas", "user:dana")}
    assert "staffing" in " ".join(c.content for c in by_subject["Atlas kickoff"])
    assert all(c.meta["source_name"] == "mail" for chunks in docs.values() for c in chunks)

    # Nothing new: nothing fetched again.
    embedded = len(SharedRuntime.embedder.embedded)
    assert _sync(settings, "mail").unchanged == 3
    assert len(SharedRuntime.embedder.embedded) == embedded

    dovecot.append("Test1", message("Offsite", "The offsite is in Lyon in June."))
    dovecot.delete("Test1", 2)  # the lunch message
    report = _sync(settings, "mail")
    assert (report.added, report.deleted, report.unchanged) == (1, 1, 2)
    titles = {chunks[0].meta["title"] for chunks in stored_by_document().values()}
    assert titles == {"Budget review", "Atlas kickoff", "Offsite"}
    deleted = audit_events(settings, DOCUMENT_DELETED)
    assert len(deleted) == 1 and deleted[0].before["access"] == ["user:dana"]


def test_refused_login_missing_password_and_server_down(settings, dovecot, monkeypatch) -> None:
    dovecot.append("Test2", message("Hello", "A message in the second test folder."))
    _define(settings, dovecot, "mail", ["Test2"])
    assert _sync(settings, "mail").added == 1

    monkeypatch.setenv("DANA_IMAP_PASSWORD", "wrong")
    report = _sync(settings, "mail")
    assert report.status == "failed" and "refused the login of dana" in report.error
    assert "wrong" not in report.error
    monkeypatch.delenv("DANA_IMAP_PASSWORD")
    report = _sync(settings, "mail")
    assert report.status == "failed" and "DANA_IMAP_PASSWORD" in report.error and "not set" in report.error

    monkeypatch.setenv("DANA_IMAP_PASSWORD", "imap-pass-123")
    _define(settings, dovecot, "missing", ["No/Such/Folder"])
    report = _sync(settings, "missing")
    assert report.status == "failed" and "No/Such/Folder" in report.error
    assert len(stored_by_document()) == 1


def test_server_down_keeps_documents(settings) -> None:
    with DovecotServer(user="dana", password="imap-pass-123") as server:
        server.append("INBOX", message("Hi", "Only message."))
        _define(settings, server, "mail", ["INBOX"])
        assert _sync(settings, "mail").added == 1
    report = _sync(settings, "mail")
    assert report.status == "failed" and "cannot connect" in report.error
    assert len(stored_by_document()) == 1
