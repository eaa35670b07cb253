"""Stored conversations of the caller: `GET /v1/conversations` (list), `GET /v1/conversations/{id}` (reopen:
every turn with its answer, citations and trace id; a turn citing a document the caller can no longer read is
returned withheld, without its answer), `DELETE /v1/conversations/{id}`. Questions are asked in a
conversation through `POST /v1/query` with `conversation_id`.

Another user's conversation, in the same tenant or not, is a 404 exactly like a missing one.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel

from docqa.access import readable_ids
from docqa.accounts.identity import Caller
from docqa.conversation import Rewrite, standalone_question
from docqa.conversations_store import (
    ConversationError,
    append_turn,
    conversation_payload,
    conversation_summary,
    delete_conversation,
    list_conversations,
    load_conversation,
    previous_questions,
    purge_expired,
    start_conversation,
)
from docqa.result import PipelineResult
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, NotFound
from docqa.server.auth import AskingCaller, ContextDep
from docqa.server.context import ServerContext

logger = logging.getLogger(__name__)

router = APIRouter(prefix="/v1/conversations", tags=["conversations"], responses=COMMON_ERROR_RESPONSES)

NEW = "new"


class ConversationSummaryOut(BaseModel):
    id: str
    title: str
    created_at: str
    updated_at: str


class ConversationListOut(BaseModel):
    conversations: list[ConversationSummaryOut]


class ConversationOut(ConversationSummaryOut):
    turns: list[dict[str, Any]]


@router.get("", response_model=ConversationListOut, summary="Your conversations, most recently continued first")
def get_conversations(caller: AskingCaller, context: ContextDep) -> ConversationListOut:
    days = context.settings.conversation_retention_days
    with context.sessions() as session:
        # Lazy retention: listing is frequent enough that expired conversations do not linger.
        if purge_expired(session, days):
            session.commit()
        found = list_conversations(session, caller.tenant, caller.user_id, days)
        return ConversationListOut(conversations=[ConversationSummaryOut(**conversation_summary(c)) for c in found])


@router.get("/{conversation_id}", response_model=ConversationOut, summary="Reopen one of your conversations")
def get_conversation(conversation_id: str, caller: AskingCaller, context: ContextDep) -> ConversationOut:
    with context.sessions() as session:
        try:
            conversation = load_conversation(session, caller.tenant, caller.user_id, conversation_id,
                                             context.settings.conversation_retention_days)
        except ConversationError:
            raise NotFound("conversation") from None
        # Citations are checked against the caller's access now, not when the answer was given.
        scope, store = caller.scope(), context.runtime.document_store

        def readable(ids: list[str]) -> set[str]:
            return readable_ids(store, scope, ids)

        return ConversationOut(**conversation_payload(session, conversation, readable))


@router.delete("/{conversation_id}", status_code=204, response_class=Response,
               summary="Delete one of your conversations with all its turns")
def remove_conversation(conversation_id: str, caller: AskingCaller, context: ContextDep) -> Response:
    with context.sessions() as session:
        try:
            delete_conversation(session, caller.tenant, caller.user_id, conversation_id)
        except ConversationError:
            raise NotFound("conversation") from None
        session.commit()
    return Response(status_code=204)


# ---- used by POST /v1/query ---------------------------------------------------------------------------------


def rewrite_in_conversation(context: ServerContext, caller: Caller, conversation_id: str,
                            question: str) -> Rewrite | None:
    """The question rewritten against the caller's stored conversation; None when it has no earlier turn.

    :raises NotFound: the conversation is not the caller's (or no longer exists), so it cannot be continued.
    """
    if conversation_id == NEW:
        return None
    with context.sessions() as session:
        try:
            conversation = load_conversation(session, caller.tenant, caller.user_id, conversation_id,
                                             context.settings.conversation_retention_days)
        except ConversationError:
            raise NotFound("conversation") from None
        history = previous_questions(session, conversation)
    return standalone_question([*history, question]) if history else None


def record_turn(context: ServerContext, caller: Caller, conversation_id: str, question: str,
                result: PipelineResult) -> str | None:
    """Append the answered turn (starting the conversation for "new"); returns the conversation id, or None
    when the turn could not be stored (the conversation was deleted meanwhile, or is full): the answer stands."""
    with context.sessions() as session:
        try:
            if conversation_id == NEW:
                conversation = start_conversation(session, tenant=caller.tenant, user_id=caller.user_id,
                                                  title=question)
            else:
                conversation = load_conversation(session, caller.tenant, caller.user_id, conversation_id)
            append_turn(session, conversation, question=question, standalone=result.question,
                        answer=result.answer, answer_source=result.answer_source,
                        citations=[c.to_dict() for c in result.citations], trace_id=result.trace_id)
        except ConversationError as exc:
            logger.warning("turn not stored in conversation %s: %s", conversation_id, exc.message)
            return None
        session.commit()
        return conversation.id
