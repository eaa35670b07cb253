"""A folder of the files enterprises keep (a deck, a workbook, a CSV, a mail with a PDF attachment, a scanned PDF,
an image, ODF and RTF files), made in the test: `docqa ingest`'s path ingests them all, a question whose answer is
only in one of them is answered from it, and the citation points at the right slide, sheet rows, attachment or
page (OCR marked). An upload of a broken and an encrypted file fails those items with a reason."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from docqa.access import AccessScope
from docqa.components.cited_answer_generator import CitedAnswerGenerator
from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.prompt_templates import load_prompt
from docqa.components.store_retrievers import build_retrievers
from docqa.ingestion.pipeline import ingest_paths
from docqa.pipelines.baselines import StandardRAGPipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.hash_embedder import HashTextEmbedder
from tests.support.ingestion_fakes import CountingEmbedder
from tests.support.office_files import (
    eml_bytes,
    image_bytes,
    ods_bytes,
    odt_bytes,
    pptx_bytes,
    rtf_bytes,
    scanned_pdf_bytes,
    xlsx_bytes,
)
from tests.support.sample_files import pdf_bytes
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

SCOPE = AccessScope("acme", frozenset({"group:sales"}))
CUSTOMERS = ["Northwind", "Contoso", "Fabrikam", "Tailspin", "Wingtip", "Litware", "Proseware", "Adventure"]


def _orders() -> list[list[Any]]:
    rows: list[list[Any]] = [["Order", "Customer", "Amount"]]
    rows += [[5000 + i, f"{CUSTOMERS[i % 8]} branch {i}", 100 + i] for i in range(1, 61)]
    rows[37] = [5037, "Harbor Freight Logistics", 7315]  # sheet row 38
    return rows


FILES = {
    "deck.pptx": lambda: pptx_bytes([("Pricing", "The Gold plan costs 40 euros a month.", ""),
                                     ("Partners", "Partner programme overview.",
                                      "The partner discount is 12 percent for resellers.")]),
    "orders.xlsx": lambda: xlsx_bytes({"Summary": [["Year", "Orders"], [2026, 60]], "Orders": _orders()}),
    "rooms.csv": lambda: b"Room,Floor,Seats\nAtlas,2,8\nBorealis,5,14\nCaspian,3,6\n",
    "offer.eml": lambda: eml_bytes("Offer for Globex", "Please find our offer attached.", [
        ("offer.pdf", pdf_bytes(["The discount for Globex is 17 percent.", "The offer is valid until June."]))]),
    "lease.pdf": lambda: scanned_pdf_bytes([["Lease agreement between Acme and Lyon Storage."],
                                            ["The deposit for the Lyon warehouse is 12,000 euros."]]),
    "receipt.png": lambda: image_bytes(["Taxi receipt: the fare to the airport was 64 euros."]),
    "memo.odt": lambda: odt_bytes(["Memo", "The notice period for contractors is 45 days."]),
    "stock.ods": lambda: ods_bytes({"Stock": [["Item", "Count"], ["Hex bolts", "3400"], ["Washers", "900"]]}),
    "minutes.rtf": lambda: rtf_bytes(["Board minutes.", "The dividend approved by the board is 0.42 euros."]),
}
# question, the fact the answer must state, where it is cited
CASES = [
    ("What is the partner discount for resellers?", "partner discount is 12 percent", "deck.pptx", "slide 2"),
    ("What amount did Harbor Freight Logistics order?", "| 5037 | Harbor Freight Logistics | 7315 |",
     "orders.xlsx", "sheet Orders, row"),
    ("How many seats does the Borealis room have?", "| Borealis | 5 | 14 |", "rooms.csv", "sheet rooms, rows"),
    ("What is the discount for Globex?", "discount for Globex is 17 percent", "offer.eml",
     "attachment offer.pdf, page 1"),
    ("What is the deposit for the Lyon warehouse?", "deposit for the Lyon warehouse is 12,000 euros", "lease.pdf",
     "page 2"),
    ("What was the taxi fare to the airport?", "fare to the airport was 64 euros", "receipt.png", None),
    ("What is the notice period for contractors?", "notice period for contractors is 45 days", "memo.odt", None),
    ("How many hex bolts are in stock?", "| Hex bolts | 3400 |", "stock.ods", "sheet Stock, rows 2-3"),
    ("What dividend did the board approve?", "dividend approved by the board is 0.42 euros", "minutes.rtf", None),
]


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> tuple[Any, Any]:
    root = tmp_path_factory.mktemp("files")
    folder = root / "shared"
    folder.mkdir()
    for name, build in FILES.items():
        (folder / name).write_bytes(build())
    settings = Settings(data_dir=root / "data", chunk_words=40, chunk_overlap_words=5)
    runtime = Runtime(settings, document_store=build_document_store(settings))
    report = ingest_paths(runtime, [folder], "acme", ["group:sales"], embedder=CountingEmbedder())
    return runtime, report


def test_every_file_of_the_folder_is_written(ingested) -> None:
    _, report = ingested
    assert not report.failed, [(i.source, i.reason) for i in report.failed]
    assert sorted(item.source for item in report.written) == sorted(FILES)


def _answering(fact: str) -> ScriptedChatGenerator:
    # The model states the fact only when a numbered passage of its prompt holds it, citing that passage.
    def reply(prompt: str) -> str:
        for number, passage in re.findall(r"^\[(\d+)\] (.*)$", prompt, flags=re.MULTILINE):
            if fact in passage:
                return f"{fact.strip('| ')} [{number}]."
        return "I do not know."

    return ScriptedChatGenerator(rules=[(r".", reply)])


@pytest.mark.parametrize(("question", "fact", "source", "location"), CASES,
                         ids=[case[2] for case in CASES])
def test_a_question_is_answered_from_its_file_and_cites_the_place(ingested, question, fact, source,
                                                                  location) -> None:
    runtime, _ = ingested
    store = runtime.document_store
    bm25, dense = build_retrievers(store, Settings())
    retriever = HybridRetriever(bm25, dense, HashTextEmbedder(), top_k=4, candidates=20)
    generator = CitedAnswerGenerator(_answering(fact), prompt_template=load_prompt("standard_answer"),
                                     max_tokens=64)
    result = StandardRAGPipeline(retriever, generator, top_k=4, max_question_chars=500, model="scripted").run(
        question, SCOPE)

    assert result.answer_source == "model" and fact.strip("| ") in result.answer
    cited = store.filter_documents(filters={"field": "id", "operator": "==", "value": result.citations[0].document_id})
    meta = cited[0].meta
    assert meta["source"] == source and fact in cited[0].content
    citation = result.citations[0]
    if location is None:
        assert "location" not in meta and citation.location is None
    else:
        assert meta["location"].startswith(location) and citation.location == meta["location"]
    scanned = source in ("lease.pdf", "receipt.png")
    assert meta.get("ocr", False) is scanned and citation.ocr is scanned
    assert citation.to_dict().get("ocr", False) is scanned
    if source == "orders.xlsx":  # the chunk holds the header and the rows it names, the row sits among them
        assert cited[0].content.startswith("Sheet: Orders\n| Order | Customer | Amount |")
        assert meta["row_start"] <= 38 <= meta["row_end"]


class _JobRuntime(Runtime):
    store: Any = None

    def document_embedder(self):
        return CountingEmbedder()

    @property
    def document_store(self):
        return _JobRuntime.store


def test_an_upload_writes_the_new_types_and_fails_broken_and_encrypted_files(tmp_path: Path, monkeypatch) -> None:
    _JobRuntime.store = build_document_store(Settings(data_dir=tmp_path / "store"))
    monkeypatch.setattr("docqa.runtime.Runtime", _JobRuntime)
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="unused"))
    files = [("deck.pptx", FILES["deck.pptx"]()), ("offer.eml", FILES["offer.eml"]()),
             ("broken.xlsx", b"PK\x03\x04 cut short"),
             ("locked.docx", b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 512)]
    with TestClient(app) as client:
        response = client.post("/v1/documents", headers=auth(keys["root"]), data={"access": ["group:sales"]},
                               files=[("files", (name, data)) for name, data in files])
        assert response.status_code == 202
        job = client.get(f"/v1/jobs/{response.json()['job_id']}", headers=auth(keys["root"])).json()
    failures = {item["source_id"]: item for item in job["failures"]}
    assert (job["items_written"], job["items_failed"]) == (2, 2)
    assert failures["broken.xlsx"]["reason"] == "cannot parse XLSX file (not a ZIP archive)"
    assert failures["locked.docx"]["reason"].startswith("DOCX file is encrypted (password-protected)")
    assert {item["code"] for item in failures.values()} == {"unreadable_file"}
    stored = _JobRuntime.store.filter_documents()
    assert {d.meta.get("location") for d in stored if d.meta["source"] == "offer.eml"} >= {
        "message", "attachment offer.pdf, page 1"}
