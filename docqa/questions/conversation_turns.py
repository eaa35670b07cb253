"""Questions asked in one of the asker's stored conversations: the follow-up rewritten against its stored
questions and answers before the run (`docqa.followups`), the answered turn stored after it.

A conversation belongs to (tenant, user): another user's conversation, in the same tenant or not, is
`ConversationNotFoundError` exactly like a missing one, raised before any work.

Usage:
    rewrite = rewrite_in_conversation(sessions, settings, asker, conversation_id, "and when was it founded?")
    conversation_id = store_turn(sessions, asker, conversation_id, asked, result)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy.orm import sessionmaker

from docqa.conversations_store import (
    ConversationError,
    append_turn,
    load_conversation,
    start_conversation,
    turns_of,
)
from docqa.followups import Rewrite, rewrite_with_settings
from docqa.questions.errors import ConversationNotFoundError
from docqa.questions.question import Asker
from docqa.result import PipelineResult
from docqa.settings import Settings

logger = logging.getLogger(__name__)

NEW = "new"


def rewrite_in_conversation(sessions: sessionmaker, settings: Settings, asker: Asker, conversation_id: str,
                            question: str, chat_generator_of: Callable[[str], Any] | None = None) -> Rewrite | None:
    """The question rewritten against the asker's stored conversation; None when it has no earlier turn.

    :raises ConversationNotFoundError: the conversation is not the asker's (or no longer exists).
    """
    if conversation_id == NEW:
        return None
    with sessions() as session:
        try:
            conversation = load_conversation(session, asker.tenant, asker.asked_by, conversation_id,
                                             settings.conversation_retention_days)
        except ConversationError:
            raise ConversationNotFoundError() from None
        history = [message for turn in turns_of(session, conversation)
                   for message in ({"role": "user", "content": turn.question},
                                   {"role": "assistant", "content": turn.answer})]
    return rewrite_against(history, question, settings, chat_generator_of)


def rewrite_against(history: Sequence[str | Mapping[str, str]], question: str, settings: Settings | None = None,
                    chat_generator_of: Callable[[str], Any] | None = None) -> Rewrite | None:
    """The question rewritten against earlier turns (user questions as text, or `{"role", "content"}` messages
    with the answers); None without any earlier user turn."""
    messages = [turn if isinstance(turn, Mapping) else {"role": "user", "content": turn} for turn in history]
    messages = [m for m in messages if (m.get("content") or "").strip()]
    if not any(m.get("role") == "user" for m in messages) or not question.strip():
        return None
    return rewrite_with_settings([*messages, {"role": "user", "content": question}], settings, chat_generator_of)


def store_turn(sessions: sessionmaker, asker: Asker, conversation_id: str, asked: str,
               result: PipelineResult) -> str | None:
    """Append the answered turn (starting the conversation for `new`); returns the conversation id, or None
    when the turn could not be stored (the conversation was deleted meanwhile, or is full): the answer stands."""
    with sessions() as session:
        try:
            if conversation_id == NEW:
                conversation = start_conversation(session, tenant=asker.tenant, user_id=asker.asked_by,
                                                  title=asked)
            else:
                conversation = load_conversation(session, asker.tenant, asker.asked_by, conversation_id)
            append_turn(session, conversation, question=asked, standalone=result.question,
                        answer=result.answer, answer_source=result.answer_source,
                        citations=[c.to_dict() for c in result.citations], trace_id=result.trace_id)
        except ConversationError as exc:
            logger.warning("turn not stored in conversation %s: %s", conversation_id, exc.message)
            return None
        session.commit()
        return conversation.id
