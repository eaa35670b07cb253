"""No usable answer from the model: the result quotes the best-matching retrieved sentences, labelled extracted."""

from __future__ import annotations

import pytest
from haystack import Document

from docqa.access import AccessScope
from docqa.components.cited_answer_generator import CitedAnswerGenerator
from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.prompt_templates import load_prompt
from docqa.components.store_retrievers import build_retrievers
from docqa.extractive_fallback import extract_answer, split_sentences, table_rows, unusable_reason
from docqa.pipelines.baselines import StandardRAGPipeline
from docqa.result import Step
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))
QUESTION = "Within how many days must employees submit their expense reports?"
POLICY = (
    "# Travel and expense policy\n\nEmployees submit expense reports within 30 days of the end of a trip. "
    "Reports submitted later than 30 days\nneed written approval from the finance director.\n\n"
    "Economy class is the default for flights shorter than six hours."
)


def _doc(doc_id: str, text: str, access: tuple[str, ...] = ("everyone",)) -> Document:
    return Document(id=doc_id, content=text, meta={"tenant": "acme", "access": list(access), "source": f"{doc_id}.md"})


@pytest.fixture
def store(tmp_path):
    store = build_document_store(Settings(data_dir=tmp_path))
    docs = [
        _doc("expenses", POLICY),
        _doc("onboarding", "New employees receive a laptop on their first day. Badges are issued by security."),
        _doc("board", "Board members submit expense reports within 5 days, says the board charter.",
             access=("board",)),
    ]
    store.write_documents(HashDocumentEmbedder().run(documents=docs)["documents"])
    return store


def _standard(store, llm) -> StandardRAGPipeline:
    bm25, dense = build_retrievers(store, Settings())
    retriever = HybridRetriever(bm25, dense, HashTextEmbedder(), top_k=3, candidates=10)
    generator = CitedAnswerGenerator(llm, prompt_template=load_prompt("standard_answer"), max_tokens=64)
    return StandardRAGPipeline(retriever, generator, top_k=3, max_question_chars=500, model="scripted")


class TestPipelines:
    def test_an_echoed_prompt_gives_the_expense_sentence_with_its_citation(self, store):
        llm = ScriptedChatGenerator(rules=[(r"expense", lambda prompt: prompt)])
        result = _standard(store, llm).run(QUESTION, ALICE)

        assert result.answer_source == "extracted"
        first = result.answer.splitlines()[0]
        assert first == "Employees submit expense reports within 30 days of the end of a trip. [1]"
        assert result.citations[0].document_id == "expenses" and result.citations[0].source == "expenses.md"
        assert "repeated" in result.answer_note and "not generated" in result.answer_note
        grounding = result.steps[-1]
        assert (grounding.kind, grounding.name) == ("grounding", "grounding")
        # The generator dropped the echo, so the check saw nothing; the reply in the generation step says why.
        assert grounding.inputs["answer"] == "" and grounding.outputs["reason"] == "empty"
        data = result.to_dict()
        assert data["answer_source"] == "extracted" and data["answer_note"] == result.answer_note

    def test_extracted_sentences_come_only_from_passages_the_caller_may_read(self, store):
        result = _standard(store, ScriptedChatGenerator(default="")).run(QUESTION, ALICE)
        assert result.steps[-1].outputs["reason"] == "empty"
        assert "5 days" not in result.answer and "board" not in {c.document_id for c in result.citations}
        board = AccessScope("acme", frozenset({"board"}))
        result = _standard(store, ScriptedChatGenerator(default="")).run(QUESTION, board)
        assert "board" in {c.document_id for c in result.citations}

    def test_a_usable_answer_is_the_models(self, store):
        llm = ScriptedChatGenerator(default="Within 30 days [1].")
        result = _standard(store, llm).run(QUESTION, ALICE)
        assert (result.answer, result.answer_source, result.answer_note) == ("Within 30 days [1].", "model", None)
        assert "fallback" not in {s.kind for s in result.steps}

    def test_a_wrong_value_about_a_sheet_row_gives_that_row_with_its_column_names(self, tmp_path):
        store = build_document_store(Settings(data_dir=tmp_path))
        rows = "\n".join(f"| {125000 + i} | North | {100 + i}.25 |" for i in range(9))
        sheet = Document(id="orders", content=f"Sheet: Orders\n| Order | Region | Amount |\n|---|---|---|\n{rows}",
                         meta={"tenant": "acme", "access": ["everyone"], "source": "orders.xlsx",
                               "sheet": "Orders", "row_start": 2, "row_end": 10, "location": "sheet Orders, rows 2-10"})
        store.write_documents(HashDocumentEmbedder().run(documents=[sheet])["documents"])
        llm = ScriptedChatGenerator(default="The amount of order 125005 is 6556.75 [1].")

        result = _standard(store, llm).run("What is the Amount of Order 125005?", ALICE)

        assert result.answer_source == "extracted" and result.steps[-1].outputs["reason"] == "unsupported_number"
        assert result.answer == "Order: 125005; Region: North; Amount: 105.25 [1]"
        assert result.citations[0].location == "sheet Orders, rows 2-10"

    def test_nothing_matching_says_so_and_cites_nothing(self, store):
        result = _standard(store, ScriptedChatGenerator(default="")).run("Quantum chromodynamics lattice?", ALICE)
        assert result.answer == "" and result.citations == [] and result.answer_source == "none"
        assert result.answer_note.startswith("No answer")


