"""ODSum-Story side by side: standard, resp and contregen (at several LLM call budgets) on long-form queries.

Corpus: the chunks (`divided_document`) of every ODSum-Story story (or the first `--stories`, always including
the queries' gold stories), each cut into pieces of `--chunk-words` words (ODSum's chunks run to 1,000 words:
three of them overflow a small local model's context, and every strategy gets the same pieces), embedded under
`--data-dir`, one document per piece with id `<title>#<chunk>.<piece>`. Queries: the first query of the first
`--queries` lines of `queries.jsonl`.

Per strategy (and budget) it prints, averaged over the queries:
- recall: the share of the gold story's pieces among the passages the strategy retrieved and kept as context
  (standard and resp: every retrieval's documents; contregen: the passages of its context tree, i.e. kept by
  verification), the chunk-level reading of the paper's retrieval recall on ODSum;
- ROUGE-L: F1 of the longest common subsequence of lower-cased word tokens, the best of the query's
  human reference summaries;
- LLM calls and wall time per query, and the stop reasons.

The LLM is whatever `DOCQA_LLM_*` names; with no base URL the packaged local model is started under the data dir.

Usage:
    nice python bench/contregen_odsum.py --queries 3 --budgets 8,16,32 --data-dir /tmp/docqa-odsum
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

TENANT = "odsum"
PRINCIPAL = "bench"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shared-data", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "data")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--stories", type=int, default=0, help="0: every story")
    parser.add_argument("--budgets", default="8,16,32", help="contregen max_llm_calls values")
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--chunk-words", type=int, default=150)
    parser.add_argument("--max-depth", type=int, default=2)
    parser.add_argument("--max-breadth", type=int, default=3)
    parser.add_argument("--max-document-chars", type=int, default=600, help="passage characters per prompt")
    parser.add_argument("--answer-tokens", type=int, default=128)
    parser.add_argument("--pipelines", default="standard,resp,contregen")
    return parser.parse_args(argv)


def pieces(chunk: str, words: int) -> list[str]:
    tokens = chunk.split()
    return [" ".join(tokens[start:start + words]) for start in range(0, len(tokens), words)]


def load_odsum(folder: Path, chunk_words: int) -> tuple[dict[str, dict[str, str]], list[dict[str, Any]]]:
    """Stories as `{title: {piece id: text}}` and the queries with their gold title and references."""
    stories: dict[str, dict[str, str]] = {}
    for split in ("train", "dev", "test"):
        for line in (folder / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            story = json.loads(line)
            title = story["title"].strip()
            stories[title] = {f"{title}#{i}.{j}": piece for i, chunk in enumerate(story["divided_document"])
                              for j, piece in enumerate(pieces(chunk, chunk_words))}
    queries = []
    for line in (folder / "queries.jsonl").read_text(encoding="utf-8").splitlines():
        first = json.loads(line)[0]
        title = first["title"].strip()
        if title in stories:
            queries.append({"question": first["question_text"], "title": title,
                            "references": [r["response_text"] for r in first["responses"]]})
    return stories, queries


def _tokens(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1 over lower-cased word tokens (LCS by dynamic programming, one row at a time)."""
    a, b = _tokens(prediction), _tokens(reference)
    if not a or not b:
        return 0.0
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b, start=1):
            current.append(previous[j - 1] + 1 if token == other else max(previous[j], current[j - 1]))
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


def context_ids(result: Any) -> set[str]:
    """Ids of the passages a run kept as context: every retrieval's documents, or its context tree's (a tree's
    node searches are retrievals too, but only the passages judged relevant are in the tree)."""
    tree = any(step.kind == "tree_expansion" for step in result.steps)
    ids: set[str] = set()
    for step in result.steps:
        if step.kind == ("tree_expansion" if tree else "retrieval"):
            ids.update(d["id"] for d in step.outputs.get("documents", []) if isinstance(d, dict) and "id" in d)
    return ids


