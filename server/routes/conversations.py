"""Stored conversations of the caller: `GET /v1/conversations` (list), `GET /v1/conversations/{id}` (reopen:
every turn with its answer, citations and trace id; a turn citing a document the caller can no longer read is
returned withheld, without its answer), `DELETE /v1/conversations/{id}`. Questions are asked in a
conversation through `POST /v1/query` (or the chat endpoint) with `conversation_id`; the question service
rewrites them and stores their turns (`docqa.questions.conversation_turns`).

Another user's conversation, in the same tenant or not, is a 404 exactly like a missing one.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel

from docqa.access import readable_ids
from docqa.conversations_store import (
    ConversationError,
    conversation_payload,
    conversation_summary,
    delete_conversation,
    list_conversations,
    load_conversation,
    purge_expired,
)
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, NotFound
from docqa.server.auth import AskingCaller, ContextDep

router = APIRouter(prefix="/v1/conversations", tags=["conversations"], responses=COMMON_ERROR_RESPONSES)


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
