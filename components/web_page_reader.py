"""The pages behind web search results, read like uploads: fetched, converted and chunked by ingestion's code,
then the chunks ranked against the query."""

from __future__ import annotations

import hashlib
import ipaddress
import math
import socket
import time
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, replace
from email.message import Message
from pathlib import PurePosixPath
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit

import httpx
from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.bounded_body import BodyTooLarge, read_bounded
from docqa.components.searxng_web_search import WEB_SOURCE
from docqa.conversion.chunking import clean_text, split_words
from docqa.conversion.conversion_box import ConversionLimits, start_box
from docqa.conversion.converters import convert_bytes, is_supported
from docqa.errors import DocqaError
from docqa.stores.tokenizer import tokenize

# Redirect hops followed per page; each hop's address is checked like the first one's.
MAX_REDIRECTS = 3
_MAX_ERROR_CHARS = 200
# The converter picks its parser by file suffix: the suffix each content type stands for.
_CONTENT_TYPES = {
    "text/html": ".html",
    "application/xhtml+xml": ".html",
    "text/plain": ".txt",
    "text/markdown": ".md",
    "text/x-markdown": ".md",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
}
_USER_AGENT = "docqa-web-page-reader"
# BM25 as the store scores it (docqa.stores.search_index).
_K1, _B = 1.5, 0.75