class TestUnusable:
    def _generation(self, response: str) -> Step:
        return Step(0, "generation", "gen", outputs={"llm_calls": [{"response": response}]})

    def test_reasons(self):
        assert unusable_reason(QUESTION, "", [self._generation("")]) == "empty"
        assert unusable_reason(QUESTION, "", [self._generation("Question: ...")]) == "echo"
        assert unusable_reason(QUESTION, QUESTION.upper(), []) == "echo"
        assert unusable_reason(QUESTION, f"Question: {QUESTION}", []) == "echo"
        assert unusable_reason(QUESTION, "30 days", []) is None

    def test_a_reply_stuck_in_a_loop_is_repetitive_but_prose_is_not(self):
        assert unusable_reason(QUESTION, "User datamodel\n\n" * 20, []) == "repetitive"
        assert unusable_reason(QUESTION, "Expense reports are due in 30 days. " * 6, []) == "repetitive"
        prose = (
            "Employees submit expense reports within 30 days of the end of a trip. Receipts are required for "
            "every item above 25 euros, and the manager approves the report before finance pays it. Late "
            "reports need a written reason, and the finance team may refuse them after 90 days."
        )
        assert unusable_reason(QUESTION, prose, []) is None
        assert unusable_reason(QUESTION, "yes yes yes", []) is None  # too short to call a loop

    def test_the_last_grade_decides_groundedness(self):
        graded = [Step(0, "grading", "g", outputs={"grounded": True}),
                  Step(1, "grading", "g", outputs={"grounded": False})]
        assert unusable_reason(QUESTION, "45 days", graded) == "ungrounded"
        assert unusable_reason(QUESTION, "30 days", graded[::-1]) is None


class TestRunPassages:
    def test_only_passages_that_say_where_they_come_from_are_kept_for_quoting(self):
        """ReSP's sub-question guard embeds earlier questions as Documents without metadata: quoting one would
        show the question back as the answer."""
        from haystack import Document

        from docqa.extractive_fallback import passage_pool

        stored = Document(id="p1", content="Expense reports are due in 30 days.", meta={"source": "policy.md"})
        question = Document(content=QUESTION)
        assert passage_pool([stored, question]) == [stored]

    def test_every_rounds_passages_once_in_order_of_first_appearance_and_bounded(self):
        from haystack import Document

        from docqa.extractive_fallback import MAX_PASSAGES, passage_pool

        docs = [Document(id=f"p{i}", content=f"Rule {i}.", meta={"source": f"{i}.md"}) for i in range(3)]
        assert [d.id for d in passage_pool([docs[1], docs[0]], [docs[0], docs[2]], [docs[1]])] == ["p1", "p0", "p2"]
        many = [Document(id=f"m{i}", content=f"Rule {i}.", meta={"source": "m.md"}) for i in range(MAX_PASSAGES + 5)]
        assert len(passage_pool(many[:150], many[150:])) == MAX_PASSAGES


