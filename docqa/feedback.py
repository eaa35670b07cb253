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
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import DateTime, ForeignKey, String, Text, UniqueConstraint, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from docqa.audit.models import STATUS_COMPLETED, AuditTrace
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


def approved_examples(session: Session, tenant: str) -> Iterator[dict[str, Any]]:
    """One example per question with an approved answer: `question`, `golden_answers`, `trace_ids`.

    An answer counts as approved when its asker rated it up; the same question asked again groups its approved
    answers (citation markers removed, duplicates once), in the order they were asked.
    """
    query = (
        select(AuditTrace.id, AuditTrace.question, AuditTrace.answer)
        .join(AnswerFeedback, AnswerFeedback.trace_id == AuditTrace.id)
        .where(AnswerFeedback.tenant == tenant, AuditTrace.tenant == tenant, AnswerFeedback.rating == "up",
               AuditTrace.status == STATUS_COMPLETED)
        .order_by(AuditTrace.seq)
    )
    examples: dict[str, dict[str, Any]] = {}
    for trace_id, question, answer in session.execute(query):
        golden = _CITATION_MARK.sub("", answer or "").strip()
        if not golden:
            continue
        key = " ".join(question.split()).casefold()
        example = examples.setdefault(key, {"question": question.strip(), "golden_answers": [], "trace_ids": []})
        if golden not in example["golden_answers"]:
            example["golden_answers"].append(golden)
        example["trace_ids"].append(trace_id)
    yield from examples.values()


def _iso(value: datetime) -> str:
    return (value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)).isoformat()


# ---- `docqa feedback export` -------------------------------------------------------------------------------


def add_feedback_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("feedback", help="feedback on answers")
    sub = p.add_subparsers(dest="feedback_command", required=True)
    export = sub.add_parser("export", help="approved answers as an evaluation dataset (JSON Lines: question, "
                                           "golden_answers)")
    export.add_argument("--tenant", help="tenant whose feedback to export (default: DOCQA_TENANT)")
    export.add_argument("--out", default="-", help="output file (default: - for stdout)")
    export.set_defaults(handler=export_command)


def export_command(args: argparse.Namespace, settings: Any) -> int:
    from docqa.db import session_factory

    tenant = args.tenant or settings.tenant
    with session_factory(settings)() as session:
        lines = [json.dumps(example, ensure_ascii=False) + "\n" for example in approved_examples(session, tenant)]
    if args.out == "-":
        sys.stdout.writelines(lines)
    else:
        Path(args.out).write_text("".join(lines), encoding="utf-8")
    print(f"{len(lines)} questions with approved answers exported", file=sys.stderr)
    return 0
