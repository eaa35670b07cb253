"""Feedback on answers: thumbs up or down with an optional comment, stored against the answer's audit trace.

Only the person who asked may rate an answer (one rating per trace and user; rating again replaces it).
Auditors see the feedback with the trace and in its export. Approved answers (thumbs up) become an evaluation
dataset: one JSON line per question with the approved answers as `golden_answers`.

Feedback is kept beside the hash-chained trace, not inside it: a rating changes after the answer is given, and
the trace's MAC must not.

Usage:
    with session_factory(settings)() as session:
        record_feedback(session, tenant="acme", user_id="alice", trace_id=tid, rating="up", comment="spot on")
        session.commit()
        feedback_by_trace(session, [tid])[tid]          # [{"user_id", "rating", "comment", "updated_at"}]
        list(approved_examples(session, "acme"))        # [{"question", "golden_answers", "trace_ids"}]
        # only answers whose cited documents group:hr may read now:
        list(approved_examples(session, "acme", readable=lambda ids: readable_ids(store, hr_scope, ids)))
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, ForeignKey, String, Text, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from docqa.access import AccessScope
from docqa.audit.models import STATUS_COMPLETED, AuditStep, AuditTrace
from docqa.db import Base
from docqa.errors import DocqaError

RATINGS = ("up", "down")
MAX_COMMENT_CHARS = 2000
# "[1]" markers point into one run's citation list; a golden answer is compared as text.
_CITATION_MARK = re.compile(r"\s*\[\d{1,3}\]")


class AnswerFeedback(Base):
    """One user's rating of one answer (a completed trace of theirs)."""

    __tablename__ = "answer_feedback"
    __table_args__ = (UniqueConstraint("trace_id", "user_id"),)

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    # Retention deletes archived traces; their feedback goes with them.
    trace_id: Mapped[str] = mapped_column(ForeignKey("audit_traces.id", ondelete="CASCADE"), index=True)
    tenant: Mapped[str] = mapped_column(String(255), index=True)
    user_id: Mapped[str] = mapped_column(String(255))
    rating: Mapped[str] = mapped_column(String(8))
    comment: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class FeedbackError(DocqaError):
    """Feedback that cannot be stored; `reason` is "not_found" (no such answer of the caller's) or "invalid"."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def record_feedback(session: Session, *, tenant: str, user_id: str, trace_id: str, rating: str,
                    comment: str | None = None) -> dict[str, Any]:
    """Store (or replace) `user_id`'s rating of their answer `trace_id`; the caller commits.

    :raises FeedbackError: the trace is not an answer this user got in this tenant (reason "not_found", so other
        users' traces are indistinguishable from missing ones), or the rating or comment is invalid ("invalid").
    """
    if rating not in RATINGS:
        raise FeedbackError(f"rating must be one of {', '.join(RATINGS)}", "invalid")
    comment = (comment or "").strip() or None
    if comment is not None and len(comment) > MAX_COMMENT_CHARS:
        raise FeedbackError(f"comment is {len(comment)} characters long; the limit is {MAX_COMMENT_CHARS}", "invalid")
    trace = session.get(AuditTrace, trace_id)
    if trace is None or trace.tenant != tenant or trace.asked_by != user_id:
        raise FeedbackError("answer not found", "not_found")
    if trace.status != STATUS_COMPLETED:
        raise FeedbackError(f"the question was not answered (status {trace.status})", "invalid")
    now = datetime.now(UTC)
    row = session.scalar(select(AnswerFeedback).where(AnswerFeedback.trace_id == trace_id,
                                                      AnswerFeedback.user_id == user_id))
    if row is None:
        row = AnswerFeedback(trace_id=trace_id, tenant=tenant, user_id=user_id, created_at=now)
        session.add(row)
    row.rating, row.comment, row.updated_at = rating, comment, now
    session.flush()
    return feedback_payload(row)


def feedback_payload(row: AnswerFeedback) -> dict[str, Any]:
    return {"trace_id": row.trace_id, "user_id": row.user_id, "rating": row.rating, "comment": row.comment,
            "updated_at": _iso(row.updated_at)}


def feedback_by_trace(session: Session, trace_ids: Sequence[str]) -> dict[str, list[dict[str, Any]]]:
    """Feedback per trace id (traces without any are absent)."""
    found: dict[str, list[dict[str, Any]]] = {}
    if not trace_ids:
        return found
    query = select(AnswerFeedback).where(AnswerFeedback.trace_id.in_(list(trace_ids))).order_by(AnswerFeedback.id)
    for row in session.scalars(query):
        found.setdefault(row.trace_id, []).append(feedback_payload(row))
    return found


def approved_examples(session: Session, tenant: str, *,
                      readable: Callable[[list[str]], set[str]] | None = None) -> Iterator[dict[str, Any]]:
    """One example per question with an approved answer: `question`, `golden_answers`, `trace_ids`.

    An answer counts as approved when its asker rated it up; the same question asked again groups its approved
    answers (citation markers removed, duplicates once), in the order they were asked.

    :param readable: which of the given document ids the dataset's reader may read now (`access.readable_ids`
        with their scope). When given, an answer is kept only when every document it cites is readable; an answer
        citing nothing is kept only when its run retrieved nothing either (its text may come from what it read).
        None: every approved answer (the operator's full export).
    """
    query = (
        select(AuditTrace.id, AuditTrace.question, AuditTrace.answer, AuditTrace.citations)
        .join(AnswerFeedback, AnswerFeedback.trace_id == AuditTrace.id)
        .where(AnswerFeedback.tenant == tenant, AuditTrace.tenant == tenant, AnswerFeedback.rating == "up",
               AuditTrace.status == STATUS_COMPLETED)
        .order_by(AuditTrace.seq)
    )
    rows = list(session.execute(query))
    if readable is not None:
        rows = _readable_rows(session, rows, readable)
    examples: dict[str, dict[str, Any]] = {}
    for trace_id, question, answer, _citations in rows:
        golden = _CITATION_MARK.sub("", answer or "").strip()
        if not golden:
            continue
        key = " ".join(question.split()).casefold()
        example = examples.setdefault(key, {"question": question.strip(), "golden_answers": [], "trace_ids": []})
        if golden not in example["golden_answers"]:
            example["golden_answers"].append(golden)
        example["trace_ids"].append(trace_id)
    yield from examples.values()


def _readable_rows(session: Session, rows: list[Any], readable: Callable[[list[str]], set[str]],
                   batch: int = 500) -> list[Any]:
    cited = {row[0]: _cited_ids(row[3]) for row in rows}
    uncited = [trace_id for trace_id, ids in cited.items() if not ids]
    retrieved: set[str] = set()
    for start in range(0, len(uncited), batch):
        part = uncited[start:start + batch]
        for trace_id, documents in session.execute(
                select(AuditStep.trace_id, AuditStep.documents).where(AuditStep.trace_id.in_(part))):
            if documents:
                retrieved.add(trace_id)
    wanted = sorted({doc_id for ids in cited.values() for doc_id in ids})
    allowed: set[str] = set()
    for start in range(0, len(wanted), batch):
        allowed |= readable(wanted[start:start + batch])
    return [row for row in rows
            if (cited[row[0]] and cited[row[0]] <= allowed) or (not cited[row[0]] and row[0] not in retrieved)]


def _cited_ids(citations: Any) -> set[str]:
    return {c["document_id"] for c in citations or [] if isinstance(c, dict) and isinstance(c.get("document_id"), str)}


def _iso(value: datetime) -> str:
    return (value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)).isoformat()


# ---- `docqa feedback export` -------------------------------------------------------------------------------


def add_feedback_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("feedback", help="feedback on answers")
    sub = p.add_subparsers(dest="feedback_command", required=True)
    export = sub.add_parser("export", help="approved answers as an evaluation dataset (JSON Lines: question, "
                                           "golden_answers)")
    export.add_argument("--tenant", help="tenant whose feedback to export (default: DOCQA_TENANT)")
    who = export.add_mutually_exclusive_group(required=True)
    who.add_argument("--principal", help="user:<id> or group:<name>: only answers whose cited documents this "
                                         "principal may read now (a user with their current groups)")
    who.add_argument("--all", action="store_true", help="every approved answer of the tenant, whatever it cites "
                                                        "(the dataset then holds what only some users may read)")
    export.add_argument("--out", default="-", help="output file (default: - for stdout)")
    export.set_defaults(handler=export_command)


def export_command(args: argparse.Namespace, settings: Any) -> int:
    from docqa.db import session_factory

    tenant = args.tenant or settings.tenant
    with session_factory(settings)() as session:
        if args.all:
            readable = None
            print(f"exporting EVERY approved answer of tenant {tenant}, whatever documents it cites: share the "
                  "dataset only with people who may read all of them", file=sys.stderr)
        else:
            try:
                scope = reader_scope(session, tenant, args.principal)
            except FeedbackError as exc:
                print(exc.message, file=sys.stderr)
                return 2
            readable = _store_reader(settings, scope)
            print(f"exporting the approved answers whose cited documents {args.principal} may read now "
                  f"(as {', '.join(sorted(scope.principals))})", file=sys.stderr)
        examples = approved_examples(session, tenant, readable=readable)
        lines = [json.dumps(example, ensure_ascii=False) + "\n" for example in examples]
    if args.out == "-":
        sys.stdout.writelines(lines)
    else:
        Path(args.out).write_text("".join(lines), encoding="utf-8")
    print(f"{len(lines)} questions with approved answers exported", file=sys.stderr)
    return 0


def reader_scope(session: Session, tenant: str, principal: str) -> AccessScope:
    """The access scope of `principal` now: a group alone, or an active user with their current groups."""
    kind, _, name = principal.partition(":")
    if kind == "group" and name:
        return AccessScope(tenant=tenant, principals=frozenset({principal}))
    if kind != "user" or not name:
        raise FeedbackError(f"--principal must be user:<id> or group:<name>, not {principal!r}", "invalid")
    from docqa.accounts.directory import get_user

    user = get_user(session, tenant, name)
    if user is None or not user.active:
        raise FeedbackError(f"no active user {name!r} in tenant {tenant}", "not_found")
    return AccessScope(tenant=tenant, principals=frozenset({principal, *(f"group:{g.name}" for g in user.groups)}))


def _store_reader(settings: Any, scope: AccessScope) -> Callable[[list[str]], set[str]]:
    from docqa.access import readable_ids
    from docqa.stores.factory import build_document_store

    store = build_document_store(settings)
    return lambda ids: readable_ids(store, scope, ids)
