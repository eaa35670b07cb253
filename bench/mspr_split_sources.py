"""The split-source experiment: MSPR against `standard` when the evidence is split over two sources.

For each sampled MuSiQue/HotpotQA question, the primary collection (`collection:main` of the store) holds the
question's first supporting passage and every distractor (the whole corpus minus the other supporting passages
of the sampled questions, which go to `collection:archive`); the secondary source is a SearXNG-shaped web search
endpoint on loopback holding the whole corpus (BM25, Haystack's in-memory store). Side by side, per question:
- `standard` on the primary alone (collection filter main);
- `standard` on both (no collection filter: the primary plus the held-out passages, i.e. the whole corpus);
- `mspr` with sources `collection:main,web`, with observation refinement (ORS) and, unless `--no-ors-off`,
  without it (the prompt-word comparison).
Prints supporting-passage recall (over every retrieval of the question; web results are mapped back to their
passages by URL), how often each source was searched, agent steps, LLM calls, prompt words over all LLM calls,
EM/F1 and wall time per question. The LLM is whatever `DOCQA_LLM_*` names (the packaged local model by default).

Usage:
    nice python bench/mspr_split_sources.py --limit 2 --data-dir /tmp/docqa-mspr --max-steps 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

TENANT = "mspr-split"
PRINCIPAL = "bench"
CORPUS_URL = "https://corpus.invalid/"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="musique,hotpotqa")
    parser.add_argument("--limit", type=int, default=2, help="questions per dataset")
    parser.add_argument("--data-dir", type=Path, default=None, help="store (and local LLM) directory to reuse")
    parser.add_argument("--shared-data", type=Path, default=None)
    parser.add_argument("--top-k", type=int, default=3)
    parser.add_argument("--max-steps", type=int, default=4, help="MSPR's AWI")
    parser.add_argument("--max-reviews", type=int, default=1, help="MSPR's SRT")
    parser.add_argument("--no-ors-off", action="store_true", help="skip the MSPR run without refinement")
    parser.add_argument("--strategies", default=None,
                        help="comma-separated subset of standard/primary,standard/both,mspr,mspr/no-ors")
    parser.add_argument("--output", type=Path, default=None, help="one JSON line per question and strategy")
    parser.add_argument("--table", type=Path, nargs="+", default=None,
                        help="only print the table of earlier --output files (runs of different strategies)")
    return parser.parse_args(argv)


class CorpusSearch:
    """The whole corpus behind a SearXNG-shaped endpoint on loopback (BM25; results carry the passage in the URL)."""

    def __init__(self, documents: list[Any], top_k: int) -> None:
        from haystack import Document
        from haystack.components.retrievers.in_memory import InMemoryBM25Retriever
        from haystack.document_stores.in_memory import InMemoryDocumentStore

        store = InMemoryDocumentStore()
        store.write_documents([Document(id=d.id, content=d.content, meta={"title": d.meta.get("title", "")})
                               for d in documents])
        self.retriever = InMemoryBM25Retriever(store, top_k=top_k)
        self.queries = 0
        search = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                query = parse_qs(urlparse(self.path).query).get("q", [""])[0]
                search.queries += 1
                found = search.retriever.run(query=query)["documents"] if query.strip() else []
                body = json.dumps({"results": [
                    {"url": CORPUS_URL + d.id, "title": d.meta.get("title", ""),
                     "content": (d.content or "").split("\n", 1)[-1]} for d in found]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/search"
        # Web documents get ids of their own: map them back to passages through the URL they carry.
        from docqa.components.searxng_web_search import _document

        self.passage_of: dict[str, str] = {}
        for d in documents:
            web = _document({"url": CORPUS_URL + d.id, "title": d.meta.get("title", ""),
                             "content": (d.content or "").split("\n", 1)[-1]})
            if web is not None:
                self.passage_of[web.id] = d.id

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def prepare_store(runtime: Any, dataset: str, shared_data: Path, held_out: set[str]) -> int:
    """The dataset's corpus, embedded once, with `collection` main, or archive for the held-out passages."""
    import dataclasses

    from haystack.document_stores.types import DuplicatePolicy

    try:
        from docqa_eval.datasets import load_corpus
    except ImportError:  # before the evaluation helpers moved out of the package
        from docqa.datasets import load_corpus  # type: ignore[no-redef]

    corpus = load_corpus(dataset, tenant=TENANT, access=["everyone"], data_dir=shared_data)
    store = runtime.document_store
    present = {d.id: d for d in store.filter_documents({"field": "meta.dataset", "operator": "==", "value": dataset})}
    wanted = {d.id: "archive" if d.id in held_out else "main" for d in corpus}
    missing = [d for d in corpus if d.id not in present]
    if missing:
        embedder = runtime.document_embedder()
        embedder.warm_up()
        missing = embedder.run(documents=missing)["documents"]
    moved = [d for d in present.values() if d.meta.get("collection") != wanted[d.id]]
    changed = [dataclasses.replace(d, meta={**d.meta, "collection": wanted[d.id]}) for d in [*missing, *moved]]
    if changed:
        store.write_documents(changed, policy=DuplicatePolicy.OVERWRITE)
    return len(missing)


