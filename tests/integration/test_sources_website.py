"""Website sources end to end against a static site served by `http.server` on loopback: from its sitemap.xml
(unchanged pages answered 304) and by following links, a change, a deleted page, the crawl bounds (nothing
deleted after an incomplete crawl), other hosts never read, and an unreachable site."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from docqa.settings import Settings
from docqa.sources.definitions import define_source
from docqa.sources.sync import sync_source
from tests.support.sources_fakes import SharedRuntime, sources_settings, stored_by_document


class _QuietHandler(SimpleHTTPRequestHandler):
    requests: ClassVar[list[tuple[str, int]]] = []

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        _QuietHandler.requests.append((self.path, int(code) if str(code).isdigit() else 0))

    def log_message(self, format: str, *args: object) -> None:
        pass


class StaticSite:
    def __init__(self, root: Path) -> None:
        handler = functools.partial(_QuietHandler, directory=str(root))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> StaticSite:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def page(root: Path, name: str, body: str, mtime: int = 1_700_000_000) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"<html><head><title>{name}</title></head><body>{body}</body></html>")
    os.utime(path, (mtime, mtime))


@pytest.fixture
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    return sources_settings(tmp_path, monkeypatch)


@pytest.fixture
def site_root(tmp_path: Path) -> Path:
    root = tmp_path / "site"
    page(root, "intranet/index.html", '<p>Welcome to the intranet.</p><a href="policies/travel.html">Travel</a> '
         '<a href="news.html#top">News</a> <a href="http://example.org/elsewhere.html">elsewhere</a> '
         '<a href="/outside.html">outside the base</a> <a href="mailto:it@example.org">IT</a>')
    page(root, "intranet/policies/travel.html", "<p>Book trains for trips under four hours. " * 5 + "</p>"
         '<a href="../index.html">home</a> <a href="deep/one.html">deeper</a>')
    page(root, "intranet/policies/deep/one.html", "<p>A page two links down. " * 5 + "</p>")
    page(root, "intranet/news.html", "<p>The canteen reopens on Monday. " * 5 + "</p>")
    page(root, "outside.html", "<p>Not under the base URL.</p>")
    return root


@pytest.fixture
def site(site_root: Path) -> Iterator[StaticSite]:
    _QuietHandler.requests = []
    with StaticSite(site_root) as served:
        yield served


def _sync(settings: Settings, name: str = "intranet"):
    return sync_source(settings, tenant="default", name=name, actor="scheduler")


def test_links_followed_under_the_base_url_within_depth(settings, site, site_root) -> None:
    define_source(settings, name="intranet", type="website", tenant="default",
                  config={"url": site.url + "intranet/index.html", "max_depth": 1}, allow=["group:staff"])
    report = _sync(settings)
    assert (report.added, report.failed, report.status) == (3, 0, "succeeded")
    docs = stored_by_document()
    assert set(docs) == {"intranet:intranet/index.html", "intranet:intranet/policies/travel.html",
                         "intranet:intranet/news.html"}  # deep/one.html is two links down; outside.html not read
    assert not any("outside" in path or "elsewhere" in path for path, _ in _QuietHandler.requests)
    assert report.notes == ["crawl stopped at its bounds after 3 pages"] or not report.notes

    (site_root / "intranet" / "news.html").unlink()
    page(site_root, "intranet/policies/travel.html", "<p>Book trains for trips under five hours. " * 5 + "</p>",
         mtime=1_700_000_100)
    report = _sync(settings)
    assert (report.changed, report.deleted, report.unchanged) == (1, 1, 1)
    assert "five hours" in " ".join(c.content for c in stored_by_document()["intranet:intranet/policies/travel.html"])


def test_sitemap_with_conditional_requests_and_bounds(settings, site, site_root) -> None:
    base = site.url + "intranet/"
    (site_root / "intranet" / "sitemap.xml").write_text(
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"<url><loc>{base}index.html</loc></url><url><loc>{base}policies/deep/one.html</loc></url>"
        f"<url><loc>{base}news.html</loc></url><url><loc>http://example.org/intranet/x.html</loc></url>"
        "</urlset>")
    define_source(settings, name="intranet", type="website", tenant="default", config={"url": base},
                  allow=["group:staff"])
    report = _sync(settings)
    assert (report.added, report.status) == (3, "succeeded")
    assert "intranet:intranet/policies/deep/one.html" in stored_by_document()  # listed, however deep
    assert report.notes == ["1 sitemap URLs outside " + base + " not read"]

    _QuietHandler.requests = []
    embedded = len(SharedRuntime.embedder.embedded)
    report = _sync(settings)
    assert report.unchanged == 3 and len(SharedRuntime.embedder.embedded) == embedded
    assert sorted(code for path, code in _QuietHandler.requests if path.endswith(".html")) == [304, 304, 304]

    # A crawl cut short by its page bound deletes nothing it did not reach.
    define_source(settings, name="small", type="website", tenant="default", config={"url": base, "max_pages": 1},
                  allow=["group:staff"])
    assert _sync(settings, "small").added == 1
    (site_root / "intranet" / "news.html").unlink()
    report = _sync(settings, "small")
    assert report.deleted == 0 and any("read the first 1" in note for note in report.notes)
    report = _sync(settings)
    assert report.deleted == 1  # the full source sees the page gone (404)


def test_unreachable_site_fails_and_keeps_documents(settings, site_root) -> None:
    _QuietHandler.requests = []
    with StaticSite(site_root) as served:
        define_source(settings, name="intranet", type="website", tenant="default",
                      config={"url": served.url + "intranet/index.html"}, allow=["group:staff"])
        assert _sync(settings).added == 4
    report = _sync(settings)
    assert report.status == "failed" and "connection refused" in report.error
    assert len(stored_by_document()) == 4


def test_a_site_defined_through_the_api_is_refused_once_its_host_is_not_public(settings, site) -> None:
    # What the API stores for a site whose host was public when it was defined: checked again at each request.
    define_source(settings, name="moved", type="website", tenant="default",
                  config={"url": site.url + "intranet/index.html", "public_only": True}, allow=["group:staff"])
    report = _sync(settings, "moved")
    assert report.status == "failed" and "non-public address" in report.error
    assert _QuietHandler.requests == [] and stored_by_document() == {}
