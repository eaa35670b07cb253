"""The `website` lister: an intranet site read from its `sitemap.xml`, or by following its links under a base URL.

Bounded in pages (`max_pages`), link depth (`max_depth`), page size (`max_page_bytes`) and crawl time
(`max_seconds`); a crawl that stops at a bound is incomplete, so nothing it did not reach is deleted. Only the
configured host (scheme, name and port) is read: links elsewhere are out of scope and a redirect to another host
is refused, so a page cannot make the server read other hosts of its network (the web fetch's SSRF guard keeps
applying to everything else). A page answering 404 or 410 is gone; a page that fails otherwise (5xx, timeout,
too large) is kept as it was. In sitemap mode a page stored with an ETag or a Last-Modified date is asked for with
`If-None-Match` or `If-Modified-Since`, so an unchanged page costs a 304.
"""

from __future__ import annotations

import hashlib
import re
import time
from collections import deque
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit, urlunsplit
from xml.etree import ElementTree

import httpx

from docqa.components.bounded_body import BodyTooLarge, read_bounded
from docqa.conversion.converters import is_supported
from docqa.sources.listing import Known, ListedItem, Listing, SourceUnreachableError

MAX_REDIRECTS = 5
MAX_SITEMAP_BYTES = 10_000_000
_USER_AGENT = "docqa-sources/1"
_SUFFIX_BY_TYPE = {
    "text/html": ".html", "application/xhtml+xml": ".html", "text/plain": ".txt", "text/markdown": ".md",
    "application/pdf": ".pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": ".docx",
}
_GONE = (404, 410)


class _Refused(Exception):
    pass


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.links.append(href)


class _Site:
    def __init__(self, config: dict[str, Any]) -> None:
        self.base = config["url"]
        parts = urlsplit(self.base)
        self.origin = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        self.max_pages, self.max_depth = config["max_pages"], config["max_depth"]
        self.max_bytes = config["max_page_bytes"]
        self.deadline = time.monotonic() + config["max_seconds"]
        self.client = httpx.Client(follow_redirects=False, headers={"User-Agent": _USER_AGENT})
        # Defined through the API: the host must still resolve to public addresses at each request.
        self.public_only = bool(config.get("public_only"))

    def in_scope(self, url: str, prefix: str) -> bool:
        parts = urlsplit(url)
        try:
            origin = (parts.scheme, parts.hostname, parts.port or (443 if parts.scheme == "https" else 80))
        except ValueError:
            return False
        return origin == self.origin and url.startswith(prefix)

    def get(self, url: str, headers: dict[str, str] | None = None,
            max_bytes: int | None = None) -> tuple[int, bytes, httpx.Headers, str]:
        """(status, body, headers, final URL) of one GET, following redirects on the configured host only."""
        for _ in range(MAX_REDIRECTS + 1):
            remaining = self.deadline - time.monotonic()
            if remaining <= 0:
                raise httpx.ReadTimeout("the crawl's time is up")
            if not self.in_scope(url, ""):
                raise _Refused(f"{url} is not on the configured host")
            if self.public_only:
                _check_public(urlsplit(url).hostname or "")
            with self.client.stream("GET", url, headers=headers or {}, timeout=min(remaining, 30.0)) as response:
                if response.has_redirect_location:
                    url = urljoin(url, response.headers.get("location", ""))
                    continue
                if response.status_code != 200:
                    return response.status_code, b"", response.headers, url
                body = read_bounded(response, max_bytes or self.max_bytes, self.deadline, "page")
                return 200, body, response.headers, url
        raise _Refused(f"more than {MAX_REDIRECTS} redirects")


def _check_public(host: str) -> None:
    from docqa.sources.definitions import InvalidSourceError, check_public_host

    try:
        check_public_host(host)
    except InvalidSourceError as exc:
        raise _Refused(exc.message) from exc


def list_website(config: dict[str, Any], known: Known) -> Listing:
    site = _Site(config)
    try:
        return _crawl(site, known)
    finally:
        site.client.close()


