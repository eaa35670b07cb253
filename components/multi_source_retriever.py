"""One retrieval over one of several configured sources: a collection of the document store, or the web (a
SearXNG-compatible endpoint, `web`, or one of Haystack's web search components, `web:serperdev`,
`web:searchapi`)."""

from __future__ import annotations

import json
import re
from typing import Any

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict, super_component
from haystack.components.joiners import BranchJoiner
from haystack.components.routers import ConditionalRouter
from haystack.core.serialization import component_to_dict

from docqa.access import collection_filter
from docqa.components.haystack_web_search import WEB_PROVIDER_SOURCES, HaystackWebSearch
from docqa.components.hybrid_retriever import output_sockets
from docqa.components.searxng_web_search import WEB_SOURCE
from docqa.components.web_page_reader import WebPageReader

COLLECTION_PREFIX = "collection:"


def parse_sources(spec: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """`"collection:main, web"` -> `("collection:main", "web")`; refuses unknown kinds, empties and repeats.
    Web sources: `web` (SearXNG) and `web:serperdev`, `web:searchapi` (Haystack's components)."""
    items = spec.split(",") if isinstance(spec, str) else list(spec)
    sources = tuple(item.strip() for item in items if isinstance(item, str) and item.strip())
    if not sources:
        raise ValueError("at least one source is required (e.g. collection:main)")
    for source in sources:
        if source not in (WEB_SOURCE, *WEB_PROVIDER_SOURCES) and not (
                source.startswith(COLLECTION_PREFIX) and source[len(COLLECTION_PREFIX):]):
            raise ValueError(f"unknown source {source!r}: use collection:NAME, web or "
                             f"{', '.join(WEB_PROVIDER_SOURCES)}")
    if len(set(sources)) != len(sources):
        raise ValueError(f"a source is listed twice in {', '.join(sources)}")
    return sources


@component
class SourceRequest:
    """
    The entry of `MultiSourceRetriever`'s graph: the query, the source named at run time and the passages wanted.

    Usage example:
    ```python
    SourceRequest(top_k=5).run(query="Acme founder", source="web")   # {"query": ..., "source": "web", "top_k": 5}
    ```
    """

    def __init__(self, top_k: int = 5) -> None:
        """
        :param top_k: Passages per retrieval.
        """
        self.top_k = top_k

    @component.output_types(query=str, source=str, top_k=int)
    def run(self, query: str, source: str) -> dict[str, Any]:
        """
        :param query: The search text.
        :param source: The source to search.
        :returns: Both, and `top_k`.
        """
        return {"query": query, "source": source, "top_k": self.top_k}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SourceRequest:
        return default_from_dict(cls, data)


@component
class CollectionScope:
    """
    Narrows docqa's access `filters` to one collection (`collection:NAME`; documents without one belong to
    `main`): the collection retriever's filters. Refuses to run without access filters (fail closed).

    Usage example:
    ```python
    CollectionScope().run(source="collection:main", filters=restrict(scope, None))["filters"]
    ```
    """

    @component.output_types(filters=dict[str, Any])
    def run(self, source: str, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        :param source: A `collection:NAME` source.
        :param filters: The caller's access filters (required).
        :returns: `filters`: the access filters AND the collection.
        :raises ValueError: Without access filters, or for a source that is not a collection.
        """
        if not filters:
            raise ValueError("a collection source needs the caller's access filters")
        if not source.startswith(COLLECTION_PREFIX):
            raise ValueError(f"{source!r} is not a collection source")
        return {"filters": {"operator": "AND",
                            "conditions": [filters, collection_filter(source[len(COLLECTION_PREFIX):])]}}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CollectionScope:
        return default_from_dict(cls, data)


@component
class UnconfiguredSource:
    """
    The answer for a source that is not configured: no documents and an `error` saying so.

    Usage example:
    ```python
    UnconfiguredSource().run(source="collection:secret")["error"]   # "source 'collection:secret' is not configured"
    ```
    """

    @component.output_types(documents=list[Document], candidates=list[Document], error=str | None)
    def run(self, source: str) -> dict[str, Any]:
        """
        :param source: The source asked for.
        :returns: `documents` and `candidates` (none) and the `error`.
        """
        return {"documents": [], "candidates": [], "error": f"source {source!r} is not configured"}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> UnconfiguredSource:
        return default_from_dict(cls, data)


def _node(source: str) -> str:
    """A graph node name for a web source: `web`, `web_serperdev`, ..."""
    return re.sub(r"[^a-z0-9]+", "_", source.lower()).strip("_")


def source_routes(sources: list[str]) -> list[dict[str, Any]]:
    """The source router's routes: the configured collections, each web source, and anything else (unconfigured)."""
    collections = [s for s in sources if s.startswith(COLLECTION_PREFIX)]
    routes: list[dict[str, Any]] = []
    if collections:
        routes.append({"condition": "{{ source in " + json.dumps(collections) + " }}",
                       "output": ["query", "source", "top_k"],
                       "output_name": ["collection_query", "collection_source", "collection_top_k"],
                       "output_type": [str, str, int], "output_passthrough": True})
    for source in sources:
        if source == WEB_SOURCE or source in WEB_PROVIDER_SOURCES:
            node = _node(source)
            routes.append({"condition": "{{ source == " + json.dumps(source) + " }}", "output": ["query", "top_k"],
                           "output_name": [f"{node}_query", f"{node}_top_k"], "output_type": [str, int],
                           "output_passthrough": True})
    routes.append({"condition": "{{ true }}", "output": "source", "output_name": "unconfigured",
                   "output_type": str, "output_passthrough": True})
    return routes


@component
class WebResults:
    """
    The end of a web source's branch without a page reader: the search's documents and its error, as they are.
    With a page reader, the reader joins the search's error with its own.

    Usage example:
    ```python
    WebResults().run(documents=found, error=None)   # {"documents": found, "error": None}
    ```
    """

    @component.output_types(documents=list[Document], candidates=list[Document], error=str | None)
    def run(self, documents: list[Document], error: str | None = None) -> dict[str, Any]:
        """
        :param documents: The search's documents.
        :param error: Its error, if it failed.
        :returns: Both, the documents also as `candidates` (all the branch found).
        """
        return {"documents": documents, "candidates": documents, "error": error}


@super_component
class MultiSourceRetriever:
    """
    Retrieves from the source named at run time, among the configured ones. A `collection:NAME` source is the
    hybrid retriever with the caller's access `filters` AND'ed with a filter on `meta.collection` (documents
    without one belong to `main`); it refuses to run without access filters (fail closed). The `web` source
    is a SearXNG-compatible endpoint, `web:serperdev` / `web:searchapi` Haystack's web search components
    (`web_searches`); their results are public, their failures give no documents and an `error`, never an
    exception. With a `page_reader` the pages behind the results of every web source are read and chunked like
    uploads, and their best chunks replace the snippets; a page that cannot be read keeps its snippet and its
    reason joins the `error` ("; "). Every output names the `source` searched; a source that is not configured
    gives no documents and an `error`.

    A `SuperComponent`: `request -> source_router` (a `ConditionalRouter` on the source) `-> collection_scope ->
    collection_retriever`, or `-> <web source> -> <web source>_reader` (one search and one page reader per web
    source), or `-> unconfigured`; `documents_joiner`, `error_joiner` and `candidates_joiner` (everything the branch
    found, for an answer quoted from all that was retrieved) gather the branch that ran. Each part is its own span.

    Usage example:
    ```python
    retriever = MultiSourceRetriever(retriever=runtime.retriever(5), sources=["collection:main", "web"],
                                     web_search=SearxngWebSearch(url="http://searxng:8080/search"),
                                     page_reader=WebPageReader(max_pages=3))
    out = retriever.run(query="Acme founder", source="collection:main", filters=restrict(scope, None))
    out["documents"], out["source"], out.get("error")
    ```
    """

    step_kind = "retrieval"

    def __init__(self, retriever: Any, sources: list[str], web_search: Any | None = None, top_k: int = 5,
                 web_searches: dict[str, HaystackWebSearch] | None = None,
                 page_reader: WebPageReader | None = None) -> None:
        """
        :param retriever: Component with `run(query, filters, top_k) -> {"documents"}` (the hybrid retriever)
            for the collections.
        :param sources: The configured sources, in order of preference.
        :param web_search: Component with `run(query, top_k) -> {"documents", "error"}`; required for `web`.
        :param top_k: Passages per retrieval.
        :param web_searches: The `HaystackWebSearch` of each `web:PROVIDER` source; required for those.
        :param page_reader: Reads the pages of web results (None keeps the search snippets); each web source
            gets its own copy (a component belongs to one graph).
        """
        self.sources = list(parse_sources(sources))
        if WEB_SOURCE in self.sources and web_search is None:
            raise ValueError("the web source needs a web search endpoint (DOCQA_WEB_SEARCH_URL)")
        self.web_searches = dict(web_searches or {})
        missing = [s for s in self.sources if s in WEB_PROVIDER_SOURCES and s not in self.web_searches]
        if missing:
            raise ValueError(f"no web search component for {', '.join(missing)}")
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        # Without a collection (or a retriever for it) the store is never read: no retriever, no access filters; a
        # collection source then gets the unconfigured source's error.
        collections = retriever is not None and any(s.startswith(COLLECTION_PREFIX) for s in self.sources)
        self.retriever = retriever if collections else None
        self.web_search = web_search
        self.top_k = top_k
        self.page_reader = page_reader
        pipeline = Pipeline()
        pipeline.add_component("request", SourceRequest(top_k=top_k))
        routed = self.sources if collections else [s for s in self.sources if not s.startswith(COLLECTION_PREFIX)]
        pipeline.add_component("source_router", ConditionalRouter(source_routes(routed)))
        pipeline.add_component("unconfigured", UnconfiguredSource())
        pipeline.add_component("documents_joiner", BranchJoiner(list[Document]))
        pipeline.add_component("error_joiner", BranchJoiner(str | None))
        pipeline.add_component("candidates_joiner", BranchJoiner(list[Document]))
        for name in ("query", "source", "top_k"):
            pipeline.connect(f"request.{name}", f"source_router.{name}")
        pipeline.connect("source_router.unconfigured", "unconfigured.source")
        pipeline.connect("unconfigured.documents", "documents_joiner.value")
        pipeline.connect("unconfigured.error", "error_joiner.value")
        pipeline.connect("unconfigured.candidates", "candidates_joiner.value")
        if collections:
            pipeline.add_component("collection_scope", CollectionScope())
            pipeline.add_component("collection_retriever", retriever)
            pipeline.connect("source_router.collection_source", "collection_scope.source")
            pipeline.connect("collection_scope.filters", "collection_retriever.filters")
            pipeline.connect("source_router.collection_query", "collection_retriever.query")
            pipeline.connect("source_router.collection_top_k", "collection_retriever.top_k")
            pipeline.connect("collection_retriever.documents", "documents_joiner.value")
            found = "candidates" if "candidates" in output_sockets(retriever) else "documents"
            pipeline.connect(f"collection_retriever.{found}", "candidates_joiner.value")
        readers = 0
        for source in self.sources:
            if source != WEB_SOURCE and source not in WEB_PROVIDER_SOURCES:
                continue
            node = _node(source)
            pipeline.add_component(node, web_search if source == WEB_SOURCE else self.web_searches[source])
            pipeline.connect(f"source_router.{node}_query", f"{node}.query")
            pipeline.connect(f"source_router.{node}_top_k", f"{node}.top_k")
            if page_reader is None:
                end = WebResults()
                pipeline.add_component(f"{node}_results", end)
                pipeline.connect(f"{node}.documents", f"{node}_results.documents")
                pipeline.connect(f"{node}.error", f"{node}_results.error")
                last = f"{node}_results"
            else:
                reader = page_reader if readers == 0 else WebPageReader.from_dict(page_reader.to_dict())
                readers += 1
                last = f"{node}_reader"
                pipeline.add_component(last, reader)
                pipeline.connect(f"source_router.{node}_query", f"{last}.query")
                pipeline.connect(f"source_router.{node}_top_k", f"{last}.top_k")
                pipeline.connect(f"{node}.documents", f"{last}.documents")
                pipeline.connect(f"{node}.error", f"{last}.search_error")
            pipeline.connect(f"{last}.documents", "documents_joiner.value")
            pipeline.connect(f"{last}.error", "error_joiner.value")
            pipeline.connect(f"{last}.candidates", "candidates_joiner.value")
        self.pipeline = pipeline
        self.input_mapping = {"query": ["request.query"], "source": ["request.source"],
                              **({"filters": ["collection_scope.filters"]} if collections else {})}
        self.output_mapping = {"documents_joiner.value": "documents", "request.source": "source",
                               "error_joiner.value": "error", "candidates_joiner.value": "candidates"}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            retriever=component_to_dict(self.retriever, "retriever") if self.retriever is not None else None,
            sources=self.sources,
            web_search=component_to_dict(self.web_search, "web_search") if self.web_search is not None else None,
            top_k=self.top_k,
            web_searches={source: search.to_dict() for source, search in self.web_searches.items()},
            page_reader=component_to_dict(self.page_reader, "page_reader") if self.page_reader is not None else None,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MultiSourceRetriever:
        # Nested `{"type": ...}` components are rebuilt by `default_from_dict` (within the allowlist); the
        # web_searches mapping is not, and holds nothing but HaystackWebSearch (its own from_dict checks the type).
        init = dict(data.get("init_parameters", {}))
        searches = init.pop("web_searches", None) or {}
        init["web_searches"] = {source: HaystackWebSearch.from_dict(value) for source, value in searches.items()}
        # A plain dict of components is left as it is by default_from_dict.
        return default_from_dict(cls, {**data, "init_parameters": init})
