"""Who could read what, when: replay a tenant's audit events up to a moment and decide one principal's access.

A principal `user:<id>` could read a document at time T when, replaying the tenant's events committed at or
before T: the user had been created and was not deactivated; the document (a source id as ingested, a patient
id of records, or a chunk id as traces cite it) was ingested and not deleted since (for a chunk id: its
document's latest write still held that chunk); and the document's access list then named `everyone`, the
user, or a group the user was a member of. A principal `group:<name>` is judged on the access list alone.

A document may also be named as citations display it: its file name or the end of its path
("travel-policy.md", "policies/travel-policy.md"). That finds documents ingested under their path below the
ingested folder and those ingested before, under their absolute path, alike. A name that fits several documents
decides nothing: the answer is "no" with the `candidates` to choose from.

The answer is only as complete as the event history: users, memberships and documents created before events
were recorded have no events, and the answer fails closed ("no") and says so.

Usage:
    with session_factory(settings)() as session:
        answer = replay_access(session, tenant="acme", principal="user:bob", document="memo.txt", at=when)
    answer.allowed, answer.reasons, answer.events
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.access import EVERYONE
from docqa.audit import events as ev
from docqa.audit.models import AuditEvent
from docqa.audit.timestamps import as_utc

_DOCUMENT_ACTIONS = (ev.DOCUMENT_INGESTED, ev.RECORDS_INGESTED, ev.DOCUMENT_ACCESS_CHANGED, ev.DOCUMENT_DELETED)
_USER_ACTIONS = (ev.USER_CREATED, ev.USER_CHANGED, ev.USER_DEACTIVATED)
_GROUP_ACTIONS = (ev.GROUP_MEMBER_ADDED, ev.GROUP_MEMBER_REMOVED)


@dataclass
class AccessAnswer:
    allowed: bool
    tenant: str
    principal: str
    document: str
    at: str
    reasons: list[str] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    # Set when `document` was a displayed name: the source id it stands for, or the ids it could stand for.
    resolved: str | None = None
    candidates: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def event_dict(row: AuditEvent | Any, *, tenant_numbers: bool = False) -> dict[str, Any]:
    """An event as auditors read it: its fields and its chain position (`seq`), or with `tenant_numbers` (a
    tenant's auditors) its number among the tenant's events instead."""
    seq = row.tenant_seq if tenant_numbers else row.seq
    return {
        "id": row.id, "seq": None if seq is None else int(seq), "at": as_utc(row.at).isoformat().replace("+00:00", "Z"),
        "tenant": row.tenant, "actor": row.actor, "action": row.action, "target": row.target,
        "before": row.before, "after": row.after, "result": row.result, "request_id": row.request_id,
    }


def replay_access(session: Session, *, tenant: str, principal: str, document: str, at: datetime,
                  tenant_numbers: bool = False) -> AccessAnswer:
    """Whether `principal` could read `document` in `tenant` at `at`, and the events that decided it (numbered
    as `event_dict` does)."""
    when = as_utc(at)
    answer = AccessAnswer(False, tenant, principal, document, when.isoformat().replace("+00:00", "Z"))
    kind, _, name = principal.partition(":")
    if kind not in ("user", "group") or not name:
        raise ValueError("principal must be user:<id> or group:<name>")
    rows = [
        row for row in session.scalars(
            select(AuditEvent)
            .where(AuditEvent.tenant == tenant, AuditEvent.result == ev.RESULT_SUCCESS,
                   AuditEvent.action.in_(_DOCUMENT_ACTIONS + _USER_ACTIONS + _GROUP_ACTIONS))
            .order_by(AuditEvent.seq)
        )
        if as_utc(row.at) <= when
    ]
    document, ambiguous = resolve_document(rows, document)
    if ambiguous:
        answer.candidates = ambiguous
        answer.reasons.append(f"{answer.document!r} names {len(ambiguous)} documents: "
                              f"{', '.join(ambiguous)}; ask about one of them")
        return answer
    if document != answer.document:
        answer.resolved = document
    access, document_events = _document_access(rows, document, answer.reasons)
    principals = {principal, EVERYONE}
    active = True
    user_events: list[AuditEvent] = []
    if kind == "user":
        active, groups, user_events = _user_state(rows, name, answer.reasons)
        principals |= {f"group:{g}" for g in groups}
    granted_by = sorted(set(access or []) & principals)
    answer.allowed = bool(access) and active and bool(granted_by)
    if access is not None and active:
        if granted_by:
            answer.reasons.append(f"the access list {sorted(access)} names {', '.join(granted_by)}")
        else:
            answer.reasons.append(f"the access list {sorted(access)} names none of {sorted(principals)}")
    # The events that decided it: the document's, and the user's that grant or withhold the principals.
    decisive = {e.id: e for e in document_events}
    for event in user_events:
        grants = [p for p in _granted_principals(event, name) if p in (access or [])]
        if event.action in _USER_ACTIONS or grants or event.action == ev.GROUP_MEMBER_REMOVED:
            decisive[event.id] = event
    ordered = sorted(decisive.values(), key=lambda e: e.seq)
    answer.events = [event_dict(e, tenant_numbers=tenant_numbers) for e in ordered]
    return answer


def resolve_document(rows: list[AuditEvent], name: str) -> tuple[str, list[str]]:
    """The source id `name` stands for, and the candidate source ids when it stands for several.

    An exact source id, patient id or chunk id is kept as it is. Otherwise a name that is the file name or the
    end of the path of ingested documents (by `/` components) names them.
    """
    targets = {e.target for e in rows if e.action in _DOCUMENT_ACTIONS and e.target}
    names = {t.removeprefix("document:").removeprefix("patient:") for t in targets}
    if name in names or any(_mentions(e, name) for e in rows if e.action in _DOCUMENT_ACTIONS):
        return name, []
    tail = name.strip().replace("\\", "/").strip("/")
    if not tail:
        return name, []
    matches = sorted({n for n in names if n.replace("\\", "/").endswith("/" + tail) or n == tail})
    if len(matches) == 1:
        return matches[0], []
    return name, matches


def _mentions(event: AuditEvent, document: str) -> bool:
    if event.target in (document, f"document:{document}", f"patient:{document}"):
        return True
    return any(document in ((state or {}).get("chunk_ids") or []) for state in (event.before, event.after))


def _document_access(rows: list[AuditEvent], document: str,
                     reasons: list[str]) -> tuple[list[str] | None, list[AuditEvent]]:
    """The document's access list at the end of `rows` (None: not readable by anyone), and its events."""
    targets = {e.target for e in rows if e.action in _DOCUMENT_ACTIONS and _mentions(e, document)}
    if not targets:
        reasons.append(f"no event ingests {document!r} by then")
        return None, []
    names = (document, f"document:{document}", f"patient:{document}")
    by_chunk = all(target not in names for target in targets)
    readable: set[str] = set()
    exists = False
    used: list[AuditEvent] = []
    for target in sorted(targets):
        last = [e for e in rows if e.action in _DOCUMENT_ACTIONS and e.target == target][-1]
        used.append(last)
        holds = not by_chunk or document in ((last.after or {}).get("chunk_ids") or [])
        if last.action == ev.DOCUMENT_DELETED:
            reasons.append(f"{target} was deleted ({last.at:%Y-%m-%d %H:%M:%S} UTC)")
        elif not holds:
            reasons.append(f"{target} was re-ingested without chunk {document}")
        else:
            exists = True
            readable |= set((last.after or {}).get("access") or [])
            reasons.append(f"{target} was readable by {sorted((last.after or {}).get('access') or [])} "
                           f"({last.action} at {last.at:%Y-%m-%d %H:%M:%S} UTC)")
    return (sorted(readable) if exists else None), used


def _granted_principals(event: AuditEvent, user_id: str) -> list[str]:
    if event.action == ev.USER_CREATED:
        return [f"group:{g}" for g in (event.after or {}).get("groups") or []]
    if event.action in _GROUP_ACTIONS and user_id in ((event.after or {}).get("members") or []):
        return [event.target]
    return []


def _user_state(rows: list[AuditEvent], user_id: str, reasons: list[str]) -> tuple[bool, set[str], list[AuditEvent]]:
    """Whether the user was active, their groups, and the events about them (user and membership events)."""
    active = False
    created = False
    groups: set[str] = set()
    mine: list[AuditEvent] = []
    for event in rows:
        after = event.after or {}
        if event.action in _USER_ACTIONS and event.target == f"user:{user_id}":
            mine.append(event)
            if event.action == ev.USER_CREATED:
                created, active, groups = True, True, set(after.get("groups") or [])
            if "active" in after:
                active = bool(after["active"])
            if "groups" in after and event.action != ev.USER_CREATED:
                groups = set(after["groups"] or [])
        elif event.action in _GROUP_ACTIONS and event.target.startswith("group:"):
            group = event.target.removeprefix("group:")
            was = user_id in ((event.before or {}).get("members") or [])
            now = user_id in (after.get("members") or [])
            if was != now or after.get("user") == user_id:
                mine.append(event)
                (groups.add if now else groups.discard)(group)
    if not created:
        reasons.append(f"no event creates user {user_id!r} by then (accounts created before events were "
                       "recorded are not covered)")
        return False, groups, mine
    if not active:
        reasons.append(f"user {user_id!r} was deactivated")
    else:
        reasons.append(f"user {user_id!r} was active, member of {sorted(groups) or 'no groups'}")
    return active, groups, mine
