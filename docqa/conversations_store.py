"""Stored conversations: a user's questions and answers, kept per user so a follow-up can be asked later.

A conversation belongs to one user of one tenant. Everyone else, another user of the same tenant included, is
told it does not exist (`ConversationError` with reason "not_found"), so it can be neither read nor continued.
Each turn keeps the question as asked, the standalone question it was answered as, the answer with its
citations and its audit trace id. A follow-up is rewritten (`docqa.followups`) from the
stored questions and answers, never from anything the client sends.

Retention: with `DOCQA_CONVERSATION_RETENTION_DAYS` > 0, a conversation untouched for longer is gone: reads skip
it at once and `docqa conversations purge` (or the next listing) deletes it.

Usage:
    with session_factory(settings)() as session:
        conversation = start_conversation(session, tenant="acme", user_id="alice", title="Where is Halcyon?")
        append_turn(session, conversation, question="Where is Halcyon?", standalone="Where is Halcyon?",
                    answer="In Oslo [1].", trace_id=tid)
        session.commit()
        previous_questions(load_conversation(session, "acme", "alice", conversation.id))  # ["Where is Halcyon?"]
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import DateTime, ForeignKey, Integer, String, Text, delete, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from docqa.db import Base
from docqa.errors import DocqaError

MAX_TITLE_CHARS = 120
# A conversation's history is bounded like any other request input: older turns stop being continued.
MAX_TURNS = 200


class Conversation(Base):
    """One user's conversation; its turns are `ConversationTurn` rows."""

    __tablename__ = "conversations"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(255), index=True)
    user_id: Mapped[str] = mapped_column(String(255), index=True)
    title: Mapped[str] = mapped_column(String(MAX_TITLE_CHARS))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Retention counts from the last turn.
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


class ConversationTurn(Base):
    """One question and its answer in a conversation, with the trace that audits it."""

    __tablename__ = "conversation_turns"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    conversation_id: Mapped[str] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)
    question: Mapped[str] = mapped_column(Text)
    standalone: Mapped[str] = mapped_column(Text)
    answer: Mapped[str] = mapped_column(Text)
    answer_source: Mapped[str] = mapped_column(String(16))
    # JSON list of the answer's citations, so a reopened conversation shows its sources.
    citations: Mapped[str] = mapped_column(Text)
    # Not a foreign key: audit retention archives traces while a conversation may be kept.
    trace_id: Mapped[str | None] = mapped_column(String(36))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ConversationError(DocqaError):
    """`reason` is "not_found" (no such conversation of the caller's) or "full" (MAX_TURNS reached)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def _cutoff(retention_days: int) -> datetime | None:
    return datetime.now(UTC) - timedelta(days=retention_days) if retention_days > 0 else None


def start_conversation(session: Session, *, tenant: str, user_id: str, title: str) -> Conversation:
    now = datetime.now(UTC)
    title = " ".join(title.split())
    if len(title) > MAX_TITLE_CHARS:
        title = title[: MAX_TITLE_CHARS - 1] + "…"
    conversation = Conversation(id=str(uuid.uuid4()), tenant=tenant, user_id=user_id, title=title,
                                created_at=now, updated_at=now)
    session.add(conversation)
    session.flush()
    return conversation


def load_conversation(session: Session, tenant: str, user_id: str, conversation_id: str,
                      retention_days: int = 0) -> Conversation:
    """The caller's conversation; any other (another user's, expired, missing) raises reason "not_found"."""
    conversation = session.get(Conversation, conversation_id)
    cutoff = _cutoff(retention_days)
    if (conversation is None or conversation.tenant != tenant or conversation.user_id != user_id
            or (cutoff is not None and _aware(conversation.updated_at) < cutoff)):
        raise ConversationError("conversation not found", "not_found")
    return conversation


def turns_of(session: Session, conversation: Conversation) -> list[ConversationTurn]:
    query = (select(ConversationTurn).where(ConversationTurn.conversation_id == conversation.id)
             .order_by(ConversationTurn.position, ConversationTurn.id))
    return list(session.scalars(query))


def previous_questions(session: Session, conversation: Conversation) -> list[str]:
    """The questions as asked, oldest first: what a follow-up is rewritten against."""
    return [turn.question for turn in turns_of(session, conversation)]


def append_turn(session: Session, conversation: Conversation, *, question: str, standalone: str, answer: str,
                answer_source: str = "model", citations: list[dict[str, Any]] | None = None,
                trace_id: str | None = None) -> ConversationTurn:
    position = len(turns_of(session, conversation)) + 1
    if position > MAX_TURNS:
        raise ConversationError(f"a conversation holds at most {MAX_TURNS} turns; start a new one", "full")
    now = datetime.now(UTC)
    turn = ConversationTurn(conversation_id=conversation.id, position=position, question=question,
                            standalone=standalone, answer=answer, answer_source=answer_source,
                            citations=json.dumps(citations or []), trace_id=trace_id, created_at=now)
    conversation.updated_at = now
    session.add(turn)
    session.flush()
    return turn


def list_conversations(session: Session, tenant: str, user_id: str, retention_days: int = 0) -> list[Conversation]:
    """The caller's conversations, most recently continued first (expired ones are left out)."""
    query = select(Conversation).where(Conversation.tenant == tenant, Conversation.user_id == user_id)
    cutoff = _cutoff(retention_days)
    if cutoff is not None:
        query = query.where(Conversation.updated_at >= cutoff)
    return list(session.scalars(query.order_by(Conversation.updated_at.desc(), Conversation.id)))


