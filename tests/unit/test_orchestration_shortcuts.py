"""What docqa does to keep Haystack's per-value work cheap gives the same results as Haystack without it."""

from __future__ import annotations

import sys
import typing

import pytest
from haystack import Document, component
from haystack.components.builders import ChatPromptBuilder
from haystack.core.component import Component
from haystack.core.pipeline.utils import _deepcopy_with_exceptions
from haystack.dataclasses import ChatMessage

import docqa  # noqa: F401  (installs the protocol check cache)
from docqa.components.prompted_llm import compiling_once


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

    def test_applying_it_twice_wraps_once(self):
        builder = compiling_once(compiling_once(ChatPromptBuilder(template=[ChatMessage.from_user("{{ q }}")])))
        assert not hasattr(builder._env.from_string.__wrapped__, "cache_info")
