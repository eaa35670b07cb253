"""A deterministic chat generator for unit tests of control flow (tests only).

Rules are `(regex, response)` pairs tried in order against the prompt (the text of the last user message);
the first whose regex matches (`re.search`, DOTALL) answers:
- a string answers every time;
- a list answers in order, then keeps repeating its last item;
- a callable gets the prompt and returns the text (it may raise, to simulate an endpoint failure).
No match answers `default`. Every call is recorded in `.calls`.

Usage:
    llm = ScriptedChatGenerator(rules=[(r"Is the evidence sufficient", ["No", "Yes"])], default="Paris")
    llm.run(messages=[ChatMessage.from_user("Is the evidence sufficient? ...")])["replies"][0].text  # "No"
    llm.calls[0]["prompt"], llm.calls[0]["generation_kwargs"]
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage, ChatRole

Response = str | list[str] | Callable[[str], str]
MODEL_NAME = "scripted"


@component
class ScriptedChatGenerator:
    """Answers prompts from a fixed script; thread-safe, so concurrent pipeline steps can share one."""

    def __init__(self, rules: list[tuple[str, Response]] | None = None, default: str = "") -> None:
        """
        :param rules: `(regex, response)` pairs; response is a string, a non-empty list of strings or a callable
            taking the prompt and returning a string.
        :param default: the answer when no rule matches.
        :raises ValueError: an invalid regex, an empty list or a response of another type.
        """
        self.rules = [(pattern, _checked_response(pattern, response)) for pattern, response in (rules or [])]
        self.default = default
        self._patterns = [_compile(pattern) for pattern, _ in self.rules]
        self._positions = [0] * len(self.rules)
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        :param messages: the conversation; the last user message is the prompt matched against the rules.
        :param generation_kwargs: recorded in `.calls`, otherwise ignored.
        :returns: `{"replies": [ChatMessage]}` with `meta={"model": "scripted", "usage": {...}}`.
        """
        prompt = _prompt_of(messages)
        with self._lock:
            response = self._next_response(prompt)
        text = response(prompt) if callable(response) else response
        if not isinstance(text, str):
            raise TypeError(f"a scripted callable returned {type(text).__name__}, expected str")
        with self._lock:
            self.calls.append({"prompt": prompt, "generation_kwargs": dict(generation_kwargs or {}),
                               "response": text})
        usage = {
            "prompt_tokens": len(prompt.split()),
            "completion_tokens": len(text.split()),
            "total_tokens": len(prompt.split()) + len(text.split()),
        }
        reply = ChatMessage.from_assistant(text, meta={"model": MODEL_NAME, "usage": usage, "finish_reason": "stop"})
        return {"replies": [reply]}

    @component.output_types(replies=list[ChatMessage])
    async def run_async(
        self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return self.run(messages=messages, generation_kwargs=generation_kwargs)

    def to_dict(self) -> dict[str, Any]:
        """:raises TypeError: a rule answers with a callable, which cannot be serialised."""
        if any(callable(response) for _, response in self.rules):
            raise TypeError("a ScriptedChatGenerator with callable responses cannot be serialised")
        rules = [[pattern, response] for pattern, response in self.rules]
        return default_to_dict(self, rules=rules, default=self.default)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ScriptedChatGenerator:
        params = dict(data.get("init_parameters", {}))
        params["rules"] = [(pattern, response) for pattern, response in params.get("rules") or []]
        return default_from_dict(cls, {**data, "init_parameters": params})

    def _next_response(self, prompt: str) -> str | Callable[[str], str]:
        for index, pattern in enumerate(self._patterns):
            if not pattern.search(prompt):
                continue
            response = self.rules[index][1]
            if isinstance(response, list):
                position = self._positions[index]
                self._positions[index] = min(position + 1, len(response) - 1)
                return response[position]
            return response
        return self.default


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.DOTALL)
    except re.error as exc:
        raise ValueError(f"invalid rule regex {pattern!r}: {exc}") from exc


def _checked_response(pattern: str, response: Any) -> Response:
    if isinstance(response, str) or callable(response):
        return response
    if isinstance(response, list | tuple):
        if not response or not all(isinstance(item, str) for item in response):
            raise ValueError(f"rule {pattern!r}: a response list must be a non-empty list of strings")
        return list(response)
    raise ValueError(f"rule {pattern!r}: response must be a string, a list of strings or a callable")


def _prompt_of(messages: list[ChatMessage]) -> str:
    for message in reversed(messages):
        if message.role == ChatRole.USER:
            return message.text or ""
    return (messages[-1].text or "") if messages else ""
