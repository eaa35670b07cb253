"""A chat generator that stands for an LLM role of the deployment, so a strategy's YAML names no endpoint.

Serialized as `{"type": "docqa.llm.role_generator.RoleChatGenerator", "init_parameters": {"role": "generator"}}`:
no URL, key or model is written out, and a YAML strategy loaded by docqa uses the same model as the built-in
strategies for that role (`bind_roles` gives it the runtime's generator). Loaded elsewhere, it builds the role's
generator from the `DOCQA_` settings on first use.

Each call is a `docqa.llm.call` span (`docqa.spans`: prompt, reply, model, tokens, time), so a model call is
traced wherever it is made: by the LLM helpers of `docqa.llm.calls` (which open the span themselves, with the
call's purpose, budget and constraints) or by this generator run as a node of a graph (then it opens the span,
its purpose being the role).

Usage:
    generator = RoleChatGenerator("generator", delegate=runtime.chat_generator("generator"))
    generator.run(messages=[ChatMessage.from_user("Hi")])["replies"]
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from haystack import component, default_from_dict, default_to_dict
from haystack.dataclasses import ChatMessage, StreamingChunk

from docqa.llm.calls import bounded_kwargs, finish_call
from docqa.settings import LLM_ROLES
from docqa.spans import llm_call_open, llm_call_span
from docqa.token_stream import accepts_streaming_callback


@component
class RoleChatGenerator:
    """
    Delegates to the chat generator of an LLM role (reasoner, summarizer, generator, grader, planner).

    Usage example:
    ```python
    llm = RoleChatGenerator("generator")          # built from the DOCQA_ settings on first use
    llm.bind(runtime.chat_generator("generator"))  # or the runtime's generator
    ```
    """

    def __init__(self, role: str, delegate: Any = None) -> None:
        """
        :param role: one of `docqa.settings.LLM_ROLES`.
        :param delegate: the generator to call; None builds the role's generator from the settings when first used.
        :raises ValueError: unknown role.
        """
        if role not in LLM_ROLES:
            raise ValueError(f"unknown LLM role {role!r}; expected one of {', '.join(LLM_ROLES)}")
        self.role = role
        self._delegate = delegate
        self._lock = threading.Lock()

    def bind(self, delegate: Any) -> None:
        """Use `delegate` (a chat generator) for this role from now on."""
        self._delegate = delegate

    @property
    def delegate(self) -> Any:
        with self._lock:
            if self._delegate is None:
                from docqa.llm.client import build_chat_generator
                from docqa.settings import get_settings

                self._delegate = build_chat_generator(get_settings(), self.role)
            return self._delegate

    @property
    def api_base_url(self) -> Any:
        """The delegate's endpoint (LLM helpers remember per endpoint which structured-output style it takes)."""
        return getattr(self.delegate, "api_base_url", None)

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None,
            streaming_callback: Callable[[StreamingChunk], None] | None = None) -> dict[str, Any]:
        """
        :param messages: the conversation.
        :param generation_kwargs: passed to the role's generator.
        :param streaming_callback: called with each token chunk, when the role's generator can stream.
        :returns: the role generator's `{"replies": [...]}`.
        """
        if llm_call_open():  # the LLM helper that called this generator traces the call
            return self._run_delegate(messages, generation_kwargs, streaming_callback)
        prompt = _prompt_text(messages)
        # A node of its own (a YAML strategy's prompt -> model step) counts against the run's budget and token cap
        # exactly like the LLM helpers' calls: the graph, not a wrapper, carries the guarantee.
        generation_kwargs = bounded_kwargs(dict(generation_kwargs or {}), prompt)
        constrained = "response_format" in generation_kwargs
        with llm_call_span(prompt, purpose=self.role, constrained=constrained) as call:
            result = self._run_delegate(messages, generation_kwargs, streaming_callback)
            finish_call(call, prompt, result)
        return result

    def _run_delegate(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None,
                      streaming_callback: Callable[[StreamingChunk], None] | None) -> dict[str, Any]:
        delegate = self.delegate
        if streaming_callback is not None and accepts_streaming_callback(delegate):
            return delegate.run(messages=messages, generation_kwargs=generation_kwargs,
                                streaming_callback=streaming_callback)
        return delegate.run(messages=messages, generation_kwargs=generation_kwargs)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, role=self.role)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RoleChatGenerator:
        return default_from_dict(cls, data)


def _prompt_text(messages: list[ChatMessage]) -> str:
    """The prompt as one text: a lone message's text, else each message's role and text."""
    if len(messages) == 1:
        return messages[0].text or ""
    return "\n\n".join(f"{message.role.value}: {message.text or ''}" for message in messages)