class TestExtraction:
    def test_sentences_join_wrapped_lines_and_skip_headings(self):
        sentences = split_sentences(POLICY)
        assert sentences[0].startswith("Employees submit")
        assert "Reports submitted later than 30 days need written approval from the finance director." in sentences
        assert not any(s.startswith("#") or "Travel and expense policy" in s for s in sentences)

    def test_at_most_three_sentences_cite_their_passages_in_order(self):
        docs = [Document(id=f"d{i}", content=f"Expense reports rule {i}: submit expense reports soon.")
                for i in range(5)]
        extraction = extract_answer("When are expense reports due?", docs)
        assert len(extraction.sentences) == 3
        assert extraction.text.splitlines() == [
            f"Expense reports rule {i}: submit expense reports soon. [{i + 1}]" for i in range(3)]

    def test_the_document_title_run_into_the_first_sentence_is_not_quoted(self):
        doc = Document(id="p", content="Travel and expense policy Employees submit expense reports within 30 days.",
                       meta={"title": "Travel and expense policy"})
        assert extract_answer(QUESTION, [doc]).text == "Employees submit expense reports within 30 days. [1]"

    def test_table_rows_are_statements_with_their_column_names(self):
        text = ("Sheet: Stock\n| Item | Note | Count |\n|:---|---|---:|\n| bolt | a \\| b | 4 |\n| nut |  | 7 |\n\n"
                "| not a table row without a rule |\nPlain text line.")
        assert table_rows(text) == ["Item: bolt; Note: a | b; Count: 4", "Item: nut; Count: 7"]
        assert split_sentences(text) == ["Plain text line."]  # rows are never quoted bare, without their header

    def test_the_row_with_the_asked_key_is_the_one_quoted(self):
        rows = "\n".join(f"| {125000 + i} | Customer {i} | {1000 + i}.50 |" for i in range(9))
        doc = Document(id="s", content=f"Sheet: Orders\n| Order | Customer | Amount |\n|---|---|---|\n{rows}")
        prose = Document(id="p", content="Every order has an amount in euros, shown on the invoice.")
        extraction = extract_answer("What is the Amount of Order 125007?", [prose, doc])
        assert extraction.text == "Order: 125007; Customer: Customer 7; Amount: 1007.50 [1]"
        assert [d.id for d in extraction.documents] == ["s"]

    def test_duplicate_sentences_of_overlapping_chunks_appear_once(self):
        docs = [Document(id="a", content=POLICY), Document(id="b", content=POLICY)]
        extraction = extract_answer(QUESTION, docs)
        assert len({s for s, _, _ in extraction.sentences}) == len(extraction.sentences)
        assert [d.id for d in extraction.documents] == ["a"]


class TestInterfaces:
    def test_the_cli_labels_every_extracted_line(self, store, capsys):
        from docqa.cli import _print_result

        result = _standard(store, ScriptedChatGenerator(default="")).run(QUESTION, ALICE)
        _print_result(result, as_json=False)
        lines = capsys.readouterr().out.splitlines()
        assert lines[0] == result.answer_note
        assert lines[1] == "Extracted: Employees submit expense reports within 30 days of the end of a trip. [1]"
        assert "  [1] expenses.md  (id expenses)" in lines

    def test_the_api_and_the_chat_endpoint_say_there_was_no_model_answer(self, tmp_path):
        from fastapi.testclient import TestClient

        from tests.support.server_app import auth, build_test_app

        app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Question: Capital of France?"))
        with TestClient(app) as client:
            body = client.post("/v1/query", headers=auth(keys["alice"]), json={
                "question": "Capital of France?", "pipeline": "no_retrieval"}).json()
            assert (body["answer"], body["answer_source"]) == ("", "none")
            assert body["answer_note"].startswith("No answer: the model only repeated")
            assert body["steps"][-1]["kind"] == "grounding"
            chat = client.post("/v1/chat/completions", headers=auth(keys["alice"]), json={
                "model": "no_retrieval", "messages": [{"role": "user", "content": "Capital of France?"}]}).json()
            assert chat["choices"][0]["message"]["content"] == body["answer_note"]
            assert chat["docqa"]["answer_source"] == "none"

    def test_the_ask_page_shows_the_label(self):
        from importlib import resources

        static = resources.files("docqa.server").joinpath("static")
        assert 'id="answer-note"' in static.joinpath("index.html").read_text()
        assert "Extracted, not generated" in static.joinpath("ask.js").read_text()
