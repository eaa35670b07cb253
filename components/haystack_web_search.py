"""Web search through Haystack's own web search components (SerperDev, SearchApi), as an MSPR source.

`web:serperdev` and `web:searchapi` in DOCQA_MSPR_SOURCES wrap `SerperDevWebSearch` (package
`serperdev-haystack`) and `SearchApiWebSearch` (`searchapi-haystack`), whose keys come from Haystack's usual
variables, SERPERDEV_API_KEY and SEARCHAPI_API_KEY (a Haystack `Secret`, never written out by `to_dict`).
Their results (a snippet per link) become the same public web documents as the SearXNG source's.
"""

from __future__ import annotations

import importlib
from typing import Any

import httpx
from haystack import ComponentError, Document, Pipeline, component, default_from_dict, default_to_dict, super_component
from haystack.core.errors import PipelineRuntimeError
from haystack.core.super_component.super_component import _SuperComponent
from haystack.utils import Secret

from docqa.components.searxng_web_search import _document
from docqa.errors import ConfigurationError

WEB_PROVIDER_PREFIX = "web:"
# provider -> (module, class, the API key's environment variable)
PROVIDERS: dict[str, tuple[str, str, str]] = {
    "serperdev": ("haystack_integrations.components.websearch.serperdev", "SerperDevWebSearch",
                  "SERPERDEV_API_KEY"),
    "searchapi": ("haystack_integrations.components.websearch.searchapi", "SearchApiWebSearch",
                  "SEARCHAPI_API_KEY"),
}
WEB_PROVIDER_SOURCES = tuple(WEB_PROVIDER_PREFIX + name for name in PROVIDERS)


def api_key_variable(provider: str) -> str:
    """The environment variable holding a provider's API key (`SERPERDEV_API_KEY`, `SEARCHAPI_API_KEY`)."""
    if provider not in PROVIDERS:
        raise ValueError(f"unknown web search provider {provider!r}: use one of {', '.join(PROVIDERS)}")
    return PROVIDERS[provider][2]


@component
class ProviderResults:
    """
    Turns a Haystack web search component's documents (snippet as content, `title` and `link` in meta) into public
    web documents (`meta.source = "web"`, `meta.public = True`, the page in `meta.url`, `meta.provider`).

    Usage example:
    ```python
    ProviderResults(provider="serperdev", top_k=3).run(documents=serper_out["documents"])["documents"]
    ```
    """

    def __init__(self, provider: str, top_k: int = 5) -> None:
        """
        :param provider: The provider's name, kept in `meta.provider`.
        :param top_k: Results kept by default.
        """
        self.provider = provider
        self.top_k = top_k

    @component.output_types(documents=list[Document], error=str | None)
    def run(self, documents: list[Document], top_k: int | None = None) -> dict[str, Any]:
        """
        :param documents: The provider's results, best first.
        :param top_k: Results kept (the init `top_k` by default).
        :returns: `documents` and `error` (None: the search answered).
        """
        found = []
        for doc in documents:
            web = _document({"url": doc.meta.get("link") or "", "title": doc.meta.get("title") or "",
                             "content": doc.content or ""})
            if web is not None:
                web.meta["provider"] = self.provider
                found.append(web)
        return {"documents": found[: top_k or self.top_k], "error": None}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, provider=self.provider, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ProviderResults:
        return default_from_dict(cls, data)


@super_component
class HaystackWebSearch:
    """
    Runs one of Haystack's web search components and turns its documents (snippet as content, `title` and
    `link` in meta) into public web documents (`meta.source = "web"`, `meta.public = True`, the page in
    `meta.url`, `meta.provider` naming the provider). Like the SearXNG source it never raises for what the
    service does: a timeout, an HTTP error or a rejected key gives no documents and a one-line `error`. A
    missing key is a `ConfigurationError` when the component is built, naming the variable to set.

    A `SuperComponent` (`search -> results`: the provider's component, then `ProviderResults`), so the provider's
    call is its own span; its `run` turns the provider's failure into the `error`.

    Usage example:
    ```python
    search = HaystackWebSearch(provider="serperdev", top_k=3)   # reads SERPERDEV_API_KEY
    out = search.run(query="Acme founder")
    out["documents"], out["error"]
    ```
    """

    step_kind = "retrieval"

    def __init__(self, provider: str, api_key: Secret | None = None, top_k: int = 5,
                 search_params: dict[str, Any] | None = None) -> None:
        """
        :param provider: `serperdev` or `searchapi`.
        :param api_key: The provider's key; `Secret.from_env_var(<provider's variable>)` by default.
        :param top_k: Results kept by default.
        :param search_params: Passed to the Haystack component (e.g. `{"gl": "de"}`, `{"engine": "bing"}`).
        :raises ValueError: unknown provider or top_k below 1.
        :raises ConfigurationError: the key is not set.
        """
        variable = api_key_variable(provider)
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        self.provider = provider
        self.api_key = api_key or Secret.from_env_var(variable)
        self.top_k = top_k
        self.search_params = dict(search_params or {})
        try:
            key = self.api_key.resolve_value()
        except ValueError:  # a strict env-var Secret whose variable is unset
            key = None
        if not key:
            raise ConfigurationError(f"the web:{provider} source needs an API key: set {variable}")
        module, name, _ = PROVIDERS[provider]
        search_class = getattr(importlib.import_module(module), name)
        self.search = search_class(api_key=self.api_key, top_k=top_k, search_params=dict(self.search_params))
        pipeline = Pipeline()
        pipeline.add_component("search", self.search)
        pipeline.add_component("results", ProviderResults(provider, top_k))
        pipeline.connect("search.documents", "results.documents")
        self.pipeline = pipeline
        self.input_mapping = {"query": ["search.query"], "top_k": ["results.top_k"]}
        self.output_mapping = {"results.documents": "documents", "results.error": "error"}

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param query: The search text.
        :param top_k: Results kept (the init `top_k` by default, at most what the provider returned).
        :returns: `documents` (best first) and `error` (None on success).
        """
        try:
            return _SuperComponent.run(self, **kwargs)
        except PipelineRuntimeError as exc:
            cause = exc.__cause__ or exc
            if isinstance(cause, TimeoutError):
                return {"documents": [], "error": f"web search ({self.provider}) timed out"}
            if not isinstance(cause, ComponentError | httpx.HTTPError | ValueError | KeyError | TypeError):
                raise
            # The providers' errors carry the response text; one line of it is enough for a trace.
            message = " ".join(str(cause).split())[:200]
            return {"documents": [],
                    "error": f"web search ({self.provider}) failed: {type(cause).__name__}: {message}"}

    async def run_async(self, **kwargs: Any) -> dict[str, Any]:
        return self.run(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, provider=self.provider, api_key=self.api_key.to_dict(), top_k=self.top_k,
                               search_params=self.search_params)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> HaystackWebSearch:
        return default_from_dict(cls, data)
