"""WebPageReader against real pages served on loopback: read, converted and chunked like uploads, ranked, bounded,
and refused when they live on a non-public address."""

from __future__ import annotations

import io
import json
import multiprocessing
import re
import time
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from haystack import Document

from docqa.components import web_page_reader
from docqa.components.multi_source_retriever import MultiSourceRetriever
from docqa.components.searxng_web_search import SearxngWebSearch, _document
from docqa.components.web_page_reader import WebPageReader, chunk_document_id
from docqa.conversion.chunking import ChunkSpec, build_chunks
from docqa.conversion.converters import convert_bytes
from tests.support.conversion_bombs import slow_pdf, zip_bomb_docx
from tests.support.loopback_http import LoopbackSite, Route, delayed, reply, trickle

ANSWER = "The Zephyr footbridge was designed by the engineer Marta Lindqvist and opened in 1931."
FILLER = (
    "Riverside walks are popular with visitors in every season, and the town council maintains benches, "
    "lamps and planted borders along the water so that families can stroll there in the evenings. "
)


def _html(title: str, paragraphs: list[str]) -> bytes:
    body = "".join(f"<p>{p}</p>\n" for p in paragraphs)
    return (
        f"<html><head><title>{title}</title><style>p {{ color: red }}</style></head><body>"
        f"<nav>Home | About</nav><article><h1>{title}</h1>{body}</article></body></html>"
    ).encode()


DEEP_HTML = _html("Bridges of Tallmark", [FILLER * 3 for _ in range(6)] + [ANSWER] + [FILLER * 2 for _ in range(3)])
NOTES_TXT = ("Visitor notes.\n\nThe old mill by the river now houses a bakery.\n\n" + FILLER * 4).encode()
CHUNK_WORDS, OVERLAP = 40, 5


def _redirect(location: str) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(302)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route


ROUTES: dict[str, Route] = {
    "/deep.html": reply(DEEP_HTML, "text/html; charset=utf-8"),
    "/notes": reply(NOTES_TXT, "text/plain"),
    "/hang": delayed(3.0, reply(b"too late", "text/plain")),
    "/large.txt": reply(b"word " * 20_000, "text/plain"),
    "/broken": reply(b"internal error", "text/plain", status=500),
    "/garbage": reply(bytes(range(256)) * 8, "text/plain"),
    "/blob": reply(bytes(range(256)) * 8, "application/octet-stream"),
    "/empty.html": reply(b"<html><body>   </body></html>", "text/html"),
    "/moved": _redirect("/deep.html"),
}


@pytest.fixture
def site() -> Iterator[LoopbackSite]:
    with LoopbackSite(ROUTES) as served:
        yield served


def _result(url: str, title: str, snippet: str) -> Document:
    doc = _document({"url": url, "title": title, "content": snippet})
    assert doc is not None
    return doc


def _kept_snippet(out: dict[str, Any], snippet: Document) -> bool:
    """The output is that snippet alone (scored: a copy of it)."""
    return [(d.id, d.content, d.meta) for d in out["documents"]] == [(snippet.id, snippet.content, snippet.meta)]


def _reader(**kwargs: Any) -> WebPageReader:
    options: dict[str, Any] = {
        "allow_private_addresses": True,
        "timeout_s": 2.0,
        "top_k": 50,
        "chunk_words": CHUNK_WORDS,
        "overlap_words": OVERLAP,
    }
    return WebPageReader(**{**options, **kwargs})


def _upload_chunks(data: bytes, name: str) -> list[str]:
    """What an upload of the same bytes is chunked into."""
    converted = convert_bytes(data, name, 10_000_000)
    spec = ChunkSpec(source_id=name, source=name, title=converted.title, tenant="t", access=["everyone"])
    return [d.content for d in build_chunks(converted.text, spec, chunk_words=CHUNK_WORDS, overlap_words=OVERLAP)]