def ensure_corpus(runtime: Any, stories: dict[str, dict[str, str]]) -> int:
    from haystack import Document
    from haystack.document_stores.types import DuplicatePolicy

    store = runtime.document_store
    if store.count_documents() >= sum(len(chunks) for chunks in stories.values()):
        return 0
    documents = [Document(id=piece_id, content=text,
                          meta={"title": title, "source": title, "tenant": TENANT, "access": [PRINCIPAL]})
                 for title, story in stories.items() for piece_id, text in story.items()]
    embedder = runtime.document_embedder()
    embedder.warm_up()
    for start in range(0, len(documents), 64):
        batch = embedder.run(documents=documents[start:start + 64])["documents"]
        store.write_documents(batch, policy=DuplicatePolicy.OVERWRITE)
    return len(documents)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    folder = args.shared_data / "longform" / "odsum_story"
    if not (folder / "queries.jsonl").is_file():
        print(f"skipped: ODSum-Story data not found under {folder}")
        return 0
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    import torch

    torch.set_num_threads(1)
    from docqa.access import AccessScope
    from docqa.errors import DocqaError, LLMUnavailableError
    from docqa.pipelines.registry import build_pipeline
    from docqa.runtime import Runtime
    from docqa.settings import Settings

    stories, queries = load_odsum(folder, args.chunk_words)
    queries = queries[: args.queries]
    if args.stories:
        gold = [q["title"] for q in queries]
        keep = list(dict.fromkeys(gold + list(stories)))[: max(args.stories, len(set(gold)))]
        stories = {title: stories[title] for title in keep}
    base = Settings(data_dir=args.data_dir) if args.data_dir is not None else Settings()
    settings = base.model_copy(update={"max_document_chars": args.max_document_chars})
    runtime = Runtime(settings)
    started = time.perf_counter()
    written = ensure_corpus(runtime, stories)
    print(f"corpus: {len(stories)} stories, {sum(len(c) for c in stories.values())} pieces "
          f"({written} written in {time.perf_counter() - started:.1f} s); models {runtime.models_by_role()}; "
          f"top_k {args.top_k}", flush=True)

    variants: list[tuple[str, str, dict[str, Any]]] = []
    for name in [n.strip() for n in args.pipelines.split(",") if n.strip()]:
        if name == "contregen":
            for budget in [int(b) for b in args.budgets.split(",") if b.strip()]:
                variants.append((f"contregen@{budget}", name, {
                    "top_k": args.top_k, "max_depth": args.max_depth, "max_breadth": args.max_breadth,
                    "max_llm_calls": budget, "answer_tokens": args.answer_tokens}))
        elif name == "standard":
            variants.append((name, name, {"top_k": args.top_k, "max_tokens": args.answer_tokens}))
        else:
            variants.append((name, name, {"top_k": args.top_k}))
    pipelines = {label: build_pipeline(name, runtime, **options) for label, name, options in variants}
    scope = AccessScope(TENANT, frozenset({PRINCIPAL}))
    rows: dict[str, list[dict[str, Any]]] = {label: [] for label in pipelines}
    for number, query in enumerate(queries, 1):
        gold = set(stories[query["title"]])
        for label, pipeline in pipelines.items():
            began = time.perf_counter()
            row: dict[str, Any] = {"error": None}
            try:
                result = pipeline.run(query["question"], scope)
            except LLMUnavailableError:
                raise
            except DocqaError as exc:
                row.update(error=f"{type(exc).__name__}: {exc}", recall=0.0, rouge_l=0.0, calls=0,
                           stop="error")
            else:
                kept = context_ids(result)
                row.update(recall=len(kept & gold) / len(gold),
                           rouge_l=max(rouge_l(result.answer, ref) for ref in query["references"]),
                           calls=result.totals.llm_calls, stop=result.stop_reason or "-",
                           words=len(result.answer.split()), answer=result.answer)
            row["wall_s"] = time.perf_counter() - began
            rows[label].append(row)
            print(f"[{number}/{len(queries)} {label}] {row['wall_s']:.1f} s calls={row['calls']} "
                  f"recall={row['recall']:.2f} rougeL={row['rouge_l']:.3f} stop={row['stop']} "
                  f"answer={row.get('answer', '')[:80]!r}"
                  + (f" error={row['error']}" if row["error"] else ""), file=sys.stderr, flush=True)

    print()
    header = (f"{'strategy':<14} {'n':>2} {'recall':>7} {'ROUGE-L':>8} {'LLM/q':>6} {'s/q':>7} {'words':>6}"
              "  stop reasons")
    print(header)
    print("-" * len(header))
    for label, results in rows.items():
        n = len(results)
        mean = {key: sum(r.get(key) or 0 for r in results) / max(n, 1) for key in ("recall", "rouge_l", "calls",
                                                                                    "wall_s", "words")}
        stops = ", ".join(f"{k}={v}" for k, v in sorted(Counter(r["stop"] for r in results).items()))
        print(f"{label:<14} {n:>2} {mean['recall'] * 100:>6.1f}% {mean['rouge_l']:>8.3f} {mean['calls']:>6.1f} "
              f"{mean['wall_s']:>7.1f} {mean['words']:>6.0f}  {stops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
