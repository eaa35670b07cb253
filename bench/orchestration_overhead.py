"""Orchestration overhead of the Haystack strategies: wall time minus the time spent in the LLM, embedding and
retrieval, per question, with a scripted LLM (no model, no network) over a small embedded store.

    python bench/orchestration_overhead.py                 # every strategy below, 300 questions each
    python bench/orchestration_overhead.py --questions 1000
    python bench/orchestration_overhead.py --only atrag --questions 100

AT-RAG is measured three ways: a question accepted at the first grade, one graded down three times (three
retrievals, answers and grades, two rewrites), and an exact record question answered with its record table.

The overhead is everything docqa and Haystack add around the leaf work: graph scheduling, the step tracer,
input/output conversion for the steps, prompt rendering, the result and its config hash. Figures are printed,
never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from haystack import Document  # noqa: E402

from docqa.access import AccessScope  # noqa: E402
from docqa.components.cited_answer_generator import CitedAnswerGenerator  # noqa: E402
from docqa.components.hybrid_retriever import HybridRetriever  # noqa: E402
from docqa.components.prompt_templates import load_prompt  # noqa: E402
from docqa.components.store_retrievers import build_retrievers  # noqa: E402
from docqa.pipelines.baselines import NoRetrievalPipeline, StandardRAGPipeline  # noqa: E402
from docqa.pipelines.registry import build_pipeline  # noqa: E402
from docqa.runtime import Runtime  # noqa: E402
from docqa.settings import Settings  # noqa: E402
from docqa.stores.factory import build_document_store  # noqa: E402
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder  # noqa: E402
from tests.support.scripted_chat import ScriptedChatGenerator  # noqa: E402

SCOPE = AccessScope("acme", frozenset({"alice"}))


class Timed:
    """Adds up the time spent in `target.run` (the leaf work that is not orchestration)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, target: Any, method: str = "run") -> Any:
        original = getattr(target, method)

        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        setattr(target, method, run)
        return target


def _store(directory: Path) -> Any:
    store = build_document_store(Settings(data_dir=directory))
    docs = [Document(id=f"d{i}", content=f"Policy {i}: hotel limit {100 + i} euros, mileage {i} cents.",
                     meta={"tenant": "acme", "access": ["everyone"], "source": f"d{i}.md"}) for i in range(200)]
    store.write_documents(HashDocumentEmbedder().run(documents=docs)["documents"])
    return store


def _records() -> list[Document]:
    return [Document(id=f"a1c-{year}", content=f"Hemoglobin A1c {5 + (year % 7) / 3:.1f} %", meta={
        "tenant": "acme", "access": ["everyone"], "source": f"a1c-{year}", "patient_id": "p1",
        "record_type": "lab_result", "code": "4548-4", "title": "Hemoglobin A1c/Hemoglobin.total in Blood",
        "value": round(5 + (year % 7) / 3, 1), "unit": "%", "effective_start_utc": f"{year}-03-01T10:00:00Z"})
        for year in range(2000, 2020)]


class BenchRuntime(Runtime):
    """The runtime AT-RAG is built from, with every leaf (store reads, retrievers, embedders) timed."""

    def __init__(self, directory: Path, leaf: Timed, llm: Any) -> None:
        store = _store(directory)
        store.write_documents(HashDocumentEmbedder().run(documents=_records())["documents"])
        leaf.wrap(store, "filter_documents")
        super().__init__(Settings(data_dir=directory), document_store=store, chat_generator_factory=lambda _: llm)
        self.leaf = leaf

    def text_embedder(self) -> Any:
        return self.leaf.wrap(HashTextEmbedder())

    def document_embedder(self) -> Any:
        # ReSP's repeat guard embeds candidate sub-questions with the deployment's document embedder: leaf work.
        return self.leaf.wrap(HashDocumentEmbedder())

    def retriever(self, top_k: int | None = None) -> Any:
        bm25, dense = build_retrievers(self.document_store, self.settings)
        return HybridRetriever(self.leaf.wrap(bm25), self.leaf.wrap(dense), self.text_embedder(), top_k=top_k or 5)


def _atrag(directory: Path, llm: Any, leaf: Timed, **options: Any) -> Any:
    return build_pipeline("atrag", BenchRuntime(directory, leaf, llm), **options)