def delete_conversation(session: Session, tenant: str, user_id: str, conversation_id: str) -> None:
    conversation = load_conversation(session, tenant, user_id, conversation_id)
    _delete(session, [conversation.id])


def purge_expired(session: Session, retention_days: int) -> int:
    """Delete every conversation untouched for more than `retention_days` (0 keeps all); returns how many."""
    cutoff = _cutoff(retention_days)
    if cutoff is None:
        return 0
    ids = list(session.scalars(select(Conversation.id).where(Conversation.updated_at < cutoff)))
    _delete(session, ids)
    return len(ids)


def _delete(session: Session, ids: list[str]) -> None:
    if not ids:
        return
    # Explicit, so databases without enforced foreign keys lose the turns too.
    session.execute(delete(ConversationTurn).where(ConversationTurn.conversation_id.in_(ids)))
    session.execute(delete(Conversation).where(Conversation.id.in_(ids)))
    session.flush()


def conversation_summary(conversation: Conversation) -> dict[str, Any]:
    return {"id": conversation.id, "title": conversation.title, "created_at": _iso(conversation.created_at),
            "updated_at": _iso(conversation.updated_at)}


def conversation_payload(session: Session, conversation: Conversation,
                         readable: Callable[[list[str]], set[str]] | None = None) -> dict[str, Any]:
    """Every turn of the conversation. With `readable` (cited document ids -> those the caller may read now), a
    turn citing a document the caller can no longer read (access list changed, document deleted) is withheld:
    its answer is emptied, since it may quote that document, and only its readable citations are kept."""
    turns = [
        {"position": t.position, "question": t.question, "standalone_question": t.standalone, "answer": t.answer,
         "answer_source": t.answer_source, "citations": json.loads(t.citations or "[]"), "trace_id": t.trace_id,
         "created_at": _iso(t.created_at), "withheld": False}
        for t in turns_of(session, conversation)
    ]
    if readable is not None:
        allowed = readable([str(c.get("document_id")) for turn in turns for c in turn["citations"]
                            if not _public(c)])
        for turn in turns:
            kept = [c for c in turn["citations"] if _public(c) or str(c.get("document_id")) in allowed]
            if len(kept) < len(turn["citations"]):
                turn.update(answer="", citations=kept, withheld=True)
    return {**conversation_summary(conversation), "turns": turns}


def _public(citation: dict[str, Any]) -> bool:
    """A web page a strategy searched (mspr's `web` source): public, never in the document store."""
    from docqa.components.searxng_web_search import WEB_SOURCE

    return citation.get("source") == WEB_SOURCE and str(citation.get("document_id") or "").startswith("web-")


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _iso(value: datetime) -> str:
    return _aware(value).astimezone(UTC).isoformat()


# ---- `docqa conversations purge` ---------------------------------------------------------------------------


def add_conversation_commands(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("conversations", help="stored conversations")
    sub = p.add_subparsers(dest="conversations_command", required=True)
    purge = sub.add_parser("purge", help="delete conversations older than DOCQA_CONVERSATION_RETENTION_DAYS")
    purge.add_argument("--days", type=int, help="retention in days (default: DOCQA_CONVERSATION_RETENTION_DAYS)")
    purge.set_defaults(handler=purge_command)


def purge_command(args: argparse.Namespace, settings: Any) -> int:
    from docqa.db import session_factory

    days = settings.conversation_retention_days if args.days is None else args.days
    if days <= 0:
        print("no retention period set (DOCQA_CONVERSATION_RETENTION_DAYS=0): nothing purged")
        return 0
    with session_factory(settings)() as session:
        count = purge_expired(session, days)
        session.commit()
    print(f"{count} conversations untouched for more than {days} days deleted")
    return 0
