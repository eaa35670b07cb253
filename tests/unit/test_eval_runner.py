"""`docqa eval`'s runner and reports with a scripted LLM over a real embedded store (hash embeddings).

Covers: one audited trace per answer tagged as evaluation, resume after an interrupted run, questions that only
see what their principals may read, and the report files.
"""

from __future__ import annotations

import csv
import json
from dataclasses import asdict

import pytest
from haystack import Document

from docqa.access import AccessScope
from docqa.audit.models import AuditTrace
from docqa.audit.recorder import audit_session
from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.store_retrievers import build_retrievers
from docqa.errors import DocqaError, InvalidOptionsError
from docqa.evaluation.corpus import ensure_corpus
from docqa.evaluation.datasets import EvalQuestion, load_dataset
from docqa.evaluation.report import SUMMARY_COLUMNS, write_reports
from docqa.evaluation.runner import RESULTS_FILE, read_results, run_evaluation
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))
BOARD = AccessScope("acme", frozenset({"board"}))
SECRET = "900 euros"

QUESTIONS = [
    EvalQuestion("q1", "What is the hotel limit per night?", ("180 euros",), supporting_ids=("hotel",)),
    EvalQuestion("q2", "What is the mileage rate per kilometre?", ("0.30 euros",), supporting_ids=("mileage",)),
    EvalQuestion("q3", "What is the board retreat hotel budget?", ("900 euros",), supporting_ids=("secret",)),
    EvalQuestion("q4", "How are taxis reimbursed?", ("at cost",)),
]


def _doc(doc_id: str, text: str, access: tuple[str, ...] = ("everyone",)) -> Document:
    return Document(id=doc_id, content=text, meta={"tenant": "acme", "access": list(access), "source": f"{doc_id}.md"})


class _HashRuntime(Runtime):
    """Retrievers embed queries with the hash embedder (no model to load)."""

    def text_embedder(self):
        return HashTextEmbedder()

    def document_embedder(self):
        return HashDocumentEmbedder()

    def retriever(self, top_k=None):
        bm25, dense = build_retrievers(self.document_store, self.settings)
        return HybridRetriever(bm25, dense, HashTextEmbedder(), top_k=top_k or 2, candidates=10)


ANSWERS = {"hotel limit": "180 euros", "mileage rate": "0.30 euros", "board retreat": "900 euros"}


def _answer(prompt: str) -> str:
    # The right figure only when a document in the prompt holds it, so a leaked document would show.
    for topic, figure in ANSWERS.items():
        if topic in prompt and figure in prompt:
            return f"{figure} [1]"
    return "I do not know."


@pytest.fixture
def settings(tmp_path):
    return Settings(data_dir=tmp_path / "data")


@pytest.fixture
def store(settings):
    store = build_document_store(settings)
    docs = [
        _doc("hotel", "Hotel costs are reimbursed up to 180 euros per night."),
        _doc("mileage", "Mileage is reimbursed at 0.30 euros per kilometre."),
        _doc("secret", "The board retreat hotel budget is 900 euros per night.", access=("board",)),
    ]
    store.write_documents(HashDocumentEmbedder().run(documents=docs)["documents"])
    return store


def _runtime(settings, store, llm) -> Runtime:
    return _HashRuntime(settings, document_store=store, chat_generator_factory=lambda role: llm)


def _stable(records) -> list[dict]:
    """A run's records without what differs between any two runs (wall time, trace ids)."""
    return [{k: v for k, v in asdict(r).items() if k not in ("wall_s", "trace_id")} for r in records]


