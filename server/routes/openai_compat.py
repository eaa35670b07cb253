"""OpenAI-compatible endpoints: every pipeline (and `auto`) is a model; the last user message is the question.

Any OpenAI client works: `OpenAI(base_url="http://host:8000/v1", api_key=KEY).chat.completions.create(
model="standard", messages=[{"role": "user", "content": "..."}])`. The answer's citations and trace id are in
the extra `docqa` field of the completion (and of the final chunk when streaming).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from docqa.result import PipelineResult
from docqa.server.answering import AUTO, Prepared, answer, prepare
from docqa.server.api_errors import QUERY_ERROR_RESPONSES, SSE_CONTENT, ApiError
from docqa.server.auth import AskingCaller, ContextDep

router = APIRouter(prefix="/v1", tags=["openai"], responses=QUERY_ERROR_RESPONSES)

STREAM_PIECE_CHARS = 48


class ChatMessageIn(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: str = Field(min_length=1, max_length=32)
    content: str | list[dict[str, Any]] | None = None


class ChatCompletionRequest(BaseModel):
    # Sampling parameters of the OpenAI API are accepted and ignored: each pipeline owns its LLM settings.
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=64)
    messages: list[ChatMessageIn] = Field(min_length=1, max_length=256)
    stream: bool = False


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "docqa"


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ChatCompletionResponse(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, int]
    docqa: dict[str, Any]


@router.get("/models", response_model=ModelList, summary="Pipelines as OpenAI models")
def list_models(caller: AskingCaller, context: ContextDep) -> ModelList:
    return ModelList(data=[ModelCard(id=name) for name in [AUTO, *context.pipelines.names()]])


def _text_of(content: str | list[dict[str, Any]] | None) -> str:
    if isinstance(content, str):
        return content
    parts = [p.get("text") for p in content or [] if isinstance(p, dict) and p.get("type") == "text"]
    return "\n".join(p for p in parts if isinstance(p, str))


def question_from(messages: list[ChatMessageIn]) -> str:
    for message in reversed(messages):
        if message.role == "user":
            return _text_of(message.content)
    raise ApiError(422, "invalid_request", "messages contain no user message")


def _docqa_extra(result: PipelineResult, prepared: Prepared) -> dict[str, Any]:
    return {
        "trace_id": result.trace_id,
        "pipeline": result.pipeline,
        "selection": prepared.selection,
        "citations": [c.to_dict() for c in result.citations],
    }


def _usage(result: PipelineResult) -> dict[str, int]:
    totals = result.totals
    return {
        "prompt_tokens": totals.prompt_tokens,
        "completion_tokens": totals.completion_tokens,
        "total_tokens": totals.total_tokens,
    }


@router.post("/chat/completions", response_model=ChatCompletionResponse, summary="OpenAI chat completions",
             responses={200: {"content": SSE_CONTENT}})
async def chat_completions(body: ChatCompletionRequest, caller: AskingCaller, context: ContextDep) -> Any:
    prepared = prepare(context, question_from(body.messages), body.model, {})
    result = await answer(context, caller, prepared)
    completion_id = f"chatcmpl-{result.trace_id or uuid.uuid4().hex}"
    created = int(time.time())
    if not body.stream:
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": body.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": result.answer}, "finish_reason": "stop"}
            ],
            "usage": _usage(result),
            "docqa": _docqa_extra(result, prepared),
        }
    return StreamingResponse(
        _chunks(completion_id, created, body.model, result, prepared),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache"},
    )


async def _chunks(
    completion_id: str, created: int, model: str, result: PipelineResult, prepared: Prepared
) -> AsyncIterator[str]:
    """The finished answer as chat.completion.chunk events (pipelines answer whole, after their last step)."""

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> str:
        body = {
            "id": completion_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            **extra,
        }
        return f"data: {json.dumps(body)}\n\n"

    yield chunk({"role": "assistant", "content": ""})
    text = result.answer
    for start in range(0, len(text), STREAM_PIECE_CHARS):
        yield chunk({"content": text[start : start + STREAM_PIECE_CHARS]})
    yield chunk({}, "stop", usage=_usage(result), docqa=_docqa_extra(result, prepared))
    yield "data: [DONE]\n\n"
