"""Orchestration overhead of the Haystack strategies: wall time minus the time spent in the LLM, embedding and
retrieval, per question, with a scripted LLM (no model, no network) over a small embedded store.

    python bench/orchestration_overhead.py                 # no_retrieval and standard, 300 questions each
    python bench/orchestration_overhead.py --questions 1000

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
from docqa.pipelines.baselines import NoRetrievalPipeline, StandardRAGPipeline  # noqa: E402
from docqa.settings import Settings  # noqa: E402
from docqa.stores.factory import build_document_store, build_retrievers  # noqa: E402
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder  # noqa: E402
from tests.support.scripted_chat import ScriptedChatGenerator  # noqa: E402

SCOPE = AccessScope("acme", frozenset({"alice"}))


class Timed:
    """Adds up the time spent in `target.run` (the leaf work that is not orchestration)."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def wrap(self, target: Any) -> Any:
        original = target.run

        def run(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - start

        target.run = run
        return target


def _store(directory: Path) -> Any:
    store = build_document_store(Settings(data_dir=directory))
    docs = [Document(id=f"d{i}", content=f"Policy {i}: hotel limit {100 + i} euros, mileage {i} cents.",
                     meta={"tenant": "acme", "access": ["everyone"], "source": f"d{i}.md"}) for i in range(200)]
    store.write_documents(HashDocumentEmbedder().run(documents=docs)["documents"])
    return store


def measure(name: str, strategy: Any, leaf: Timed, questions: int) -> None:
    strategy.run("warm-up question?", SCOPE)
    leaf.seconds = 0.0
    walls: list[float] = []
    for i in range(questions):
        start = time.perf_counter()
        strategy.run(f"What is the hotel limit of policy {i}?", SCOPE)
        walls.append(time.perf_counter() - start)
    wall = sum(walls)
    overhead = wall - leaf.seconds
    print(f"{name:14} wall {1000 * wall / questions:7.2f} ms/question (median {1000 * statistics.median(walls):.2f})"
          f"  leaf {1000 * leaf.seconds / questions:7.2f} ms  overhead {1000 * overhead / questions:6.2f} ms"
          f"  = {100 * overhead / wall:5.1f}% of wall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=300)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
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


if __name__ == "__main__":
    main()
