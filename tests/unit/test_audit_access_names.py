"""`docqa audit access --document` by the names auditors see: a source id below the ingested folder, a file
name as citations display it, an absolute path recorded before source ids were relative, and a name several
documents share (the candidates are listed, nothing is decided)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from docqa.audit import events as ev
from docqa.audit.access import replay_access
from docqa.audit.cli import access_command
from docqa.audit.events import append_event
from docqa.audit.recorder import audit_session
from docqa.db import session_factory
from docqa.schema import upgrade_database
from docqa.settings import Settings
from tests.support.audit import utc

T0 = utc(2026, 3, 1, 9)


@pytest.fixture
def settings(tmp_path) -> Settings:
    settings = Settings(data_dir=tmp_path)
    upgrade_database(settings)
    with audit_session(settings) as session:
        def event(at, action, target, **fields):
            append_event(session, settings, tenant="acme", actor="root", action=action, target=target, at=at,
                         **fields)

        event(T0, ev.USER_CREATED, "user:bob", after={"role": "user", "groups": ["hr"], "active": True})
        # Ingested before source ids were relative: the absolute path at ingest time.
        event(T0, ev.DOCUMENT_INGESTED, "document:/srv/handbook/policies/travel-policy.md",
              after={"access": ["group:hr"], "chunk_ids": ["c-1"]})
        # Ingested since: the path below the ingested folder, as citations show it.
        event(T0, ev.DOCUMENT_INGESTED, "document:benefits/leave.md", after={"access": ["group:hr"], "chunk_ids": []})
        event(T0, ev.DOCUMENT_INGESTED, "document:eu/README.md", after={"access": ["group:eu"], "chunk_ids": []})
        event(T0, ev.DOCUMENT_INGESTED, "document:us/README.md", after={"access": ["group:hr"], "chunk_ids": []})
    return settings


def ask(settings, document):
    with session_factory(settings)() as session:
        return replay_access(session, tenant="acme", principal="user:bob", document=document,
                             at=T0 + timedelta(hours=1))


@pytest.mark.parametrize(("name", "source_id"), [
    ("travel-policy.md", "/srv/handbook/policies/travel-policy.md"),         # the displayed name, old form
    ("policies/travel-policy.md", "/srv/handbook/policies/travel-policy.md"),
    ("leave.md", "benefits/leave.md"),                                      # the displayed name, new form
])
def test_a_displayed_name_finds_the_document_in_either_form(settings, name, source_id) -> None:
    answer = ask(settings, name)
    assert answer.allowed and answer.resolved == source_id


def test_a_source_id_and_a_chunk_id_are_taken_as_they_are(settings) -> None:
    assert ask(settings, "benefits/leave.md").allowed
    assert ask(settings, "benefits/leave.md").resolved is None
    assert ask(settings, "c-1").allowed


def test_a_shared_name_lists_its_candidates_and_decides_nothing(settings, capsys) -> None:
    answer = ask(settings, "README.md")
    assert not answer.allowed and answer.candidates == ["eu/README.md", "us/README.md"]
    assert ask(settings, "us/README.md").allowed and not ask(settings, "eu/README.md").allowed

    class Args:
        principal, document, tenant, json, at = "user:bob", "README.md", "acme", False, T0 + timedelta(hours=1)

    assert access_command(Args, settings) == 2
    out = capsys.readouterr().out
    assert "'README.md' names 2 documents" in out and "  eu/README.md\n  us/README.md" in out
    Args.document = "travel-policy.md"
    assert access_command(Args, settings) == 0
    expected = "YES: user:bob could read travel-policy.md (/srv/handbook/policies/travel-policy.md)"
    assert expected in capsys.readouterr().out


def test_an_unknown_name_is_no(settings) -> None:
    answer = ask(settings, "payroll.md")
    assert not answer.allowed and not answer.candidates