class TestReadingPages:
    def test_pages_are_chunked_like_uploads_and_the_chunk_with_the_answer_comes_first(self, site):
        deep, notes = site.url("/deep.html"), site.url("/notes")
        results = [
            _result(deep, "Bridges of Tallmark", "Bridges of Tallmark: riverside walks and benches."),
            _result(notes, "Visitor notes", "Notes for visitors."),
        ]
        assert "Lindqvist" not in results[0].content  # the snippet alone cannot answer

        out = _reader().run(query="Who designed the Zephyr footbridge?", documents=results)

        assert out["errors"] == []
        best = out["documents"][0]
        assert "Marta Lindqvist" in best.content
        assert best.meta == {
            "source": "web",
            "public": True,
            "url": deep,
            "title": "Bridges of Tallmark",
            "fetched": True,
            "chunk_index": best.meta["chunk_index"],
        }
        by_url: dict[str, list[Document]] = {}
        for doc in out["documents"]:
            by_url.setdefault(doc.meta["url"], []).append(doc)
        for url, data, name in ((deep, DEEP_HTML, "deep.html"), (notes, NOTES_TXT, "notes.txt")):
            chunks = sorted(by_url[url], key=lambda d: d.meta["chunk_index"])
            assert [d.content for d in chunks] == _upload_chunks(data, name)
            assert [d.id for d in chunks] == [chunk_document_id(url, i) for i in range(len(chunks))]
        assert len(by_url[deep]) > 3  # the page was split, not kept whole
        scores = [d.score for d in out["documents"]]
        assert scores == sorted(scores, reverse=True) and scores[0] > scores[1]
        assert results[0].score is None  # the results given are not changed
        assert all(d.meta["fetched"] for d in out["documents"])  # a read page replaces its snippet

    def test_top_k_keeps_the_best_and_a_second_read_gives_the_same_documents(self, site):
        results = [_result(site.url("/deep.html"), "Bridges", "Bridges of Tallmark.")]
        reader = _reader(top_k=2)
        first = reader.run(query="Zephyr footbridge engineer", documents=results)["documents"]
        second = reader.run(query="Zephyr footbridge engineer", documents=results)["documents"]
        assert len(first) == 2 and [d.id for d in first] == [d.id for d in second]
        assert len(reader.run(query="Zephyr", documents=results, top_k=1)["documents"]) == 1

    def test_a_redirect_is_followed(self, site):
        out = _reader().run(query="Zephyr footbridge", documents=[_result(site.url("/moved"), "Moved", "Moved.")])
        assert out["errors"] == [] and "Lindqvist" in out["documents"][0].content
        assert out["documents"][0].meta["url"] == site.url("/deep.html")
        assert site.hits == ["/moved", "/deep.html"]


class TestFailures:
    @pytest.mark.parametrize(
        "path,reason",
        [
            ("/hang", "timed out after 0.5s"),
            ("/large.txt", "page larger than 50000 bytes"),
            ("/broken", "HTTP 500"),
            ("/missing.html", "HTTP 404"),
            ("/garbage", "binary content in a text file"),
            ("/blob", "unsupported content type application/octet-stream"),
            ("/empty.html", "no extractable text"),
        ],
    )
    def test_a_page_that_cannot_be_read_keeps_its_snippet_and_reports_one_line(self, site, path, reason):
        snippet = _result(site.url(path), "Some page", "The snippet of some page.")
        good = _result(site.url("/notes"), "Visitor notes", "Notes for visitors.")
        started = time.monotonic()
        out = _reader(timeout_s=0.5, max_bytes=50_000).run(query="snippet of some page mill", documents=[snippet, good])
        assert time.monotonic() - started < 2.0
        assert out["errors"] == [f"web page {site.url(path)}: {reason}"]
        assert snippet.id in [d.id for d in out["documents"]]
        assert any(d.meta.get("fetched") and d.meta["url"] == site.url("/notes") for d in out["documents"])

    def test_the_whole_page_read_is_bounded_not_each_read(self):
        with LoopbackSite({"/trickle": trickle(b"slow words ", 40, 0.1)}) as slow:
            started = time.monotonic()
            out = _reader(timeout_s=0.8).run(query="slow", documents=[_result(slow.url("/trickle"), "T", "Slow.")])
            assert time.monotonic() - started < 2.0
            assert out["errors"] == [f"web page {slow.url('/trickle')}: timed out after 0.8s"]


