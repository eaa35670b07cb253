"""Evaluate registered pipelines side by side on the shared MuSiQue and HotpotQA samples.

Prints, per pipeline and dataset: average iterations (retrieval rounds), LLM calls per question, words
retrieved vs words passed to the generator (and their ratio, the compression), supporting-passage recall over
every retrieval of a question, wall time per question, EM/F1 (HotpotQA/SQuAD normalisation), errors and stop
reasons. Every pipeline gets the same retrieval settings (top-k, candidates, RRF k, embedder, store).

The corpus passages are written once, unchunked and embedded, into the store under `--data-dir` (ids from
`docqa_eval.datasets`, so recall is checked against the gold passage ids); later runs reuse them. Each question is
restricted to its own dataset's passages by a metadata filter passed through the pipeline's `filters`.

The LLM is whatever `DOCQA_LLM_*` names (any OpenAI-compatible endpoint, per-role overrides included); with no
base URL the packaged local model is started under the data dir.

Usage:
    nice python bench/eval_multihop.py --pipelines resp,standard --datasets musique,hotpotqa --limit 10 \\
        --data-dir /tmp/docqa-eval --output /tmp/docqa-eval/results.jsonl
    DOCQA_LLM_BASE_URL=http://vllm:8000/v1 DOCQA_LLM_MODEL=qwen2.5-7b-instruct python bench/eval_multihop.py ...
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

TENANT = "eval"
PRINCIPAL = "bench"


@dataclass
class QuestionRecord:
    pipeline: str
    dataset: str
    question_id: str
    question: str
    answers: list[str]
    prediction: str = ""
    em: float = 0.0
    f1: float = 0.0
    iterations: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    words_retrieved: int = 0
    words_to_generator: int = 0
    recall: float | None = None
    wall_s: float = 0.0
    stop_reason: str | None = None
    error: str | None = None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", default="resp,standard", help="comma-separated registered pipeline names")
    parser.add_argument("--datasets", "--dataset", default="musique,hotpotqa", help="musique and/or hotpotqa")
    parser.add_argument("--limit", type=int, default=100, help="questions per dataset (the samples hold 100)")
    parser.add_argument("--data-dir", type=Path, default=None, help="store (and local LLM) directory to reuse")
    parser.add_argument("--shared-data", type=Path, default=None, help="the shared data dir (../shared/data)")
    parser.add_argument("--top-k", type=int, default=None, help="documents per retrieval (settings.top_k)")
    parser.add_argument("--max-iterations", type=int, default=None,
                        help="passed to pipelines whose builder takes max_iterations")
    parser.add_argument("--output", type=Path, default=None, help="write one JSON line per question here")
    parser.add_argument("--table-from", type=Path, default=None,
                        help="print the table of an earlier --output file (complete or not) and exit")
    return parser.parse_args(argv)


def default_shared_data() -> Path:
    return Path(__file__).resolve().parents[2] / "shared" / "data"


def ensure_corpus(runtime: Any, dataset: str, shared_data: Path) -> int:
    """Write the dataset's passages (embedded) into the store unless already there; returns the count written."""
    from haystack.document_stores.types import DuplicatePolicy

    from docqa_eval.datasets import load_corpus

    corpus = load_corpus(dataset, tenant=TENANT, access=["everyone"], data_dir=shared_data)
    store = runtime.document_store
    present = {d.id for d in store.filter_documents({"field": "meta.dataset", "operator": "==", "value": dataset})}
    missing = [d for d in corpus if d.id not in present]
    if missing:
        embedder = runtime.document_embedder()
        embedder.warm_up()
        store.write_documents(embedder.run(documents=missing)["documents"], policy=DuplicatePolicy.OVERWRITE)
    return len(missing)


