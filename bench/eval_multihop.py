"""Evaluate registered pipelines side by side on the shared MuSiQue and HotpotQA samples (`docqa eval` underneath).

For each dataset: its corpus passages are read by `docqa.evaluation.corpus` and written once, unchunked and
embedded, into the store under `--data-dir` (the ids its questions' supporting ids name; later runs reuse them);
its questions are read by `docqa.evaluation.datasets` in their published layout; then `docqa.evaluation` runs
them (each restricted to its own dataset's passages) and writes results.jsonl, summary.csv, report.md, plots and
report.html into `--out/<dataset>/`. The table printed per dataset is
summary.csv's; stop reasons, compression (words retrieved vs words given to the generator) and wall p50/p95
included.

The LLM is whatever `DOCQA_LLM_*` names (any OpenAI-compatible endpoint, per-role overrides included); with no
base URL the packaged local model is started under the data dir.

Usage:
    nice python bench/eval_multihop.py --pipelines resp,standard --datasets musique,hotpotqa --limit 10 \\
        --data-dir /tmp/docqa-eval --out /tmp/docqa-eval/runs/today [--resume]
    DOCQA_LLM_BASE_URL=http://vllm:8000/v1 DOCQA_LLM_MODEL=qwen2.5-7b-instruct python bench/eval_multihop.py ...
    docqa eval compare /tmp/docqa-eval/runs/yesterday/musique /tmp/docqa-eval/runs/today/musique
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval is a checkout folder

TENANT = "eval"
PRINCIPAL = "bench"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pipelines", default="resp,standard", help="comma-separated registered pipeline names")
    parser.add_argument("--datasets", "--dataset", default="musique,hotpotqa", help="musique and/or hotpotqa")
    parser.add_argument("--limit", type=int, default=100, help="questions per dataset (the samples hold 100)")
    parser.add_argument("--data-dir", type=Path, default=None, help="store (and local LLM) directory to reuse")
    parser.add_argument("--shared-data", type=Path, default=None, help="the shared data dir (../shared/data)")
    parser.add_argument("--top-k", type=int, default=None, help="documents per retrieval (settings.top_k)")
    parser.add_argument("--max-iterations", type=int, default=None,
                        help="passed to pipelines whose options take max_iterations")
    parser.add_argument("--out", type=Path, required=True, help="report directory (one subfolder per dataset)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run in --out")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")
    shared_data = args.shared_data or Path(__file__).resolve().parents[2] / "shared" / "data"
    if not (shared_data / "multihop").is_dir():
        print(f"skipped: multi-hop data not found under {shared_data} (expected ../shared/data beside the checkout)")
        return 0

    import torch

    torch.set_num_threads(1)

    from docqa.access import AccessScope
    from docqa.evaluation.corpus import read_corpus, write_missing
    from docqa.evaluation.datasets import load_dataset
    from docqa.evaluation.report import markdown_table, write_reports
    from docqa.evaluation.runner import run_evaluation
    from docqa.runtime import Runtime
    from docqa.settings import Settings

    settings = Settings(data_dir=args.data_dir) if args.data_dir is not None else Settings()
    runtime = Runtime(settings)
    names = [n.strip() for n in args.pipelines.split(",") if n.strip()]
    options = {k: v for k, v in (("top_k", args.top_k), ("max_iterations", args.max_iterations)) if v is not None}
    print(f"data dir {settings.data_dir}; models {runtime.models_by_role()}; "
          f"top_k {args.top_k or settings.top_k}; candidates {settings.retrieval_candidates}; "
          f"rrf_k {settings.rrf_k}; llm_max_tokens {settings.llm_max_tokens}; limit {args.limit}", flush=True)
    for dataset in (d.strip() for d in args.datasets.split(",") if d.strip()):
        started = time.perf_counter()
        folder = shared_data / "multihop"
        written = write_missing(runtime, read_corpus(folder / f"{dataset}_train_corpus.json", tenant=TENANT,
                                                     access=["everyone"]))
        print(f"corpus {dataset}: {written} passages written in {time.perf_counter() - started:.1f} s", flush=True)
        out = args.out / dataset
        questions = load_dataset(folder / f"{dataset}_train.json")[: args.limit]
        started = time.perf_counter()
        records = run_evaluation(
            runtime, questions, names, out, scope=AccessScope(TENANT, frozenset({PRINCIPAL})),
            label=f"bench-{dataset}", options=options, resume=args.resume,
            filters={"field": "meta.dataset", "operator": "==", "value": dataset},
        )
        rows = write_reports(out, records)
        print(f"\n{dataset}: {len(questions)} questions x {len(names)} pipelines in "
              f"{time.perf_counter() - started:.0f} s (this invocation); reports in {out}\n")
        print(markdown_table(rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
