"""Calling a chat generator: plain text, Yes/No and JSON, each constrained where the server allows it.

LLM output is untrusted input: every helper returns a value or `None`/a default, never raises on malformed
output. Transport failures become `LLMUnavailableError` with a one-line message. Each call is attributed to
the current step (prompt, raw response, token usage) for the audit trail.

Usage:
    from haystack.components.generators.chat import OpenAIChatGenerator
    verdict = generate_yes_no(chat_generator, "Can the question be answered? ...")  # True / False / None
"""

from __future__ import annotations

import json
import re
from typing import Any, Protocol

from haystack.dataclasses import ChatMessage

from docqa.errors import LLMUnavailableError
from docqa.recording import record_llm_call
from docqa.result import LLMUsage

YES_NO_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"answer": {"type": "string", "enum": ["Yes", "No"]}},
    "required": ["answer"],
    "additionalProperties": False,
}


class ChatGenerator(Protocol):
    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        ...


def _usage_from(reply: ChatMessage | None, prompt: str, text: str) -> LLMUsage:
    usage = (reply.meta.get("usage") if reply is not None else None) or {}
    prompt_tokens = usage.get("prompt_tokens")
    completion_tokens = usage.get("completion_tokens")
    # Servers that report no usage still get an estimate so totals stay comparable.
    if prompt_tokens is None:
        prompt_tokens = max(1, len(prompt) // 4)
    if completion_tokens is None:
        completion_tokens = max(1, len(text) // 4) if text else 0
    return LLMUsage(calls=1, prompt_tokens=int(prompt_tokens), completion_tokens=int(completion_tokens))


def _is_transport_error(exc: Exception) -> bool:
    try:
        import openai
    except ImportError:  # pragma: no cover - openai is a haystack dependency
        return False
    return isinstance(exc, openai.APIConnectionError | openai.APITimeoutError)


def _is_rejected_request(exc: Exception) -> bool:
    try:
        import openai
    except ImportError:  # pragma: no cover
        return False
    return isinstance(exc, openai.BadRequestError | openai.UnprocessableEntityError)


def _call(
    generator: ChatGenerator, prompt: str, generation_kwargs: dict[str, Any], purpose: str
) -> tuple[str, ChatMessage | None]:
    try:
        result = generator.run(messages=[ChatMessage.from_user(prompt)], generation_kwargs=generation_kwargs)
    except Exception as exc:
        if _is_transport_error(exc):
            raise LLMUnavailableError(f"LLM endpoint unreachable: {type(exc).__name__}: {exc}") from exc
        raise
    replies = result.get("replies") or []
    reply = replies[0] if replies else None
    text = (reply.text if reply is not None else None) or ""
    model = reply.meta.get("model") if reply is not None else None
    record_llm_call(
        prompt=prompt,
        response=text,
        usage=_usage_from(reply, prompt, text),
        model=model,
        extra={"purpose": purpose, "constrained": "response_format" in generation_kwargs},
    )
    return text, reply


def generate_text(generator: ChatGenerator, prompt: str, *, max_tokens: int | None = None,
                  purpose: str = "text") -> str:
    """Free-form generation; returns the stripped text ('' when the model says nothing)."""
    kwargs: dict[str, Any] = {}
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    text, _ = _call(generator, prompt, kwargs, purpose)
    return text.strip()


def _structured(generator: ChatGenerator, prompt: str, schema: dict[str, Any], name: str,
                max_tokens: int, purpose: str) -> str:
    kwargs = {
        "max_tokens": max_tokens,
        "response_format": {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}},
    }
    try:
        text, _ = _call(generator, prompt, kwargs, purpose)
    except LLMUnavailableError:
        raise
    except Exception as exc:
        if not _is_rejected_request(exc):
            raise
        # Some OpenAI-compatible servers reject response_format: ask again and parse defensively.
        text, _ = _call(generator, prompt, {"max_tokens": max_tokens}, purpose)
    return text


def parse_yes_no(text: str) -> bool | None:
    """Read a Yes/No verdict from JSON (`{"answer": "Yes"}`) or free text; None when neither is clear."""
    data = parse_json_object(text)
    if data is not None and isinstance(data.get("answer"), str):
        text = data["answer"]
    words = re.findall(r"[a-z]+", text.lower())
    for word in words[:5]:
        if word in ("yes", "true"):
            return True
        if word in ("no", "false"):
            return False
    return None


def generate_yes_no(generator: ChatGenerator, prompt: str, *, purpose: str = "yes_no") -> bool | None:
    """Constrained Yes/No; None when the output cannot be read as either."""
    return parse_yes_no(_structured(generator, prompt, YES_NO_SCHEMA, "yes_no", 16, purpose))


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in `text` (also inside code fences), or None."""
    text = text.strip()
    if not text:
        return None
    candidates = [text]
    start = text.find("{")
    end = text.rfind("}")
    if start != -1 and end > start:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            data = json.loads(candidate)
        except (json.JSONDecodeError, ValueError):
            continue
        if isinstance(data, dict):
            return data
    return None


def generate_json(generator: ChatGenerator, prompt: str, schema: dict[str, Any], *, name: str = "output",
                  max_tokens: int = 128, purpose: str = "json") -> dict[str, Any] | None:
    """Schema-constrained JSON object; None when the output is not a JSON object with the required keys."""
    data = parse_json_object(_structured(generator, prompt, schema, name, max_tokens, purpose))
    if data is None:
        return None
    required = schema.get("required", [])
    if any(key not in data for key in required):
        return None
    return data
