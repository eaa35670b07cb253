"""`POST /v1/traces/{trace_id}/feedback`: the asker rates their own answer (thumbs up or down, optional comment).

Any other trace, including another user's answer, is a 404, exactly like a trace that does not exist.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from docqa.feedback import MAX_COMMENT_CHARS, FeedbackError, record_feedback
from docqa.server.api_errors import COMMON_ERROR_RESPONSES, ApiError, NotFound
from docqa.server.auth import AskingCaller, ContextDep

router = APIRouter(prefix="/v1/traces", tags=["feedback"], responses=COMMON_ERROR_RESPONSES)


class FeedbackIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rating: Literal["up", "down"] = Field(description="Thumbs up (the answer helped) or down.")
    comment: str | None = Field(default=None, max_length=MAX_COMMENT_CHARS, description="Optional, free text.")


class FeedbackOut(BaseModel):
    trace_id: str
    user_id: str
    rating: str
    comment: str | None
    updated_at: str


@router.post("/{trace_id}/feedback", response_model=FeedbackOut,
             summary="Rate your own answer: thumbs up or down with an optional comment (rating again replaces it)")
def post_feedback(trace_id: str, body: FeedbackIn, caller: AskingCaller, context: ContextDep) -> FeedbackOut:
    with context.sessions() as session:
        try:
            stored = record_feedback(session, tenant=caller.tenant, user_id=caller.user_id, trace_id=trace_id,
                                     rating=body.rating, comment=body.comment)
        except FeedbackError as exc:
            if exc.reason == "not_found":
                raise NotFound("answer") from None
            raise ApiError(409, "conflict", exc.message) from None
        session.commit()
    return FeedbackOut(**stored)