def _crawl(site: _Site, known: Known) -> Listing:
    base = site.base
    explicit_sitemap = urlsplit(base).path.endswith(".xml")
    prefix = base.rsplit("/", 1)[0] + "/" if explicit_sitemap else base
    if not explicit_sitemap and not prefix.endswith("/"):
        prefix = prefix.rsplit("/", 1)[0] + "/"
    sitemap_url = base if explicit_sitemap else urljoin(prefix, "sitemap.xml")
    try:
        status, body, _, _ = site.get(sitemap_url, max_bytes=MAX_SITEMAP_BYTES)
    except (httpx.HTTPError, BodyTooLarge, _Refused, OSError) as exc:
        raise SourceUnreachableError(f"cannot read {sitemap_url}: {_reason(exc)}") from exc
    urls = _sitemap_urls(body) if status == 200 else None
    if explicit_sitemap and urls is None:
        raise SourceUnreachableError(f"{sitemap_url}: HTTP {status}, or not a sitemap")
    listing = Listing()
    if urls is not None:
        in_scope = [u for u in dict.fromkeys(urls) if site.in_scope(u, prefix)]
        if len(in_scope) < len(urls):
            listing.notes.append(f"{len(urls) - len(in_scope)} sitemap URLs outside {prefix} not read")
        if len(in_scope) > site.max_pages:
            listing.complete = False
            listing.notes.append(f"sitemap lists {len(in_scope)} pages; read the first {site.max_pages}")
        for url in in_scope[: site.max_pages]:
            _read_page(site, url, prefix, known, listing, conditional=True)
        return listing
    queue: deque[tuple[str, int]] = deque([(base, 0)])
    seen = {base}
    read = 0
    while queue:
        if read >= site.max_pages or time.monotonic() >= site.deadline:
            listing.complete = False
            listing.notes.append(f"crawl stopped at its bounds after {read} pages")
            break
        url, depth = queue.popleft()
        read += 1
        links = _read_page(site, url, prefix, known, listing, conditional=False)
        if read == 1 and not listing.items and not links and listing.notes:
            raise SourceUnreachableError(listing.notes[-1])
        if depth >= site.max_depth:
            continue
        for link in links:
            target = urljoin(url, link).split("#", 1)[0]
            if target not in seen and site.in_scope(target, prefix):
                seen.add(target)
                queue.append((target, depth + 1))
    return listing


def _read_page(site: _Site, url: str, prefix: str, known: Known, listing: Listing, *, conditional: bool) -> list[str]:
    """Add the page at `url` to the listing; returns the links of an HTML page (for the crawl)."""
    key = _key(url)
    fingerprint, quick = known.get(key, (None, None))
    headers = _conditional(quick) if conditional and fingerprint is not None else None
    try:
        status, body, response_headers, _ = site.get(url, headers=headers)
    except (httpx.HTTPError, BodyTooLarge, _Refused, OSError) as exc:
        listing.keep.add(key)
        listing.notes.append(f"{url}: {_reason(exc)}")
        return []
    if status == 304 and fingerprint is not None:
        listing.items.append(ListedItem(key=key, name=_name(key, None), acl_path=key, fingerprint=fingerprint,
                                        quick=quick))
        return []
    if status in _GONE:
        return []
    if status != 200:
        listing.keep.add(key)
        listing.notes.append(f"{url}: HTTP {status}")
        return []
    content_type = response_headers.get("content-type", "").split(";")[0].strip().lower()
    name = _name(key, content_type)
    if name is None:
        listing.notes.append(f"{url}: content type {content_type or '(none)'} not read")
        return []
    etag, modified = response_headers.get("etag"), response_headers.get("last-modified")
    listing.items.append(ListedItem(
        key=key, name=name, acl_path=key, data=body,
        quick=f"etag:{etag}" if etag else f"lm:{modified}" if modified else None,
        fingerprint="sha256:" + hashlib.sha256(body).hexdigest(),
    ))
    if _SUFFIX_BY_TYPE.get(content_type) != ".html":
        return []
    parser = _Links()
    try:
        parser.feed(body.decode("utf-8", "replace"))
    except Exception:  # a broken page still counts; its links are simply not followed
        return []
    return [link for link in parser.links if not link.startswith(("mailto:", "javascript:"))]


def _conditional(quick: str | None) -> dict[str, str] | None:
    """The validator the page was stored with, sent back so an unchanged page answers 304."""
    if quick and quick.startswith("etag:"):
        return {"If-None-Match": quick.removeprefix("etag:")}
    if quick and quick.startswith("lm:"):
        return {"If-Modified-Since": quick.removeprefix("lm:")}
    return None


def _key(url: str) -> str:
    """The page's path (and query) on the site, without the leading slash: what keys and ACL globs use."""
    parts = urlsplit(url)
    return urlunsplit(("", "", parts.path, parts.query, "")).lstrip("/") or "index"


def _name(key: str, content_type: str | None) -> str | None:
    """A name whose suffix makes the converter read the page as its type (what citations show)."""
    path = key.split("?", 1)[0].rstrip("/") or "index"
    wanted = _SUFFIX_BY_TYPE.get(content_type or "")
    accepted = (wanted, ".htm") if wanted == ".html" else (wanted,)
    if is_supported(path) and (wanted is None or path.lower().endswith(accepted)):
        return path
    if content_type is None:  # 304: the stored name is what matters; the suffix only has to be a type
        return path if is_supported(path) else f"{path}.html"
    if wanted is None:
        return None
    return re.sub(r"[?&=]", "_", key.rstrip("/") or "index") + wanted


def _sitemap_urls(body: bytes) -> list[str] | None:
    try:
        # expat refuses external entities and (2.4.1+) entity-expansion bombs.
        root = ElementTree.fromstring(body)
    except ElementTree.ParseError:
        return None
    if not root.tag.endswith("urlset"):
        return None
    return [loc.text.strip() for loc in root.iter() if loc.tag.endswith("loc") and loc.text]


def _reason(exc: BaseException) -> str:
    if isinstance(exc, httpx.TimeoutException):
        return "timed out"
    if isinstance(exc, httpx.ConnectError):
        return "connection refused or host unreachable"
    return str(exc) or type(exc).__name__