def measure(result: Any, supporting: tuple[str, ...], passage_of: dict[str, str]) -> dict[str, Any]:
    retrievals = [s for s in result.steps if s.kind == "retrieval"]
    retrieved = {passage_of.get(d["id"], d["id"]) for s in retrievals for d in s.outputs.get("documents", [])}
    prompts = [c["prompt"] for s in result.steps for c in s.outputs.get("llm_calls", [])]
    sources = Counter(s.outputs.get("source", "store") for s in retrievals)
    return {
        "recall": len(set(supporting) & retrieved) / len(supporting),
        "retrievals": len(retrievals),
        "sources": dict(sources),
        "steps": sum(1 for s in result.steps if s.name == "agent"),
        "llm_calls": result.totals.llm_calls,
        "prompt_words": sum(len(p.split()) for p in prompts),
        "stop_reason": result.stop_reason,
        "errors": [s.outputs["error"] for s in retrievals if s.outputs.get("error")],
        "searches": [[s.outputs.get("source", "store"), s.inputs.get("query"), len(s.outputs.get("documents", []))]
                     for s in retrievals],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.table:
        rows: dict[str, list[dict[str, Any]]] = {}
        for path in args.table:
            for line in path.read_text(encoding="utf-8").splitlines():
                row = json.loads(line)
                rows.setdefault(row["strategy"], []).append(row)
        print_table(rows)
        return 0
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    shared_data = args.shared_data or Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (shared_data / "multihop").is_dir():
        print(f"skipped: multi-hop data not found under {shared_data}")
        return 0

    import torch

    torch.set_num_threads(1)

    from docqa.access import AccessScope, collection_filter
    from docqa.pipelines.registry import build_pipeline
    from docqa.runtime import Runtime
    from docqa.settings import Settings
    try:
        from docqa_eval.datasets import load_corpus, load_questions
        from docqa_eval.qa_metrics import best_scores
    except ImportError:  # before the evaluation helpers moved out of the package
        from docqa.datasets import load_corpus, load_questions  # type: ignore[no-redef]
        from docqa.qa_metrics import best_scores  # type: ignore[no-redef]

    datasets = [d.strip() for d in args.datasets.split(",") if d.strip()]
    questions = {d: load_questions(d, shared_data)[: args.limit] for d in datasets}
    held_out = {i for qs in questions.values() for q in qs for i in q.supporting_ids[1:]}
    corpus = [doc for d in datasets for doc in load_corpus(d, tenant=TENANT, data_dir=shared_data)]
    web = CorpusSearch(corpus, args.top_k)
    base = Settings(data_dir=args.data_dir) if args.data_dir is not None else Settings()
    settings = base.model_copy(update={"mspr_sources": "collection:main,web", "web_search_url": web.url})
    runtime = Runtime(settings)
    for dataset in datasets:
        started = time.perf_counter()
        written = prepare_store(runtime, dataset, shared_data, held_out)
        print(f"corpus {dataset}: {written} passages embedded in {time.perf_counter() - started:.1f} s; "
              f"{len(held_out)} supporting passages held out of the primary", flush=True)

    mspr_options = {"top_k": args.top_k, "max_steps": args.max_steps, "max_reviews": args.max_reviews}
    strategies: dict[str, tuple[Any, dict[str, Any] | None]] = {
        "standard/primary": (build_pipeline("standard", runtime, top_k=args.top_k), collection_filter("main")),
        "standard/both": (build_pipeline("standard", runtime, top_k=args.top_k), None),
        "mspr": (build_pipeline("mspr", runtime, **mspr_options), None),
    }
    if not args.no_ors_off:
        strategies["mspr/no-ors"] = (build_pipeline("mspr", runtime, refine=False, **mspr_options), None)
    if args.strategies:
        keep = {name.strip() for name in args.strategies.split(",")}
        strategies = {name: value for name, value in strategies.items() if name in keep}
    scope = AccessScope(TENANT, frozenset({PRINCIPAL}))
    print(f"models {runtime.models_by_role()}; top_k {args.top_k}; AWI {args.max_steps}; SRT {args.max_reviews}",
          flush=True)

    rows = {name: [] for name in strategies}
    output = args.output.open("w", encoding="utf-8") if args.output else None
    try:
        # Round robin over the datasets: a run cut short still has questions of each.
        order = [(d, qs[i]) for i in range(args.limit) for d, qs in questions.items() if i < len(qs)]
        for dataset, q in order:
            dataset_filter = {"field": "meta.dataset", "operator": "==", "value": dataset}
            for name, (pipeline, extra) in strategies.items():
                filters = dataset_filter if extra is None else {"operator": "AND",
                                                                "conditions": [dataset_filter, extra]}
                started = time.perf_counter()
                try:
                    result = pipeline.run(q.question, scope, filters=filters)
                except Exception as exc:  # e.g. an LLM call past DOCQA_LLM_TIMEOUT_S on a loaded machine
                    failed = {"strategy": name, "dataset": dataset, "question": q.question,
                              "failed": f"{type(exc).__name__}: {exc}"[:300], "wall_s": time.perf_counter() - started}
                    print(f"[{dataset} {name}] FAILED {failed['failed']}", file=sys.stderr, flush=True)
                    if output is not None:
                        output.write(json.dumps(failed) + "\n")
                        output.flush()
                    continue
                em, f1 = best_scores(result.answer, q.answers)
                row = {"strategy": name, "dataset": dataset, "question": q.question,
                       **measure(result, q.supporting_ids, web.passage_of),
                       "em": em, "f1": f1, "answer": result.answer[:80],
                       "answer_source": result.answer_source, "wall_s": time.perf_counter() - started}
                rows[name].append(row)
                if output is not None:
                    output.write(json.dumps(row) + "\n")
                    output.flush()
                print(f"[{dataset} {name}] {row['wall_s']:.1f} s recall={row['recall']:.2f} "
                      f"sources={row['sources']} steps={row['steps']} calls={row['llm_calls']} "
                      f"stop={row['stop_reason']} searches={row['searches']} answer={row['answer']!r}",
                      file=sys.stderr, flush=True)
    finally:
        web.close()
        if output is not None:
            output.close()

    print()
    print_table(rows)
    return 0


def print_table(rows: dict[str, list[dict[str, Any]]]) -> None:
    """Means per strategy (all datasets, then each), with searches by source and stop reasons summed."""
    print(f"{'strategy':<28}{'n':>3}{'recall':>8}{'steps':>7}{'calls':>7}{'prompt words':>14}{'EM':>6}{'F1':>6}"
          f"{'wall s':>8}  searches by source; stop reasons; answer source")
    datasets = sorted({r["dataset"] for got in rows.values() for r in got})
    for name, got in rows.items():
        failed = [r for r in got if "failed" in r]
        if failed:
            print(f"{name}: {len(failed)} run(s) failed and are left out: {failed[0]['failed'][:120]}")
        got = [r for r in got if "failed" not in r]
        for dataset in ["all", *datasets] if len(datasets) > 1 else datasets:
            part = [r for r in got if dataset in ("all", r["dataset"])]
            if not part:
                continue
            sources: Counter[str] = Counter()
            for row in part:
                sources.update(row["sources"])
            stops = Counter(str(r["stop_reason"]) for r in part)
            answered = Counter(str(r.get("answer_source")) for r in part)
            print(f"{name + ' ' + dataset:<28}{len(part):>3}{statistics.mean(r['recall'] for r in part):>8.2f}"
                  f"{statistics.mean(r['steps'] for r in part):>7.1f}"
                  f"{statistics.mean(r['llm_calls'] for r in part):>7.1f}"
                  f"{statistics.mean(r['prompt_words'] for r in part):>14.0f}"
                  f"{statistics.mean(r.get('em', 0.0) for r in part):>6.2f}"
                  f"{statistics.mean(r['f1'] for r in part):>6.2f}"
                  f"{statistics.mean(r['wall_s'] for r in part):>8.1f}  {dict(sources)}; {dict(stops)}; "
                  f"{dict(answered)}")


if __name__ == "__main__":
    sys.exit(main())