class TestRun:
    def test_every_answer_has_an_evaluation_trace(self, settings, store, tmp_path):
        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        records = run_evaluation(_runtime(settings, store, llm), QUESTIONS, ["standard", "no_retrieval"],
                                 tmp_path / "run", scope=ALICE, label="nightly", progress=False)

        assert [(r.question_id, r.pipeline) for r in records] == [
            (q.id, p) for q in QUESTIONS for p in ("standard", "no_retrieval")]
        standard = {r.question_id: r for r in records if r.pipeline == "standard"}
        assert standard["q1"].prediction == "180 euros [1]" and standard["q1"].em == 1.0
        assert standard["q1"].support_recall == 1.0 and standard["q4"].support_recall is None
        # What acc and citation precision are computed from travels with the record (see `docqa eval rescore`).
        assert standard["q1"].acc == 1.0 and "hotel" in standard["q1"].cited_ids
        assert standard["q1"].supporting_ids == ["hotel"] and standard["q4"].supporting_ids == []
        assert standard["q1"].citation_precision == 1 / len(standard["q1"].cited_ids)
        assert standard["q1"].llm_calls == 1 and standard["q1"].iterations == 1
        assert all(r.error is None for r in records)
        with audit_session(settings) as session:
            traces = {t.id: t for t in session.query(AuditTrace).all()}
        assert {r.trace_id for r in records} == set(traces)
        assert {t.asked_by for t in traces.values()} == {"eval:nightly"}
        assert traces[standard["q1"].trace_id].answer == "180 euros [1]"
        lines = (tmp_path / "run" / RESULTS_FILE).read_text().splitlines()
        assert len(lines) == 8 and json.loads(lines[0])["trace_id"] == records[0].trace_id

    def test_an_existing_run_is_not_overwritten_without_resume(self, settings, store, tmp_path):
        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        run_evaluation(_runtime(settings, store, llm), QUESTIONS[:1], ["standard"], tmp_path / "run",
                       scope=ALICE, progress=False)
        with pytest.raises(DocqaError, match="--resume"):
            run_evaluation(_runtime(settings, store, llm), QUESTIONS[:1], ["standard"], tmp_path / "run",
                           scope=ALICE, progress=False)

    def test_a_failing_answer_is_recorded_and_the_run_goes_on(self, settings, store, tmp_path):
        def flaky(prompt: str) -> str:
            if "mileage" in prompt:
                raise RuntimeError("model crashed")
            return _answer(prompt)

        llm = ScriptedChatGenerator(rules=[(r".", flaky)])
        records = run_evaluation(_runtime(settings, store, llm), QUESTIONS[:2], ["standard"], tmp_path / "run",
                                 scope=ALICE, progress=False)
        assert records[0].error is None and records[0].em == 1.0
        assert "model crashed" in records[1].error and records[1].em == 0.0
        rows = write_reports(tmp_path / "run", records)
        assert rows[0]["errors"] == 1 and rows[0]["em"] == 0.5


class TestResume:
    def test_resume_after_an_interruption_gives_the_uninterrupted_results(self, settings, store, tmp_path):
        pipelines = ["standard", "no_retrieval"]
        full = run_evaluation(_runtime(settings, store, ScriptedChatGenerator(rules=[(r".", _answer)])),
                              QUESTIONS, pipelines, tmp_path / "full", scope=ALICE, progress=False)

        calls = {"n": 0}

        def interrupted(prompt: str) -> str:
            calls["n"] += 1
            if calls["n"] == 4:
                raise KeyboardInterrupt  # Ctrl-C in the middle of the third answer
            return _answer(prompt)

        out = tmp_path / "resumed"
        with pytest.raises(KeyboardInterrupt):
            run_evaluation(_runtime(settings, store, ScriptedChatGenerator(rules=[(r".", interrupted)])),
                           QUESTIONS, pipelines, out, scope=ALICE, progress=False)
        partial = read_results(out / RESULTS_FILE)
        assert len(partial) == 3
        # A process killed mid-write leaves a torn line behind as well.
        with (out / RESULTS_FILE).open("a") as handle:
            handle.write('{"pipeline": "standard", "question_id": "q')

        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        resumed = run_evaluation(_runtime(settings, store, llm), QUESTIONS, pipelines, out, scope=ALICE,
                                 resume=True, progress=False)
        assert len(llm.calls) == 8 - 3  # only the unanswered pairs ran again
        assert _stable(resumed) == _stable(full)
        assert _stable(read_results(out / RESULTS_FILE)) == _stable(read_results(tmp_path / "full" / RESULTS_FILE))
        assert [r.trace_id for r in resumed[:3]] == [r.trace_id for r in partial]