@component
class WebPageReader:
    """
    Reads the pages of the first `max_pages` web results instead of keeping only their snippets: each page is
    fetched (http(s) only, one deadline and a byte cap per page, redirects checked hop by hop), converted by
    the upload converter (`convert_bytes`: HTML, PDF, text, Markdown, DOCX, chosen by content type, else by
    the URL's suffix) and split into the same word windows as uploads (`clean_text` + `split_words`). The
    chunks, with the snippets of the results not read, are ranked by BM25 over the store's tokenizer and the
    best `top_k` returned as public web documents (`meta.fetched` and `meta.chunk_index` on page chunks).

    A page that cannot be read (timeout, HTTP error, too large, unsupported type, unparseable or empty) keeps
    its snippet and adds one line to `errors`. The conversion runs in the converter's box within what is left
    of the page's deadline, `max_uncompressed_bytes` (what a DOCX's members may declare) and
    `max_convert_memory_mb`, and is killed at its limit: a page given up on is not converted on.
    Unless `allow_private_addresses`, a URL whose host resolves to a loopback, private, link-local or otherwise
    reserved address is refused, and the connection goes to the address that was checked (a second DNS answer
    cannot redirect it to the intranet).

    Haystack's `LinkContentFetcher` is not used: it reads whole bodies, bounds each read rather than the whole
    request, and follows redirects without letting their addresses be checked.

    Usage example:
    ```python
    reader = WebPageReader(max_pages=3, timeout_s=5, max_bytes=2_000_000, top_k=5)
    found = SearxngWebSearch(url="http://searxng:8080/search").run(query="Acme founder")["documents"]
    out = reader.run(query="Acme founder", documents=found)
    out["documents"], out["errors"]
    ```
    """

    step_kind = "retrieval"

    def __init__(
        self,
        max_pages: int = 3,
        timeout_s: float = 5.0,
        max_bytes: int = 2_000_000,
        top_k: int = 5,
        chunk_words: int = 200,
        overlap_words: int = 30,
        allow_private_addresses: bool = False,
        max_uncompressed_bytes: int = ConversionLimits.max_uncompressed_bytes,
        max_convert_memory_mb: int = ConversionLimits.max_memory_mb,
    ) -> None:
        """
        :param max_pages: Results whose page is read (the first ones); the others keep their snippet.
        :param timeout_s: Upper bound on reading one page (resolution, redirects, connect and body).
        :param max_bytes: A larger page is not read.
        :param top_k: Documents returned by default.
        :param chunk_words: Words per chunk, as for uploads (DOCQA_CHUNK_WORDS).
        :param overlap_words: Words shared by consecutive chunks (DOCQA_CHUNK_OVERLAP_WORDS).
        :param allow_private_addresses: Also read pages on loopback, private and link-local addresses.
        :param max_uncompressed_bytes: What a ZIP-based page (DOCX) may declare in total (DOCQA_CONVERT_*).
        :param max_convert_memory_mb: Memory a page's conversion may use (DOCQA_CONVERT_MAX_MEMORY_MB).
        """
        if max_pages < 1 or timeout_s <= 0 or max_bytes < 1 or top_k < 1:
            raise ValueError("max_pages, timeout_s, max_bytes and top_k must be positive")
        if chunk_words < 1 or not 0 <= overlap_words < chunk_words:
            raise ValueError("chunk_words must be positive and overlap_words within [0, chunk_words)")
        self.max_pages = max_pages
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.top_k = top_k
        self.chunk_words = chunk_words
        self.overlap_words = overlap_words
        self.allow_private_addresses = allow_private_addresses
        self.max_uncompressed_bytes = max_uncompressed_bytes
        self.max_convert_memory_mb = max_convert_memory_mb
        # Checked here, not at the first page read.
        self._limits(self.timeout_s)

    @component.output_types(documents=list[Document], candidates=list[Document], errors=list[str], error=str | None)
    def run(self, query: str, documents: list[Document], top_k: int | None = None,
            search_error: str | None = None) -> dict[str, Any]:
        """
        :param query: The search text the chunks are ranked for.
        :param documents: Web results, best first (`meta.url`, `meta.title`; their content is the snippet).
        :param top_k: Documents returned (the init `top_k` by default).
        :param search_error: Why the search itself failed, if it did (it leads `error`).
        :returns: `documents` best first, `candidates` (the results, then `documents`), `errors` (one line per page
            that could not be read) and `error`: the search's error and the pages' joined by "; " (None when there is
            none).
        """
        urls = list(dict.fromkeys(doc.meta["url"] for doc in documents if doc.meta.get("url")))[: self.max_pages]
        if urls:
            # Once per process, and not within any page's deadline (a no-op once the box's server runs).
            start_box()
        pages = self._read_all(urls)
        candidates: list[Document] = []
        errors: list[str] = []
        for doc in documents:
            page = pages.pop(doc.meta.get("url"), None)  # a page listed twice is read once, later ones keep snippets
            if page is None:
                candidates.append(doc)
            elif isinstance(page, str):
                errors.append(page)
                candidates.append(doc)
            else:
                candidates.extend(self._chunks(doc, page))
        error = "; ".join(e for e in (search_error, *errors) if e) or None
        shown = rank(query, candidates)[: top_k or self.top_k]
        return {"documents": shown, "candidates": [*documents, *shown], "errors": errors, "error": error}

    def warm_up(self) -> None:
        """Start the conversion box's server (a second or two, once per process) before the first question."""
        start_box()

    def _read_all(self, urls: list[str]) -> dict[str, _Page | str]:
        """Each URL's page, or the line saying why it was not read; pages are read at the same time."""
        results: dict[str, _Page | str] = {}
        if not urls:
            return results
        pool = ThreadPoolExecutor(max_workers=len(urls), thread_name_prefix="web-page")
        try:
            futures = {url: pool.submit(self._read, url) for url in urls}
            # Name resolution has no timeout of its own: the wait bounds it, a stuck thread is left behind.
            deadline = time.monotonic() + self.timeout_s + 1.0
            for url, future in futures.items():
                try:
                    results[url] = future.result(timeout=max(deadline - time.monotonic(), 0.0))
                except FutureTimeout:
                    results[url] = _error(url, f"not read within {self.timeout_s:g}s")
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return results

    def _read(self, url: str) -> _Page | str:
        deadline = time.monotonic() + self.timeout_s
        try:
            body, content_type, final_url = self._fetch(url, deadline)
            name = _file_name(final_url, content_type)
            if name is None:
                return _error(url, f"unsupported content type {content_type.split(';')[0].strip() or '(none)'}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise httpx.ReadTimeout("deadline passed")
            # `_read_all` waits one second past the deadline: the box is killed before it stops waiting.
            converted = convert_bytes(body, name, self.max_bytes, self._limits(remaining + 0.5))
        except httpx.TimeoutException:
            return _error(url, f"timed out after {self.timeout_s:g}s")
        except httpx.HTTPStatusError as exc:
            return _error(url, f"HTTP {exc.response.status_code}")
        except DocqaError as exc:
            # The converter names the file it was given; the URL already says which page it was.
            return _error(url, exc.message.split(": ", 1)[-1])
        except (httpx.HTTPError, httpx.InvalidURL, OSError, ValueError, BodyTooLarge, _Refused) as exc:
            # Whatever a server or a result's URL does, one page fails, never the retrieval.
            return _error(url, str(exc) or type(exc).__name__)
        text = clean_text(converted.text)
        if not text:
            return _error(url, "no text left after cleaning")
        return _Page(url=final_url, title=converted.title, text=text)

    def _limits(self, timeout_s: float) -> ConversionLimits:
        return ConversionLimits(max_uncompressed_bytes=self.max_uncompressed_bytes,
                                max_member_bytes=min(ConversionLimits.max_member_bytes, self.max_uncompressed_bytes),
                                max_memory_mb=self.max_convert_memory_mb, timeout_s=timeout_s)

    def _fetch(self, url: str, deadline: float) -> tuple[bytes, str, str]:
        """(body, content type, URL after redirects) of one page, by `deadline` and within `max_bytes`."""
        for _ in range(MAX_REDIRECTS + 1):
            target, headers, extensions = self._pinned(url)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise httpx.ReadTimeout("deadline passed")
            with (
                httpx.Client(timeout=remaining, follow_redirects=False) as client,
                client.stream("GET", target, headers=headers, extensions=extensions) as response,
            ):
                if response.is_redirect:
                    url = urljoin(url, response.headers.get("location", ""))
                    continue
                response.raise_for_status()
                body = read_bounded(response, self.max_bytes, deadline, "page")
                return body, response.headers.get("content-type", ""), url
        raise _Refused(f"more than {MAX_REDIRECTS} redirects")

    def _pinned(self, url: str) -> tuple[str, dict[str, str], dict[str, Any]]:
        """The request for `url` sent to an address checked here: (URL with that address, headers, extensions).

        Connecting to the checked address rather than the name closes the gap between the check and a second
        resolution by the HTTP client; the Host header and the TLS server name keep the original host. Through
        an HTTP(S)_PROXY the proxy resolves the name itself (it would not verify TLS for a bare address), so the
        URL is sent as it is, after the same check.
        """
        try:
            parts = urlsplit(url)
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as exc:
            raise _Refused("malformed URL") from exc
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise _Refused("not an http(s) URL")
        try:
            infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
        except (socket.gaierror, UnicodeError) as exc:
            raise _Refused(f"cannot resolve {parts.hostname}") from exc
        addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
        if not self.allow_private_addresses:
            blocked = [a for a in addresses if not is_public_address(a)]
            if blocked:
                raise _Refused(f"{parts.hostname} resolves to a non-public address ({blocked[0]})")
        headers = {"User-Agent": _USER_AGENT, "Accept": "*/*"}
        proxies = urllib.request.getproxies()
        if (proxies.get(parts.scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(parts.hostname):
            return url, headers, {}
        address = addresses[0]
        host = f"[{address}]" if address.version == 6 else str(address)
        netloc = host if parts.port is None else f"{host}:{parts.port}"
        target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
        headers["Host"] = parts.netloc.rsplit("@", 1)[-1]
        extensions = {"sni_hostname": parts.hostname} if parts.scheme == "https" else {}
        return target, headers, extensions

    def _chunks(self, result: Document, page: _Page) -> list[Document]:
        meta = {key: result.meta[key] for key in ("provider",) if key in result.meta}
        title = result.meta.get("title") or page.title
        return [
            Document(
                id=chunk_document_id(page.url, index),
                content=window,
                meta={
                    **meta,
                    "source": WEB_SOURCE,
                    "public": True,
                    "url": page.url,
                    "title": title,
                    "fetched": True,
                    "chunk_index": index,
                },
            )
            for index, window in enumerate(split_words(page.text, self.chunk_words, self.overlap_words))
        ]

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            max_pages=self.max_pages,
            timeout_s=self.timeout_s,
            max_bytes=self.max_bytes,
            top_k=self.top_k,
            chunk_words=self.chunk_words,
            overlap_words=self.overlap_words,
            allow_private_addresses=self.allow_private_addresses,
            max_uncompressed_bytes=self.max_uncompressed_bytes,
            max_convert_memory_mb=self.max_convert_memory_mb,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WebPageReader:
        return default_from_dict(cls, data)


@dataclass(frozen=True)
class _Page:
    url: str
    title: str
    text: str  # cleaned like an upload's text


class _Refused(Exception):
    pass


def is_public_address(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """False for loopback, private, link-local, multicast, unspecified and reserved addresses (IPv4-mapped
    IPv6 addresses are judged by their IPv4 address)."""
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    return address.is_global and not address.is_multicast


def chunk_document_id(url: str, index: int) -> str:
    """Stable per page and chunk, so the same chunk read twice is recognised as already seen."""
    return "web-" + hashlib.sha256(f"{url}\n{index}".encode()).hexdigest()[:32]


def rank(query: str, documents: list[Document]) -> list[Document]:
    """Copies of `documents` scored by BM25 against `query` (idf over these documents), best first, ties kept in
    their given order."""
    terms = set(tokenize(query))
    tokens = [tokenize(doc.content) for doc in documents]
    if not terms or not documents:
        return list(documents)
    avgdl = max(sum(len(t) for t in tokens) / len(tokens), 1e-9)
    df = Counter(term for doc_tokens in tokens for term in set(doc_tokens) if term in terms)
    idf = {term: math.log1p((len(documents) - n + 0.5) / (n + 0.5)) for term, n in df.items()}
    scores = []
    for doc_tokens in tokens:
        tf = Counter(t for t in doc_tokens if t in idf)
        norm = _K1 * (1.0 - _B + _B * len(doc_tokens) / avgdl)
        scores.append(sum(idf[t] * n * (_K1 + 1.0) / (n + norm) for t, n in tf.items()))
    order = sorted(range(len(documents)), key=lambda i: -scores[i])
    return [replace(documents[i], score=round(scores[i], 6)) for i in order]


def _file_name(url: str, content_type: str) -> str | None:
    """A file name whose suffix makes `convert_bytes` pick the parser for this page; None if none fits."""
    message = Message()
    message["content-type"] = content_type
    mime = message.get_content_type() if content_type else ""
    path = PurePosixPath(urlsplit(url).path)
    stem = path.stem or "page"
    if mime in _CONTENT_TYPES:
        return stem + _CONTENT_TYPES[mime]
    # Servers often send files without a precise type: then the URL's suffix decides, as a file name would.
    if (not content_type or mime == "application/octet-stream") and is_supported(path.name):
        return path.name
    return None


def _error(url: str, reason: str) -> str:
    return " ".join(f"web page {url[:_MAX_ERROR_CHARS]}: {reason}".split())[: 2 * _MAX_ERROR_CHARS]
