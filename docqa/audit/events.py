"""Audit events: who changed who can see what, appended to the same HMAC chain as the traces.

An event is written in the same SQL transaction as the change it records (`append_event` inside the caller's
`audit_session`): a change that fails or rolls back leaves no event, and an event never commits without its
change. Changes to the document store (not transactional) are made inside the transaction that holds the event,
after the event is staged, so a store error rolls the event back (`event_around`).

Usage:
    with audit_session(settings) as session:
        user = directory.create_user(session, "acme", "bob", "user", ["finance"])
        append_event(session, settings, tenant="acme", actor="alice", action=USER_CREATED, target="user:bob",
                     after={"role": "user", "groups": ["finance"], "active": True})
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.orm import Session

from docqa.audit.canonical import canonical_bytes, event_payload
from docqa.audit.chain import append_link
from docqa.audit.keys import hmac_key
from docqa.audit.models import AuditEvent
from docqa.audit.scrub import clean, clean_text, secret_values
from docqa.audit.tenant_numbering import EVENT
from docqa.settings import Settings

RESULT_SUCCESS = "success"
RESULT_FAILURE = "failure"

KEY_ISSUED = "key.issued"
KEY_REVOKED = "key.revoked"
USER_CREATED = "user.created"
USER_CHANGED = "user.changed"
USER_DEACTIVATED = "user.deactivated"
GROUP_CREATED = "group.created"
GROUP_MEMBER_ADDED = "group.member_added"
GROUP_MEMBER_REMOVED = "group.member_removed"
DOCUMENT_INGESTED = "document.ingested"
DOCUMENT_DELETED = "document.deleted"
DOCUMENT_ACCESS_CHANGED = "document.access_changed"
RECORDS_INGESTED = "records.ingested"
SIGNIN_FAILED = "auth.signin_failed"
TOPICS_REFIT = "topics.refit"
# A source kept in sync defined or removed (`docqa sources add/remove`, the admin API): its access list with it.
SOURCE_DEFINED = "source.defined"
SOURCE_REMOVED = "source.removed"
RETENTION_RUN = "audit.retention"
CHECKPOINT_SIGNED = "audit.checkpoint"
# Configuration that changes answers (a pipeline loaded from YAML, models, prompts, limits), recorded by hash.
CONFIG_LOADED = "config.loaded"
# Passages a caller searched for or read directly (the MCP server's `search` and `read_passage`), when
# DOCQA_AUDIT_PASSAGE_READS is set; a read refused as not found is recorded as a failure.
PASSAGES_SEARCHED = "passages.searched"
PASSAGE_READ = "passage.read"

ACTIONS = (
    KEY_ISSUED, KEY_REVOKED, USER_CREATED, USER_CHANGED, USER_DEACTIVATED, GROUP_CREATED, GROUP_MEMBER_ADDED,
    GROUP_MEMBER_REMOVED, DOCUMENT_INGESTED, DOCUMENT_DELETED, DOCUMENT_ACCESS_CHANGED, RECORDS_INGESTED,
    SIGNIN_FAILED, TOPICS_REFIT, RETENTION_RUN, CHECKPOINT_SIGNED, CONFIG_LOADED, PASSAGES_SEARCHED, PASSAGE_READ,
    SOURCE_DEFINED, SOURCE_REMOVED,
)
# Events of no tenant (a failed sign-in before anyone is known, a retention run) are kept under this name.
SYSTEM_TENANT = "-"


def build_event(
    settings: Settings,
    *,
    tenant: str,
    actor: str,
    action: str,
    target: str,
    before: dict[str, Any] | None = None,
    after: dict[str, Any] | None = None,
    result: str = RESULT_SUCCESS,
    request_id: str | None = None,
    at: datetime | None = None,
) -> AuditEvent:
    """A scrubbed event row, not yet linked: the configured secrets and token shapes are masked everywhere."""
    if action not in ACTIONS:
        raise ValueError(f"unknown audit action {action!r}")
    secrets = secret_values(settings)
    return AuditEvent(
        id=str(uuid.uuid4()),
        at=(at or datetime.now(UTC)).astimezone(UTC),
        tenant=clean_text(tenant or SYSTEM_TENANT, secrets)[:255],
        actor=clean_text(actor or "system", secrets)[:255],
        action=action,
        target=clean_text(target, secrets)[:1024],
        before=None if before is None else clean(dict(before), secrets),
        after=None if after is None else clean(dict(after), secrets),
        result=result,
        request_id=None if request_id is None else clean_text(request_id, secrets)[:64],
    )


def append_event(session: Session, settings: Settings, **fields: Any) -> AuditEvent:
    """Build an event (`build_event` fields), link it to the chain tail and stage it in the caller's transaction.

    The session must come from `recorder.audit_session` (it takes the chain lock, which is held until the
    transaction ends); the caller's commit writes the change and its event together.
    """
    event = build_event(settings, **fields)
    payload = canonical_bytes(event_payload(event))
    append_link(session, event, EVENT, hmac_key(settings), payload)
    return event


def record_event(settings: Settings, **fields: Any) -> str:
    """Append one event in its own transaction (for changes outside the SQL database); returns its id."""
    from docqa.audit.recorder import audit_session

    with audit_session(settings) as session:
        return append_event(session, settings, **fields).id


@contextmanager
def event_around(settings: Settings, **fields: Any) -> Iterator[Session]:
    """Stage an event, then run the block (the change itself, e.g. a document-store write) in its transaction.

    The block raising rolls the event back; the event commits only after the block succeeded.
    """
    from docqa.audit.recorder import audit_session

    with audit_session(settings) as session:
        append_event(session, settings, **fields)
        yield session


class FailureThrottle:
    """Decides which failed sign-ins become events, so a flood cannot grow the audit table without bound.

    At most one event per source (key id, else client address) per `window_s`; the failures in between are
    counted and reported in the source's next event (`after.suppressed`). At most `max_sources` sources are
    tracked (least recently seen dropped first) and at most `max_events` events are written per window in
    all, so one worker writes at most `max_events` sign-in events per `window_s` whatever the traffic.
    """

    def __init__(self, window_s: float = 60.0, max_events: int = 60, max_sources: int = 10_000) -> None:
        self.window_s = window_s
        self.max_events = max_events
        self.max_sources = max_sources
        self._seen: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._window_start = 0.0
        self._window_events = 0
        self._lock = threading.Lock()

    def admit(self, source: str, now: float | None = None) -> int | None:
        """`None` when this failure is only counted; else how many earlier failures of the source it reports."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if now - self._window_start >= self.window_s:
                self._window_start, self._window_events = now, 0
            last, suppressed = self._seen.pop(source, (float("-inf"), 0))
            if now - last < self.window_s or self._window_events >= self.max_events:
                self._remember(source, (last, suppressed + 1))
                return None
            self._window_events += 1
            self._remember(source, (now, 0))
            return suppressed

    def _remember(self, source: str, value: tuple[float, int]) -> None:
        self._seen[source] = value
        while len(self._seen) > self.max_sources:
            self._seen.popitem(last=False)
