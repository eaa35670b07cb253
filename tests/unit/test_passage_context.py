"""A cited passage in context through the API: GET /v1/documents/{chunk_id}/context gives the chunk with its
previous and next chunk of the same source, only what the caller may read; anything else is a 404."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from docqa.conversion.chunking import ChunkSpec, build_chunks
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

TEXT = " ".join(f"w{i}" for i in range(40))  # 4 chunks of 10 words, no overlap


@pytest.fixture
def server(tmp_path):
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="I do not know."))
    with TestClient(app) as client:
        store = app.state.context.runtime.document_store
        chunks = build_chunks(TEXT, ChunkSpec(source_id="handbook.md", source="handbook.md", title="Handbook",
                                              tenant="acme", access=["group:finance"]),
                              chunk_words=10, overlap_words=0)
        # Another source, readable by everyone: never a neighbour of the handbook's chunks.
        other = build_chunks(TEXT, ChunkSpec(source_id="memo.md", source="memo.md", title="Memo", tenant="acme",
                                             access=["everyone"]), chunk_words=10, overlap_words=0)
        store.write_documents(chunks + other)
        yield client, keys, store, chunks


def _context(client: TestClient, key: str, chunk_id: str):
    return client.get(f"/v1/documents/{chunk_id}/context", headers=auth(key))


def _ids(body: dict) -> tuple:
    return tuple(part and part["id"] for part in (body["previous"], body["passage"], body["next"]))


def test_a_passage_comes_with_its_neighbours_of_the_same_source(server):
    client, keys, _, chunks = server
    body = _context(client, keys["alice"], chunks[1].id).json()
    assert _ids(body) == (chunks[0].id, chunks[1].id, chunks[2].id)
    assert body["passage"] == {"id": chunks[1].id, "content": " ".join(f"w{i}" for i in range(10, 20)),
                               "source": "handbook.md", "title": "Handbook", "chunk_index": 1, "location": None,
                               "ocr": False}
    # The first and last chunks have one neighbour.
    assert _ids(_context(client, keys["alice"], chunks[0].id).json()) == (None, chunks[0].id, chunks[1].id)
    assert _ids(_context(client, keys["alice"], chunks[3].id).json()) == (chunks[2].id, chunks[3].id, None)


@pytest.mark.parametrize("user", ["bob", "zed", "zadmin"])
def test_a_passage_the_caller_may_not_read_is_not_found(server, user):
    client, keys, _, chunks = server
    response = _context(client, keys[user], chunks[1].id)
    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
    assert _context(client, keys["alice"], "no-such-chunk").status_code == 404


def test_a_neighbour_the_caller_may_not_read_is_left_out(server):
    client, keys, store, chunks = server
    hidden = Document(id=chunks[2].id, content=chunks[2].content, meta={**chunks[2].meta, "access": ["group:hr"]})
    store.write_documents([hidden], policy=DuplicatePolicy.OVERWRITE)
    store.delete_documents([chunks[0].id])
    assert _ids(_context(client, keys["alice"], chunks[1].id).json()) == (None, chunks[1].id, None)
    assert _context(client, keys["alice"], chunks[2].id).status_code == 404


def test_a_chunk_without_a_position_is_shown_alone_and_auditors_are_refused(server):
    client, keys, store, chunks = server
    store.write_documents([Document(id="rec-1", content="Glucose 5.1 mmol/L",
                                    meta={"tenant": "acme", "access": ["everyone"], "source_id": "handbook.md"})])
    assert _ids(_context(client, keys["bob"], "rec-1").json()) == (None, "rec-1", None)
    assert _context(client, keys["audrey"], chunks[1].id).status_code == 403


def test_a_passage_says_where_it_stands_and_its_context_stays_in_its_sheet(server):
    from docqa.conversion.chunking import build_section_chunks
    from docqa.conversion.sections import Section, Table

    client, keys, store, _ = server
    rows = tuple((number, (f"item{number}", str(number * 10))) for number in range(2, 8))
    sections = [Section(table=Table("Stock", ("Item", "Count"), rows), location={"sheet": "Stock"}),
                Section(table=Table("Prices", ("Item", "Euros"), rows[:1]), location={"sheet": "Prices"}),
                Section("The scanned delivery note says 40 pallets arrived.", {"page": 3}, ocr=True)]
    chunks = build_section_chunks(sections, ChunkSpec(source_id="stock.xlsx", source="stock.xlsx", title="Stock",
                                                      tenant="acme", access=["everyone"]),
                                  chunk_words=25, overlap_words=0)
    store.write_documents(chunks)
    stock = [c for c in chunks if c.meta.get("sheet") == "Stock"]
    assert len(stock) >= 2 and stock[0].content.startswith("Sheet: Stock\n| Item | Count |")
    last = _context(client, keys["bob"], stock[-1].id).json()
    assert last["passage"]["location"] == f"sheet Stock, rows {stock[-1].meta['row_start']}-7"
    # The next chunk of the file is another sheet's: not this place's context.
    assert _ids(last) == (stock[-2].id, stock[-1].id, None)
    scanned = _context(client, keys["bob"], chunks[-1].id).json()["passage"]
    assert (scanned["location"], scanned["ocr"]) == ("page 3", True)
