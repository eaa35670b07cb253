"""Web search through a SearXNG-compatible JSON endpoint (self-hostable; what enterprises run behind a proxy)."""

from __future__ import annotations

import hashlib
import json
import time
from typing import Any

import httpx
from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.bounded_body import BodyTooLarge, read_bounded

WEB_SOURCE = "web"
_MAX_RESULT_CHARS = 2000


@component
class SearxngWebSearch:
    """
    GETs `{url}?q=QUERY&format=json` and turns `{"results": [{"url", "title", "content"}]}` into documents
    marked public (`meta.source = "web"`, `meta.public = True`, the page in `meta.url`). Never raises for
    what the endpoint does: a timeout, an HTTP error, a body over `max_bytes` or anything that is not that
    JSON shape gives no documents and a one-line `error`. The whole request (connect, wait and read) is
    bounded by `timeout_s`.

    Usage example:
    ```python
    search = SearxngWebSearch(url="http://searxng.internal:8080/search", timeout_s=5)
    out = search.run(query="Acme founder", top_k=3)
    out["documents"], out["error"]
    ```
    """

    step_kind = "retrieval"

    def __init__(self, url: str, timeout_s: float = 5.0, max_bytes: int = 1_000_000, top_k: int = 5) -> None:
        """
        :param url: The search endpoint (the SearXNG `/search` URL).
        :param timeout_s: Upper bound on one search, in seconds.
        :param max_bytes: A larger response body is refused.
        :param top_k: Results kept by default.
        """
        if not url.startswith(("http://", "https://")):
            raise ValueError("the web search URL must be http:// or https://")
        if timeout_s <= 0 or max_bytes < 1 or top_k < 1:
            raise ValueError("timeout_s, max_bytes and top_k must be positive")
        self.url = url
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.top_k = top_k

    @component.output_types(documents=list[Document], error=str | None)
    def run(self, query: str, top_k: int | None = None) -> dict[str, Any]:
        """
        :param query: The search text.
        :param top_k: Results kept (the init `top_k` by default).
        :returns: `documents` (best first) and `error` (None on success).
        """
        try:
            body = self._fetch(query)
        except httpx.TimeoutException:
            return {"documents": [], "error": f"web search timed out after {self.timeout_s:g}s"}
        except (httpx.HTTPError, OSError, BodyTooLarge) as exc:
            return {"documents": [], "error": f"web search failed: {type(exc).__name__}: {str(exc)[:200]}"}
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return {"documents": [], "error": "web search returned something that is not JSON"}
        results = data.get("results") if isinstance(data, dict) else None
        if not isinstance(results, list):
            return {"documents": [], "error": "web search JSON has no `results` list"}
        documents = [doc for doc in (_document(r) for r in results) if doc is not None]
        return {"documents": documents[: top_k or self.top_k], "error": None}

    def _fetch(self, query: str) -> bytes:
        deadline = time.monotonic() + self.timeout_s
        with (
            httpx.Client(timeout=self.timeout_s, follow_redirects=False) as client,
            client.stream("GET", self.url, params={"q": query, "format": "json"}) as response,
        ):
            response.raise_for_status()
            return read_bounded(response, self.max_bytes, deadline, "response")

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, url=self.url, timeout_s=self.timeout_s, max_bytes=self.max_bytes, top_k=self.top_k)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SearxngWebSearch:
        return default_from_dict(cls, data)


def _document(result: Any) -> Document | None:
    """A result as a public document, or None when it has no usable text."""
    if not isinstance(result, dict):
        return None
    url = result.get("url") if isinstance(result.get("url"), str) else ""
    title = result.get("title") if isinstance(result.get("title"), str) else ""
    content = result.get("content") if isinstance(result.get("content"), str) else ""
    text = " ".join(". ".join(part for part in (title.strip(), content.strip()) if part).split())
    text = text[:_MAX_RESULT_CHARS]
    if not text:
        return None
    doc_id = "web-" + hashlib.sha256(f"{url}\n{text}".encode()).hexdigest()[:32]
    return Document(
        id=doc_id, content=text, meta={"source": WEB_SOURCE, "public": True, "url": url[:2000], "title": title[:500]}
    )
