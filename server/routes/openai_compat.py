"""OpenAI-compatible endpoints: every pipeline (and `auto`) is a model; the conversation's last user message,
rewritten into a standalone question against the earlier ones (`docqa.followups`), is the question.

Any OpenAI client works: `OpenAI(base_url="http://host:8000/v1", api_key=KEY).chat.completions.create(
model="standard", messages=[{"role": "user", "content": "..."}])`. The answer's citations and trace id are in
the extra `docqa` field of the completion (and of the final chunk when streaming).

With the extra body field `conversation_id` (`extra_body={"conversation_id": "new"}` or a stored conversation's
id), the chat is one of the caller's stored conversations, exactly as on `POST /v1/query`: the last user message
is rewritten against the stored questions (the request's earlier messages are not read), the answer is stored as
the next turn, and `docqa.conversation_id` names the conversation; another user's conversation is a 404.

A stream starts at once and stays alive with one SSE comment per finished step and per answer the model starts
writing; the content deltas are the final message's text once the run has checked it, so they concatenate to
exactly what the same request without `stream` returns (a delta cannot be taken back, and a model's draft may be
cut by the checks or replaced by extracted sentences, whose note then comes first).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from docqa.questions import AUTO, Answer, Ask, Asker, QuestionStream
from docqa.result import PipelineResult
from docqa.server.api_errors import QUERY_ERROR_RESPONSES, SSE_CONTENT, ApiError, error_body
from docqa.server.auth import AskingCaller, ContextDep
from docqa.server.schemas import RUN_INPUTS
from docqa.server.streaming import STREAM_HEADERS, SlotStreamingResponse

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
    conversation_id: str | None = Field(default=None, min_length=1, max_length=36, description=(
        "Chat in one of your stored conversations (its stored questions are the history), or 'new' to start one; "
        "the answer is stored as its next turn."))


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
    return ModelList(data=[ModelCard(id=name) for name in [AUTO, *context.questions.strategies()]])


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


def ask_of(body: ChatCompletionRequest) -> Ask:
    """The question of a chat request: its last user message, with the earlier user and assistant messages as the
    history it is rewritten against (the stored conversation's turns instead, when it names one).

    The history is the caller's own request, read with the caller's scope like the question itself.
    """
    question = question_from(body.messages)  # 422 without any user message
    last = max(i for i, message in enumerate(body.messages) if message.role == "user")
    # Sampling parameters are ignored; a strategy's runtime inputs (as_of, patient_id) ride as extra body fields.
    extra = body.model_extra or {}
    return Ask(question, strategy=body.model, inputs={name: extra[name] for name in RUN_INPUTS
                                                      if extra.get(name) is not None},
               conversation_id=body.conversation_id,
               history=[{"role": m.role, "content": _text_of(m.content)} for m in body.messages[:last]
                        if m.role in ("user", "assistant")])


def _docqa_extra(answer: Answer) -> dict[str, Any]:
    result = answer.result
    return {
        "trace_id": result.trace_id,
        "pipeline": result.pipeline,
        "selection": answer.selection,
        "citations": [c.to_dict() for c in result.citations],
        # The question the pipeline answered: a follow-up rewritten against the conversation, else the last turn.
        "question": result.question,
        "answer_source": result.answer_source,
        "answer_note": result.answer_note,
        "conversation_id": answer.conversation_id,
    }


def _content(result: PipelineResult) -> str:
    """The message text; an answer the model did not give starts with the note saying so (clients show only text)."""
    if result.answer_source == "model" or not result.answer_note:
        return result.answer
    return f"{result.answer_note}\n\n{result.answer}".strip()


def _usage(result: PipelineResult) -> dict[str, int]:
    return {name: getattr(result.totals, name) for name in ("prompt_tokens", "completion_tokens", "total_tokens")}


@router.post("/chat/completions", response_model=ChatCompletionResponse, summary="OpenAI chat completions",
             responses={200: {"content": SSE_CONTENT}})
async def chat_completions(
    body: ChatCompletionRequest, caller: AskingCaller, context: ContextDep, request: Request
) -> Any:
    created = int(time.time())
    if not body.stream:
        answer = await context.questions.ask(ask_of(body), Asker.of(caller), disconnected=request.is_disconnected)
        result = answer.result
        return {
            "id": f"chatcmpl-{result.trace_id or uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": created,
            "model": body.model,
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": _content(result)}, "finish_reason": "stop"}
            ],
            "usage": _usage(result),
            "docqa": _docqa_extra(answer),
        }
    stream = await context.questions.stream(ask_of(body), Asker.of(caller))
    return SlotStreamingResponse(_chunks(stream, f"chatcmpl-{uuid.uuid4().hex}", created, body.model),
                                 release=stream.release, media_type="text/event-stream", headers=STREAM_HEADERS)


async def _chunks(stream: QuestionStream, completion_id: str, created: int, model: str) -> AsyncIterator[str]:
    """chat.completion.chunk events: the role at once, an SSE comment per finished step and per answer call the
    model starts (clients ignore comments; proxies see a live connection during long strategies), then the final
    message text (`_content`: the answer, after its note when it is not the model's) in pieces, or an `error`
    event, which OpenAI clients raise as an API error.

    The model's tokens are not sent as they come: deltas cannot be taken back, and the text a client shows must
    be the answer the run returns, which the checks after generation may cut, or replace by extracted sentences
    whose note comes first (the SSE endpoint `/v1/query` streams the echo-free draft as a preview instead).
    """

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
    writing = 0
    async for kind, data in stream.events():
        if kind == "step":
            yield f": step {data.get('index', '')} {data.get('kind', '')}\n\n"
        elif kind == "token":
            if data["call"] != writing:
                writing = data["call"]
                yield f": writing answer {writing}\n\n"
        elif kind == "error":
            yield f"data: {json.dumps(error_body(data.code, data.message))}\n\n"
            return
        elif kind == "result":
            text = _content(data.result)
            for start in range(0, len(text), STREAM_PIECE_CHARS):
                yield chunk({"content": text[start : start + STREAM_PIECE_CHARS]})
            yield chunk({}, "stop", usage=_usage(data.result), docqa=_docqa_extra(data))
    yield "data: [DONE]\n\n"