class TestConversionBox:
    DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

    def test_a_zip_bomb_page_is_refused_before_it_is_inflated(self):
        bomb = zip_bomb_docx()
        with LoopbackSite({"/bomb.docx": reply(bomb, self.DOCX)}) as hostile:
            url = hostile.url("/bomb.docx")
            out = _reader(max_bytes=3_000_000).run(query="clause", documents=[_result(url, "Bomb", "A bomb.")])
        assert out["errors"] == [f"web page {url}: decompressed size over 67108864 bytes (word/document.xml "
                                 f"declares {_declared(bomb)} bytes)"]

    def test_a_conversion_past_the_page_deadline_is_killed_not_left_running(self):
        with LoopbackSite({"/slow.pdf": reply(slow_pdf(), "application/pdf")}) as slow:
            url = slow.url("/slow.pdf")
            reader = _reader(timeout_s=1.5)
            reader.warm_up()
            started = time.monotonic()
            out = reader.run(query="slow", documents=[_result(url, "Slow", "A slow page.")])
            elapsed = time.monotonic() - started
        assert elapsed < 1.5 + 1.5
        [error] = out["errors"]
        assert re.fullmatch(rf"web page {re.escape(url)}: conversion took longer than [12](\.\d)? s", error), error
        assert multiprocessing.active_children() == []


def _declared(docx: bytes) -> int:
    return zipfile.ZipFile(io.BytesIO(docx)).getinfo("word/document.xml").file_size


class TestAddresses:
    def test_a_page_on_a_private_address_is_refused_without_a_request(self, site):
        snippet = _result(site.url("/deep.html"), "Bridges", "Bridges of Tallmark.")
        out = WebPageReader(timeout_s=2).run(query="Zephyr", documents=[snippet])
        assert _kept_snippet(out, snippet)
        assert out["errors"] == [
            f"web page {site.url('/deep.html')}: 127.0.0.1 resolves to a non-public address (127.0.0.1)"
        ]
        assert site.hits == []
        allowed = WebPageReader(timeout_s=2, allow_private_addresses=True).run(query="Zephyr", documents=[snippet])
        assert allowed["errors"] == [] and allowed["documents"][0].meta["fetched"] is True
        assert site.hits == ["/deep.html"]

    @pytest.mark.parametrize(
        "url", ["ftp://127.0.0.1/file.txt", "file:///etc/passwd", "http:///no-host", "http://127.0.0.1:99999/"]
    )
    def test_only_http_urls_are_read(self, url):
        snippet = _result(url, "Other", "Some snippet.")
        out = _reader().run(query="snippet", documents=[snippet])
        assert _kept_snippet(out, snippet) and len(out["errors"]) == 1
        assert out["errors"][0].startswith(f"web page {url}: ") and "URL" in out["errors"][0]

    def test_an_unresolvable_host_keeps_the_snippet(self):
        snippet = _result("http://no-such-host.invalid/page.html", "Gone", "Some snippet.")
        out = _reader().run(query="snippet", documents=[snippet])
        assert _kept_snippet(out, snippet)
        assert out["errors"] == ["web page http://no-such-host.invalid/page.html: cannot resolve no-such-host.invalid"]

    def test_every_redirect_hop_is_checked(self, site, monkeypatch):
        # 127.0.0.2 stands in for a public address; the page it redirects to is on 127.0.0.1.
        monkeypatch.setattr(web_page_reader, "is_public_address", lambda address: str(address) == "127.0.0.2")
        with LoopbackSite({"/moved": _redirect(site.url("/deep.html"))}, host="127.0.0.2") as public:
            snippet = _result(public.url("/moved"), "Moved", "Moved.")
            out = WebPageReader(timeout_s=2).run(query="Zephyr", documents=[snippet])
        assert public.hits == ["/moved"] and site.hits == []
        assert _kept_snippet(out, snippet)
        assert out["errors"] == [
            f"web page {public.url('/moved')}: 127.0.0.1 resolves to a non-public address (127.0.0.1)"
        ]

    def test_through_a_proxy_the_url_goes_to_the_proxy_as_it_is(self, monkeypatch):
        seen: list[tuple[str, str | None]] = []

        def forward(handler: BaseHTTPRequestHandler) -> None:
            seen.append((handler.path, handler.headers["Host"]))
            reply(NOTES_TXT, "text/plain")(handler)

        for variable in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(variable, raising=False)
        with LoopbackSite({"*": forward}) as proxy:
            monkeypatch.setenv("HTTP_PROXY", proxy.base)
            out = _reader().run(query="mill", documents=[_result("http://localhost:9/notes", "Notes", "Notes.")])
        assert seen == [("http://localhost:9/notes", "localhost:9")]
        assert out["errors"] == [] and "bakery" in out["documents"][0].content

    @pytest.mark.parametrize(
        "address,public",
        [
            ("127.0.0.1", False),
            ("10.1.2.3", False),
            ("172.16.0.1", False),
            ("192.168.1.1", False),
            ("169.254.169.254", False),
            ("0.0.0.0", False),
            ("100.64.0.1", False),
            ("224.0.0.1", False),
            ("::1", False),
            ("fe80::1", False),
            ("fd00::1", False),
            ("::ffff:127.0.0.1", False),
            ("93.184.216.34", True),
            ("2606:2800:220:1:248:1893:25c8:1946", True),
            ("::ffff:8.8.8.8", True),
        ],
    )
    def test_public_addresses(self, address, public):
        import ipaddress

        assert web_page_reader.is_public_address(ipaddress.ip_address(address)) is public


