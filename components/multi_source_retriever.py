"""One retrieval over one of several configured sources: a collection of the document store, or the web (a
SearXNG-compatible endpoint, `web`, or one of Haystack's web search components, `web:serperdev`,
`web:searchapi`)."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict

from docqa.access import collection_filter
from docqa.components.haystack_web_search import WEB_PROVIDER_SOURCES, HaystackWebSearch
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
class MultiSourceRetriever:
    """
    Retrieves from the source named at run time, among the configured ones. A `collection:NAME` source is the
    hybrid retriever with the caller's access `filters` AND'ed with a filter on `meta.collection` (documents
    without one belong to `main`); it refuses to run without access filters (fail closed). The `web` source
    is a SearXNG-compatible endpoint, `web:serperdev` / `web:searchapi` Haystack's web search components
    (`web_searches`); their results are public, their failures give no documents and an `error`, never an
    exception. With a `page_reader` the pages behind the results of every web source are read and chunked like
    uploads, and their best chunks replace the snippets; a page that cannot be read keeps its snippet and its
    reason joins the `error` ("; "). Every output names the `source` searched.

    Usage example:
    ```python
    retriever = MultiSourceRetriever(retriever=runtime.retriever(5), sources=["collection:main", "web"],
                                     web_search=SearxngWebSearch(url="http://searxng:8080/search"),
                                     page_reader=WebPageReader(max_pages=3))
    out = retriever.run(query="Acme founder", source="collection:main", filters=restrict(scope, None))
    out["documents"], out["source"], out["error"]
    ```
    """

    step_kind = "retrieval"

    def __init__(self, retriever: Any, sources: list[str], web_search: Any | None = None, top_k: int = 5,
                 web_searches: dict[str, HaystackWebSearch] | None = None,
                 page_reader: WebPageReader | None = None) -> None:
        """
        :param retriever: Component with `run(query, filters, top_k) -> {"documents"}` (the hybrid retriever).
        :param sources: The configured sources, in order of preference.
        :param web_search: Component with `run(query, top_k) -> {"documents", "error"}`; required for `web`.
        :param top_k: Passages per retrieval.
        :param web_searches: The `HaystackWebSearch` of each `web:PROVIDER` source; required for those.
        :param page_reader: Reads the pages of web results (None keeps the search snippets).
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
        self.retriever = retriever
        self.web_search = web_search
        self.top_k = top_k
        self.page_reader = page_reader

    def warm_up(self) -> None:
        if hasattr(self.retriever, "warm_up"):
            self.retriever.warm_up()

    @component.output_types(documents=list[Document], source=str, error=str | None)
    def run(self, query: str, source: str, filters: dict[str, Any] | None = None) -> dict[str, Any]:
        """
        :param query: The search text.
        :param source: One of the configured sources.
        :param filters: The caller's access filters (required for collections).
        :returns: `documents` best first, the `source` searched and an `error` (None on success).
        """
        if source not in self.sources:
            return {"documents": [], "source": source, "error": f"source {source!r} is not configured"}
        if source == WEB_SOURCE or source in WEB_PROVIDER_SOURCES:
            search = self.web_search if source == WEB_SOURCE else self.web_searches[source]
            out = search.run(query=query, top_k=self.top_k)
            documents, errors = out["documents"], [out.get("error")]
            if self.page_reader is not None and documents:
                read = self.page_reader.run(query=query, documents=documents, top_k=self.top_k)
                documents, errors = read["documents"], [*errors, *read["errors"]]
            return {"documents": documents, "source": source, "error": "; ".join(e for e in errors if e) or None}
        if not filters:
            raise ValueError("a collection source needs the caller's access filters")
        scoped = {"operator": "AND", "conditions": [filters, collection_filter(source[len(COLLECTION_PREFIX):])]}
        documents = self.retriever.run(query=query, filters=scoped, top_k=self.top_k)["documents"]
        return {"documents": documents, "source": source, "error": None}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            retriever=component_to_dict(self.retriever, "retriever"),
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