def measure(name: str, strategy: Any, leaf: Timed, questions: int, question: str = "What is the hotel limit of "
            "policy {i}?", **inputs: Any) -> None:
    strategy.run("warm-up question?", SCOPE, **inputs)
    leaf.seconds = 0.0
    walls: list[float] = []
    for i in range(questions):
        start = time.perf_counter()
        strategy.run(question.format(i=i), SCOPE, **inputs)
        walls.append(time.perf_counter() - start)
    wall = sum(walls)
    overhead = wall - leaf.seconds
    print(f"{name:14} wall {1000 * wall / questions:7.2f} ms/question (median {1000 * statistics.median(walls):.2f})"
          f"  leaf {1000 * leaf.seconds / questions:7.2f} ms  overhead {1000 * overhead / questions:6.2f} ms"
          f"  = {100 * overhead / wall:5.1f}% of wall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--only", choices=("no_retrieval", "standard", "atrag", "resp"), help="measure one strategy")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.only in (None, "atrag"):
            _measure_atrag(Path(tmp), args.questions)
        if args.only in (None, "resp"):
            _measure_resp(Path(tmp), args.questions)
        if args.only in ("atrag", "resp"):
            return
        leaf = Timed()
        llm = leaf.wrap(ScriptedChatGenerator(default="Up to 180 euros [1]."))
        no_retrieval = NoRetrievalPipeline(llm, prompt_template=load_prompt("no_retrieval_answer"), max_tokens=64,
                                           max_question_chars=2000, model="scripted")
        measure("no_retrieval", no_retrieval, leaf, args.questions)

        leaf = Timed()
        llm = leaf.wrap(ScriptedChatGenerator(default="Up to 180 euros [1]."))
        bm25, dense = build_retrievers(_store(Path(tmp)), Settings())
        retriever = HybridRetriever(leaf.wrap(bm25), leaf.wrap(dense), leaf.wrap(HashTextEmbedder()), top_k=5)
        generator = CitedAnswerGenerator(llm, prompt_template=load_prompt("standard_answer"), max_tokens=64)
        standard = StandardRAGPipeline(retriever, generator, top_k=5, max_question_chars=2000, model="scripted")
        measure("standard", standard, leaf, args.questions)


def _measure_atrag(tmp: Path, questions: int) -> None:
    grounded, useful, rewrite = r"supported by the documents", r"answer the question \(Yes or No\)", r"better search"
    counter = iter(range(10**9))
    cases: list[tuple[str, list[tuple[str, Any]], dict[str, Any], str, dict[str, Any]]] = [
        ("atrag-accepted", [(grounded, "Yes"), (useful, "Yes")], {}, "What is the hotel limit of policy {i}?", {}),
        # The rewrite prompt quotes the grader's feedback, so its rule comes first.
        ("atrag-3-rounds", [(rewrite, lambda _: f'{{"query": "hotel limit {next(counter)}"}}'), (grounded, "No")],
         {"max_iterations": 3}, "What is the hotel limit of policy {i}?", {}),
        ("atrag-records", [(grounded, "Yes"), (useful, "Yes")], {}, "HbA1c since 2005 (question {i})",
         {"as_of": "2020-01-01T00:00:00Z", "patient_id": "p1"}),
    ]
    for index, (name, rules, options, question, inputs) in enumerate(cases):
        leaf = Timed()
        llm = leaf.wrap(ScriptedChatGenerator(rules=rules, default="[1] says so.\nAnswer: Up to 180 euros [1]."))
        strategy = _atrag(tmp / f"atrag-{index}", llm, leaf, **options)
        measure(name, strategy, leaf, questions, question, **inputs)


def _measure_resp(tmp: Path, questions: int) -> None:
    """ReSP at its default bound: three iterations, two plans, judged insufficient until the last (10 LLM calls)."""
    counter = iter(range(10**9))
    rules: list[tuple[str, Any]] = [
        (r"completely and accurately respond to the question", "No"),
        (r"\[Your thought\]", lambda _: f"What is the mileage of policy {next(counter) % 200}?"),
        (r"professional writer", "Policy limits are listed. [DONE]"),
        (r"respond completely and accurately to the question", "Yes, 3 cents."),
    ]
    leaf = Timed()
    llm = leaf.wrap(ScriptedChatGenerator(rules=rules, default="Up to 180 euros"))
    strategy = build_pipeline("resp", BenchRuntime(tmp / "resp", leaf, llm), max_iterations=3, top_k=5)
    measure("resp-3-rounds", strategy, leaf, questions)


if __name__ == "__main__":
    main()
