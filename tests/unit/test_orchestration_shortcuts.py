"""What docqa does to keep Haystack's per-value work cheap gives the same results as Haystack without it."""

from __future__ import annotations

import sys
import typing

import pytest
from haystack import Document, Pipeline, component
from haystack.components.builders import ChatPromptBuilder
from haystack.components.routers import ConditionalRouter
from haystack.core.component import Component
from haystack.core.pipeline.utils import _deepcopy_with_exceptions
from haystack.dataclasses import ChatMessage

import docqa  # noqa: F401  (installs the protocol check cache)
from docqa.components.template_cache import compiling_once
from docqa.pipelines.haystack_strategy import HaystackStrategy


@component
class _Answer:
    @component.output_types(answer=str)
    def run(self, prompt: list[ChatMessage]) -> dict[str, str]:
        return {"answer": prompt[0].text or ""}


@component
class _Echo:
    @component.output_types(text=str)
    def run(self, text: str) -> dict[str, str]:
        return {"text": text}


class TestProtocolChecks:
    def test_components_are_still_components_and_values_are_not(self):
        assert isinstance(_Echo(), Component)
        assert not isinstance(Document(content="x"), Component)
        assert not isinstance("text", Component)

    @pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 caches protocol members itself")
    def test_the_member_list_is_computed_once_per_protocol(self):
        cached = typing._get_protocol_attrs
        before = cached.cache_info().hits
        for _ in range(5):
            isinstance(Document(content="x"), Component)
        assert cached.cache_info().hits >= before + 5

    def test_values_between_components_are_still_copied(self):
        doc = Document(content="x", meta={"a": [1]})
        copied = _deepcopy_with_exceptions({"documents": [doc]})
        assert copied["documents"][0] == doc and copied["documents"][0] is not doc
        assert copied["documents"][0].meta["a"] is not doc.meta["a"]


class TestCompilingOnce:
    def test_each_run_renders_its_own_variables_from_one_compiled_template(self):
        builder = compiling_once(ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ q }}")], variables=["q"]))
        assert builder.run(q="first")["prompt"][0].text == "Q: first"
        assert builder.run(q="second")["prompt"][0].text == "Q: second"
        info = builder._env.from_string.cache_info()
        assert (info.misses, info.hits) == (1, 1)

    def test_a_template_given_at_run_time_is_rendered_not_the_cached_one(self):
        builder = compiling_once(ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ q }}")], variables=["q"]))
        builder.run(q="a")
        other = builder.run(template=[ChatMessage.from_user("Other {{ q }}")], q="b")
        assert other["prompt"][0].text == "Other b"

    def test_serialization_is_unchanged(self):
        plain = ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ q }}")], variables=["q"])
        once = compiling_once(ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ q }}")], variables=["q"]))
        assert once.to_dict() == plain.to_dict()

    def test_a_routers_conditions_and_outputs_are_compiled_once_and_still_route(self):
        routes = [
            {"condition": "{{ n > 1 }}", "output": "{{ n }}", "output_name": "big", "output_type": int},
            {"condition": "{{ n <= 1 }}", "output": "{{ n }}", "output_name": "small", "output_type": int},
        ]
        router = compiling_once(ConditionalRouter(routes))
        assert router.run(n=5) == {"big": 5}
        assert router.run(n=0) == {"small": 0}
        assert router.run(n=7) == {"big": 7}
        assert router._env.from_string.cache_info().misses == 3  # two conditions and one shared output text

    def test_every_node_of_a_strategy_compiles_once(self, tmp_path):
        pipeline = Pipeline()
        pipeline.add_component("prompt", ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ question }}")]))
        pipeline.add_component("answerer", _Answer())
        pipeline.connect("prompt.prompt", "answerer.prompt")
        HaystackStrategy("t", pipeline, max_question_chars=100, grounding=False, require_passages=False)
        assert hasattr(pipeline.get_component("prompt")._env.from_string, "cache_info")

    def test_the_inner_nodes_of_a_super_component_compile_once_too(self):
        from docqa.components.answer_grader import AnswerGrader
        from tests.support.scripted_chat import ScriptedChatGenerator

        grader = compiling_once(AnswerGrader(ScriptedChatGenerator(default="Yes")))
        router = grader.pipeline.get_component("grade_router")
        builder = grader.pipeline.get_component("grade_grounded").pipeline.get_component("grade_grounded_prompt")
        assert hasattr(router._env.from_string, "cache_info") and hasattr(builder._env.from_string, "cache_info")

    def test_applying_it_twice_wraps_once(self):
        builder = compiling_once(compiling_once(ChatPromptBuilder(template=[ChatMessage.from_user("{{ q }}")])))
        assert not hasattr(builder._env.from_string.__wrapped__, "cache_info")