class TestPermissions:
    def test_questions_see_only_what_their_principals_may_read(self, settings, store, tmp_path):
        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        alice = run_evaluation(_runtime(settings, store, llm), QUESTIONS, ["standard"], tmp_path / "alice",
                               scope=ALICE, progress=False)
        assert all("secret" not in r.retrieved_ids for r in alice)
        assert all(SECRET not in call["prompt"] for call in llm.calls)
        board_question = next(r for r in alice if r.question_id == "q3")
        assert board_question.em == 0.0 and board_question.support_recall == 0.0

        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        board = run_evaluation(_runtime(settings, store, llm), QUESTIONS[2:3], ["standard"], tmp_path / "board",
                               scope=BOARD, progress=False)
        assert "secret" in board[0].retrieved_ids and board[0].em == 1.0 and board[0].support_recall == 1.0


class TestCorpus:
    def test_corpus_passages_are_stored_once_with_their_ids_and_readers(self, settings, store, tmp_path):
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text(
            json.dumps({"id": "taxi", "contents": "Taxi\nTaxis are reimbursed at cost with a receipt."}) + "\n"
            + json.dumps({"id": "parking", "title": "Parking", "text": "Parking is reimbursed up to 20 euros."}) + "\n")
        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        runtime = _runtime(settings, store, llm)
        assert ensure_corpus(runtime, corpus, tenant="acme", access=["alice"]) == 2
        assert ensure_corpus(runtime, corpus, tenant="acme", access=["alice"]) == 0
        (parking,) = store.filter_documents({"field": "id", "operator": "==", "value": "parking"})
        assert parking.content == "Parking\nParking is reimbursed up to 20 euros."
        assert parking.meta["tenant"] == "acme" and parking.meta["access"] == ["alice"]

        question = EvalQuestion("t", "How are taxis reimbursed?", ("at cost",), supporting_ids=("taxi",))
        (alice,) = run_evaluation(runtime, [question], ["standard"], tmp_path / "a", scope=ALICE, progress=False)
        (bob,) = run_evaluation(runtime, [question], ["standard"], tmp_path / "b",
                                scope=AccessScope("acme", frozenset({"bob"})), progress=False)
        assert alice.support_recall == 1.0 and bob.support_recall == 0.0

    def test_a_bad_corpus_line_is_named(self, settings, store, tmp_path):
        corpus = tmp_path / "corpus.jsonl"
        corpus.write_text('{"id": "x"}\n')
        with pytest.raises(DocqaError, match=r"corpus\.jsonl:1"):
            ensure_corpus(_runtime(settings, store, ScriptedChatGenerator()), corpus, tenant="acme")


class TestReports:
    def test_summary_markdown_plots_and_self_contained_html(self, settings, store, tmp_path):
        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        out = tmp_path / "run"
        records = run_evaluation(_runtime(settings, store, llm), QUESTIONS, ["standard", "no_retrieval"], out,
                                 scope=ALICE, progress=False)
        write_reports(out, records)

        with (out / "summary.csv").open() as handle:
            rows = list(csv.DictReader(handle))
        assert tuple(rows[0]) == SUMMARY_COLUMNS and tuple(SUMMARY_COLUMNS[:4]) == ("pipeline", "n", "em", "f1")
        standard = next(r for r in rows if r["pipeline"] == "standard")
        # q1 and q2 right, q3 (not readable by alice) and q4 (no document) wrong
        assert standard["n"] == "4" and float(standard["em"]) == 0.5 and standard["errors"] == "0"
        assert float(standard["support_recall"]) == pytest.approx(2 / 3, abs=1e-4)
        assert next(r for r in rows if r["pipeline"] == "no_retrieval")["support_recall"] == "0.0000"
        for name in ("scores.png", "cost.png", "wall_time.png"):
            assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        report = (out / "report.md").read_text()
        assert "| standard | 4 | 50.0 |" in report
        html = (out / "report.html").read_text()
        assert html.count("data:image/png;base64,") == 3
        assert "http://" not in html and "https://" not in html and 'src="' not in html.replace(
            'src="data:', "")
        assert "<td>standard</td>" in html