class TestBounds:
    def test_only_the_first_max_pages_results_are_read(self, site):
        paths = ["/deep.html", "/notes", "/moved", "/empty.html"]
        results = [
            _result(site.url(p), f"Page {i}", f"Snippet number {i} about Tallmark.") for i, p in enumerate(paths)
        ]
        out = _reader(max_pages=2).run(query="Tallmark", documents=results)
        assert sorted(site.hits) == ["/deep.html", "/notes"]
        unread = [d for d in out["documents"] if not d.meta.get("fetched")]
        assert sorted(d.meta["url"] for d in unread) == sorted(site.url(p) for p in paths[2:])
        assert out["errors"] == []

    @pytest.mark.parametrize(
        "kwargs",
        [{"max_pages": 0}, {"timeout_s": 0}, {"max_bytes": 0}, {"top_k": 0}, {"chunk_words": 10, "overlap_words": 10}],
    )
    def test_bounds_are_validated(self, kwargs):
        with pytest.raises(ValueError):
            WebPageReader(**kwargs)

    def test_to_dict_round_trip(self):
        reader = WebPageReader(
            max_pages=2,
            timeout_s=1.5,
            max_bytes=10_000,
            top_k=4,
            chunk_words=50,
            overlap_words=10,
            allow_private_addresses=True,
        )
        data = reader.to_dict()
        assert data["type"] == "docqa.components.web_page_reader.WebPageReader"
        copy = WebPageReader.from_dict(json.loads(json.dumps(data)))
        assert copy.to_dict() == data


def _searx_for(site: LoopbackSite) -> Route:
    def route(handler: BaseHTTPRequestHandler) -> None:
        body = json.dumps(
            {
                "results": [
                    {"url": site.url("/notes"), "title": "Visitor notes", "content": "Notes for visitors of Tallmark."},
                    {
                        "url": site.url("/deep.html"),
                        "title": "Bridges of Tallmark",
                        "content": "Bridges of Tallmark: riverside walks.",
                    },
                    {"url": site.url("/broken"), "title": "Broken", "content": "A broken page about the footbridge."},
                ]
            }
        ).encode()
        reply(body, "application/json")(handler)

    return route


def test_the_retriever_returns_read_chunks_for_a_web_source_and_reports_failed_pages(site):
    with LoopbackSite({"/search": _searx_for(site)}) as search_site:
        retriever = MultiSourceRetriever(
            retriever=None,
            sources=["collection:main", "web"],
            top_k=3,
            web_search=SearxngWebSearch(url=search_site.url("/search"), timeout_s=2),
            page_reader=_reader(top_k=3),
        )
        out = retriever.run(query="Who designed the Zephyr footbridge?", source="web")
    assert out["source"] == "web" and len(out["documents"]) == 3
    assert "Marta Lindqvist" in out["documents"][0].content and out["documents"][0].meta["fetched"] is True
    assert out["error"] == f"web page {site.url('/broken')}: HTTP 500"
