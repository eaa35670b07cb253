"""MSPR's `web:serperdev` / `web:searchapi` sources: Haystack's web search components, configured and wired.

There is no internet here and neither component lets its service URL be configured, so no test exercises a
successful search: these check the configuration (keys from Haystack's variables, clear errors), the wiring
into MSPR and the failure path against the real components and HTTP client.
"""

from __future__ import annotations

from typing import Any

import pytest
from haystack.utils import Secret

from docqa.components.haystack_web_search import HaystackWebSearch
from docqa.components.multi_source_retriever import MultiSourceRetriever, parse_sources
from docqa.errors import ConfigurationError
from docqa.pipelines.registry import build_pipeline
from docqa.pipelines.yaml_strategies import export_strategy
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.hash_embedder import HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator

KEYS = {"serperdev": "SERPERDEV_API_KEY", "searchapi": "SEARCHAPI_API_KEY"}


@pytest.fixture(autouse=True)
def no_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in KEYS.values():
        monkeypatch.delenv(variable, raising=False)


class _HashRuntime(Runtime):
    """A scripted LLM and hash query embeddings: building the pipeline loads no model."""

    def text_embedder(self) -> Any:
        return HashTextEmbedder()


def _runtime(settings: Settings) -> Runtime:
    llm = ScriptedChatGenerator()
    return _HashRuntime(settings, chat_generator_factory=lambda role: llm)


@pytest.mark.parametrize("provider", sorted(KEYS))
def test_a_missing_key_is_a_configuration_error_naming_the_variable(provider: str) -> None:
    with pytest.raises(ConfigurationError, match=f"web:{provider} source needs an API key: set {KEYS[provider]}"):
        HaystackWebSearch(provider=provider)


@pytest.mark.parametrize("provider", sorted(KEYS))
def test_mspr_with_a_provider_source_and_no_key_fails_to_build_with_a_clear_error(tmp_path, provider) -> None:
    settings = Settings(data_dir=tmp_path, mspr_sources=f"collection:main,web:{provider}")
    with pytest.raises(ConfigurationError, match=f"lists `web:{provider}` but .* set {KEYS[provider]}"):
        build_pipeline("mspr", _runtime(settings))


@pytest.mark.parametrize("provider", sorted(KEYS))
def test_the_key_is_read_from_haystacks_variable_and_never_serialised(monkeypatch, tmp_path, provider) -> None:
    monkeypatch.setenv(KEYS[provider], "secret-key-value")
    settings = Settings(data_dir=tmp_path, mspr_sources=f"collection:main,web:{provider},collection:archive")
    pipeline = build_pipeline("mspr", _runtime(settings), top_k=2)
    retriever = pipeline.pipeline.get_component("retriever")
    assert isinstance(retriever, MultiSourceRetriever)
    search = retriever.web_searches[f"web:{provider}"]
    assert search.top_k == 2 and search.search.api_key.resolve_value() == "secret-key-value"
    assert type(search.search).__module__.startswith("haystack_integrations.components.websearch")

    # Web access is not for YAML strategies (a file would choose the endpoint and key): no export, and no key
    # in the reason given.
    runtime = Runtime(settings, chat_generator_factory=lambda role: ScriptedChatGenerator())
    with pytest.raises(ConfigurationError, match=r"cannot be exported as a YAML strategy: .*web access") as refused:
        export_strategy("mspr", runtime, top_k=2)
    assert "secret-key-value" not in refused.value.message


def test_only_known_providers_are_sources() -> None:
    assert parse_sources("collection:main, web:serperdev, web:searchapi, web") == (
        "collection:main", "web:serperdev", "web:searchapi", "web")
    with pytest.raises(ValueError, match="unknown source 'web:bing'"):
        parse_sources("collection:main,web:bing")
    with pytest.raises(ValueError, match="unknown web search provider"):
        HaystackWebSearch(provider="bing", api_key=Secret.from_token("k"))


def test_a_retriever_needs_a_component_for_each_provider_source() -> None:
    with pytest.raises(ValueError, match="no web search component for web:searchapi"):
        MultiSourceRetriever(retriever=None, sources=["collection:main", "web:searchapi"])


@pytest.mark.parametrize("provider", sorted(KEYS))
def test_a_service_that_cannot_be_reached_or_refuses_the_key_gives_no_documents_and_an_error(provider) -> None:
    # No internet here (the name does not resolve); with internet, the made-up key is refused: an error either way.
    search = HaystackWebSearch(provider=provider, api_key=Secret.from_token("made-up-key"), top_k=3)
    retriever = MultiSourceRetriever(retriever=None, sources=["collection:main", f"web:{provider}"],
                                     web_searches={f"web:{provider}": search})
    out = retriever.run(query="Who founded Acme?", source=f"web:{provider}")
    assert out["documents"] == [] and out["source"] == f"web:{provider}"
    assert out["error"].startswith(f"web search ({provider}) failed: ")