class WordCounter:
    """Words of stored documents by id, fetched once each (steps only keep snippets)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.words: dict[str, int] = {}

    def __call__(self, ids: list[str]) -> int:
        missing = sorted({i for i in ids if i not in self.words})
        if missing:
            for doc in self.store.filter_documents({"field": "id", "operator": "in", "value": missing}):
                self.words[doc.id] = len((doc.content or "").split())
        return sum(self.words.get(i, 0) for i in ids)


def measure(result: Any, supporting_ids: tuple[str, ...], words_of: WordCounter) -> dict[str, Any]:
    """Figures read from a PipelineResult's steps, whatever the strategy."""
    retrievals = [s for s in result.steps if s.kind == "retrieval"]
    retrieved = [d["id"] for s in retrievals for d in s.outputs.get("documents", [])]
    generations = [s for s in result.steps if s.kind == "generation"]
    calls = generations[-1].outputs.get("llm_calls", []) if generations else []
    prompt = calls[-1]["prompt"] if calls else ""
    recall = len(set(supporting_ids) & set(retrieved)) / len(supporting_ids) if supporting_ids else None
    return {
        "iterations": len(retrievals),
        "llm_calls": result.totals.llm_calls,
        "prompt_tokens": result.totals.prompt_tokens,
        "completion_tokens": result.totals.completion_tokens,
        "words_retrieved": words_of(retrieved),
        "words_to_generator": len(prompt.split()),
        "recall": recall,
        "stop_reason": result.stop_reason,
    }


def builder_options(name: str, top_k: int | None, max_iterations: int | None) -> dict[str, Any]:
    from docqa.pipelines.registry import available_pipelines

    spec = next((s for s in available_pipelines() if s.name == name), None)
    accepted = inspect.signature(spec.builder).parameters if spec is not None else {}
    options: dict[str, Any] = {}
    if top_k is not None and "top_k" in accepted:
        options["top_k"] = top_k
    if max_iterations is not None and "max_iterations" in accepted:
        options["max_iterations"] = max_iterations
    return options


def summarize(records: list[QuestionRecord]) -> dict[str, Any]:
    ok = [r for r in records if r.error is None]
    n = len(ok)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else float("nan")

    retrieved = sum(r.words_retrieved for r in ok)
    to_generator = sum(r.words_to_generator for r in ok)
    return {
        "n": n,
        "errors": len(records) - n,
        "iterations": mean([r.iterations for r in ok]),
        "llm_calls": mean([r.llm_calls for r in ok]),
        "words_retrieved": mean([r.words_retrieved for r in ok]),
        "words_to_generator": mean([r.words_to_generator for r in ok]),
        "compression": retrieved / to_generator if to_generator else float("nan"),
        "recall": mean([r.recall for r in ok if r.recall is not None]),
        "wall_s": mean([r.wall_s for r in ok]),
        "em": mean([r.em for r in ok]),
        "f1": mean([r.f1 for r in ok]),
        "stop_reasons": dict(Counter(r.stop_reason or "-" for r in ok)),
    }


def interleave(by_dataset: dict[str, list[Any]]) -> list[tuple[str, Any]]:
    """(dataset, question) pairs taking one question from each dataset in turn."""
    work: list[tuple[str, Any]] = []
    longest = max((len(qs) for qs in by_dataset.values()), default=0)
    for index in range(longest):
        work.extend((dataset, qs[index]) for dataset, qs in by_dataset.items() if index < len(qs))
    return work


def table_from(path: Path) -> list[tuple[str, str, dict[str, Any]]]:
    """Rows of a results file; only questions every pipeline finished count, so the comparison stays paired."""
    records = [QuestionRecord(**json.loads(line)) for line in path.read_text(encoding="utf-8").splitlines() if line]
    pipelines = list(dict.fromkeys(r.pipeline for r in records))
    datasets = list(dict.fromkeys(r.dataset for r in records))
    done = Counter((r.dataset, r.question_id) for r in records)
    paired = [r for r in records if done[(r.dataset, r.question_id)] == len(pipelines)]
    return [(name, dataset, summarize([r for r in paired if r.pipeline == name and r.dataset == dataset]))
            for dataset in datasets for name in pipelines]