class TestDatasets:
    def test_flashrag_jsonl_and_csv(self, tmp_path):
        jsonl = tmp_path / "q.jsonl"
        jsonl.write_text(
            json.dumps({"id": "a", "question": "Who?", "golden_answers": ["Ann", "Anne"], "supporting": ["d1"]})
            + "\n\n" + json.dumps({"question": " When? ", "answer": "1901", "records": ["r1"]}) + "\n")
        first, second = load_dataset(jsonl)
        assert first == EvalQuestion("a", "Who?", ("Ann", "Anne"), ("d1",))
        assert second.question == "When?" and second.answers == ("1901",) and second.record_ids == ("r1",)
        assert len(second.id) == 16  # derived from the question, stable across runs

        table = tmp_path / "q.csv"
        table.write_text("question,answer\nWho founded Acme?,Jane Roe|J. Roe\n", encoding="utf-8")
        (only,) = load_dataset(table)
        assert only.answers == ("Jane Roe", "J. Roe")

    def test_asqa_layout_gives_long_and_short_answers(self, tmp_path):
        asqa = tmp_path / "asqa.json"
        asqa.write_text(json.dumps([{
            "id": "7", "question": "Who has the highest goals in world football?",
            "qa_pairs": [{"question": "men?", "short_answers": ["Daei", "Ali Daei"]},
                         {"question": "women?", "short_answers": ["Christine Sinclair"]}],
            "annotations": [{"knowledge": [], "long_answer": "Ali Daei for men; Christine Sinclair for women."}],
        }]))
        (question,) = load_dataset(asqa)
        assert question.answers == ("Ali Daei for men; Christine Sinclair for women.",)
        assert question.short_answers == (("Daei", "Ali Daei"), ("Christine Sinclair",))

    @pytest.mark.parametrize(("name", "text", "fragment"), [
        ("bad.jsonl", '{"question": "x"}\nnot json\n', "bad.jsonl:2"),
        ("empty.jsonl", '{"question": "  "}\n', "non-empty `question`"),
        ("dup.jsonl", '{"id": "1", "question": "a"}\n{"id": "1", "question": "b"}\n', "duplicate"),
        ("noheader.csv", "q,a\nx,y\n", "header"),
        ("data.txt", "x", "unsupported"),
        ("object.json", '{"question": "x"}', "JSON array"),
    ])
    def test_bad_files_name_the_problem(self, tmp_path, name, text, fragment):
        (tmp_path / name).write_text(text)
        with pytest.raises(DocqaError, match=fragment):
            load_dataset(tmp_path / name)


class TestOptions:
    def test_a_strategy_option_overrides_the_shared_one_for_that_strategy_only(self, settings, store, tmp_path):
        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        records = run_evaluation(_runtime(settings, store, llm), QUESTIONS[:1], ["standard", "resp"],
                                 tmp_path / "run", scope=ALICE, progress=False, options={"top_k": 1},
                                 pipeline_options={"standard": {"top_k": 2}})
        standard = next(r for r in records if r.pipeline == "standard")
        assert len(standard.retrieved_ids) == 2  # both passages alice may read, not the shared top_k of 1
        run = json.loads((tmp_path / "run" / "run.json").read_text())
        assert run["options"] == {"standard": {"top_k": 2}, "resp": {"top_k": 1}}

    def test_an_option_the_strategy_does_not_take_fails_before_any_question(self, settings, store, tmp_path):
        llm = ScriptedChatGenerator(rules=[(r".", _answer)])
        with pytest.raises(InvalidOptionsError, match="max_llm_calls"):
            run_evaluation(_runtime(settings, store, llm), QUESTIONS[:1], ["standard"], tmp_path / "run",
                           scope=ALICE, progress=False, pipeline_options={"standard": {"max_llm_calls": 3}})
        assert not (tmp_path / "run" / RESULTS_FILE).exists()
