"""A `RoleChatGenerator` run as a graph node of its own (as a YAML strategy may wire it) is bounded like every other
model call: the run's LLM call budget and its completion token cap apply inside the node, not in a wrapper."""

from __future__ import annotations

from typing import Any

import pytest
from haystack import Pipeline, component
from haystack.components.builders import ChatPromptBuilder
from haystack.dataclasses import ChatMessage

from docqa.llm.role_generator import RoleChatGenerator
from docqa.run_control import LLMBudgetExceededError, RunControl


@component
class RecordingGenerator:
    """Answers every call and keeps the generation kwargs it was given."""

    def __init__(self) -> None:
        self.kwargs: list[dict[str, Any]] = []

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        self.kwargs.append(dict(generation_kwargs or {}))
        return {"replies": [ChatMessage.from_assistant("an answer", meta={"model": "scripted"})]}


def _graph(delegate: RecordingGenerator) -> Pipeline:
    graph = Pipeline()
    graph.add_component("prompt", ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ question }}")],
                                                    required_variables=["question"]))
    graph.add_component("llm", RoleChatGenerator("generator", delegate=delegate))
    graph.connect("prompt.prompt", "llm.messages")
    return graph


def test_a_bare_role_generator_node_counts_against_the_run_budget() -> None:
    delegate = RecordingGenerator()
    graph = _graph(delegate)
    with RunControl(max_llm_calls=1, max_completion_tokens=16, max_prompt_chars=1000).active():
        first = graph.run({"prompt": {"question": "one"}})
        assert first["llm"]["replies"][0].text == "an answer"
        with pytest.raises(Exception) as raised:
            graph.run({"prompt": {"question": "two"}})
    budget_errors = [e for e in _chain(raised.value) if isinstance(e, LLMBudgetExceededError)]
    assert budget_errors, f"expected the LLM budget to stop the second call, got {raised.value!r}"
    assert len(delegate.kwargs) == 1  # the refused call never reached the model


def test_a_bare_role_generator_node_gets_the_token_cap() -> None:
    delegate = RecordingGenerator()
    with RunControl(max_llm_calls=5, max_completion_tokens=16, max_prompt_chars=1000).active():
        # A YAML strategy asking for more than the server allows gets the server's cap.
        _graph(delegate).run({"prompt": {"question": "one"}, "llm": {"generation_kwargs": {"max_tokens": 500}}})
    assert delegate.kwargs[0]["max_tokens"] == 16


def test_a_prompt_over_the_run_limit_is_refused_before_the_model() -> None:
    delegate = RecordingGenerator()
    with RunControl(max_llm_calls=5, max_completion_tokens=16, max_prompt_chars=10).active(), \
            pytest.raises(Exception) as raised:
        _graph(delegate).run({"prompt": {"question": "a question longer than ten characters"}})
    assert any(isinstance(e, LLMBudgetExceededError) for e in _chain(raised.value))
    assert delegate.kwargs == []


def _chain(error: BaseException | None) -> list[BaseException]:
    seen = []
    while error is not None and error not in seen:
        seen.append(error)
        error = error.__cause__ or error.__context__
    return seen