def print_table(rows: list[tuple[str, str, dict[str, Any]]]) -> None:
    header = (f"{'pipeline':<12} {'dataset':<9} {'n':>3} {'iters':>5} {'LLM/q':>6} {'words ret/q':>11} "
              f"{'words gen/q':>11} {'compr.':>6} {'recall':>6} {'s/q':>6} {'EM':>5} {'F1':>5} {'err':>3}")
    print(header)
    print("-" * len(header))
    for pipeline, dataset, s in rows:
        print(f"{pipeline:<12} {dataset:<9} {s['n']:>3} {s['iterations']:>5.2f} {s['llm_calls']:>6.2f} "
              f"{s['words_retrieved']:>11.1f} {s['words_to_generator']:>11.1f} {s['compression']:>5.2f}x "
              f"{s['recall'] * 100:>5.1f}% {s['wall_s']:>6.1f} {s['em'] * 100:>5.1f} {s['f1'] * 100:>5.1f} "
              f"{s['errors']:>3}")
    print()
    for pipeline, dataset, s in rows:
        reasons = ", ".join(f"{k}={v}" for k, v in sorted(s["stop_reasons"].items()))
        print(f"stop reasons {pipeline}/{dataset}: {reasons}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table_from is not None:
        print_table(table_from(args.table_from))
        return 0
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    shared_data = args.shared_data or default_shared_data()
    if not (shared_data / "multihop").is_dir():
        print(f"skipped: multi-hop data not found under {shared_data} (expected ../shared/data beside the checkout)")
        return 0

    import torch

    torch.set_num_threads(1)

    from docqa.access import AccessScope
    from docqa.errors import DocqaError, LLMUnavailableError
    from docqa.pipelines.registry import build_pipeline
    from docqa.runtime import Runtime
    from docqa.settings import Settings
    from docqa_eval.datasets import load_questions
    from docqa_eval.qa_metrics import best_scores

    settings = Settings(data_dir=args.data_dir) if args.data_dir is not None else Settings()
    runtime = Runtime(settings)
    names = [n.strip() for n in args.pipelines.split(",") if n.strip()]
    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    scope = AccessScope(TENANT, frozenset({PRINCIPAL}))

    print(f"data dir {settings.data_dir}; models {runtime.models_by_role()}; "
          f"top_k {args.top_k or settings.top_k}; candidates {settings.retrieval_candidates}; "
          f"rrf_k {settings.rrf_k}; llm_max_tokens {settings.llm_max_tokens}; limit {args.limit}", flush=True)
    for dataset in datasets:
        started = time.perf_counter()
        written = ensure_corpus(runtime, dataset, shared_data)
        print(f"corpus {dataset}: {written} passages written in {time.perf_counter() - started:.1f} s", flush=True)

    pipelines = {name: build_pipeline(name, runtime, **builder_options(name, args.top_k, args.max_iterations))
                 for name in names}
    words_of = WordCounter(runtime.document_store)
    work = interleave({d: load_questions(d, shared_data)[: args.limit] for d in datasets})
    records: list[QuestionRecord] = []
    output = args.output.open("w", encoding="utf-8") if args.output else None
    try:
        for number, (dataset, q) in enumerate(work, 1):
            filters = {"field": "meta.dataset", "operator": "==", "value": dataset}
            # Pipelines take turns on each question, so a machine whose load drifts treats them alike.
            for name, pipeline in pipelines.items():
                record = QuestionRecord(name, dataset, q.id, q.question, list(q.answers))
                started = time.perf_counter()
                try:
                    result = pipeline.run(q.question, scope, filters=filters)
                except LLMUnavailableError:
                    raise
                except (DocqaError, ValueError) as exc:
                    record.error = f"{type(exc).__name__}: {exc}"
                else:
                    record.prediction = result.answer
                    record.em, record.f1 = best_scores(result.answer, q.answers)
                    for key, value in measure(result, q.supporting_ids, words_of).items():
                        setattr(record, key, value)
                record.wall_s = time.perf_counter() - started
                records.append(record)
                if output is not None:
                    output.write(json.dumps(asdict(record)) + "\n")
                    output.flush()
                print(f"[{number}/{len(work)} {name}/{dataset}] {record.wall_s:.1f} s "
                      f"iters={record.iterations} calls={record.llm_calls} stop={record.stop_reason} "
                      f"f1={record.f1:.2f} answer={record.prediction[:60]!r}"
                      + (f" error={record.error}" if record.error else ""), file=sys.stderr, flush=True)
    finally:
        if output is not None:
            output.close()
    rows = [(name, dataset, summarize([r for r in records if r.pipeline == name and r.dataset == dataset]))
            for dataset in datasets for name in names]
    print()
    print_table(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
