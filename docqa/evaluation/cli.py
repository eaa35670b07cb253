"""`docqa eval` (run strategies over a dataset and write the reports) and `docqa eval compare OLD NEW`.

Registered by docqa.cli's optional command hooks; the work is in runner, report and compare.

Usage:
    docqa eval --dataset questions.jsonl --pipelines standard,resp --out runs/2026-11 --principal group:hr
    docqa eval --dataset hotpot_dev.json --corpus hotpot_dev.json --pipelines standard,atrag --out runs/hotpot
    DOCQA_LLM_ROLES__JUDGE__MODEL=big-model docqa eval --dataset q.jsonl --pipelines standard --out r --judge
    docqa eval --dataset q.jsonl --pipelines standard,contregen --out r --option contregen.max_llm_calls=8
    docqa eval compare runs/2026-10 runs/2026-11 --metric f1 --threshold 0.02   # exit 1 on a regression
    docqa eval rescore runs/hotpot --dataset hotpot_dev.json --traces   # acc, citation precision, sources again
    docqa eval --conversations followups.jsonl --corpus hotpot_corpus.json --out runs/followups --recall-k 5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from docqa.access import EVERYONE, AccessScope
from docqa.errors import DocqaError
from docqa.evaluation.datasets import FORMATS
from docqa.settings import Settings

EXIT_REGRESSION = 1


def add_eval_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate strategies side by side on a question set (and compare runs)")
    p.add_argument("--dataset", type=Path,
                   help="questions: FlashRAG-style .jsonl, ASQA, HotpotQA, MuSiQue, ODSum queries.jsonl, "
                        "or a question,answer .csv")
    p.add_argument("--conversations", type=Path,
                   help="a conversations .jsonl (turns with each follow-up's gold standalone question and supporting "
                        "passages): reports the follow-ups' retrieval recall@k (--recall-k, default 5), the "
                        "exact-rewrite rate and the rewrite methods (DOCQA_CONVERSATION_REWRITE)")
    p.add_argument("--format", dest="dataset_format", default="auto", choices=FORMATS,
                   help="the --dataset layout (default: detected from its first entry)")
    p.add_argument("--pipelines", default="standard", help="comma-separated strategy names (see `docqa pipelines`)")
    p.add_argument("--out", type=Path, help="directory for results.jsonl, summary.csv, report.md/.html, plots")
    p.add_argument("--corpus", type=Path,
                   help="passages of the dataset, stored into --tenant first: FlashRAG JSONL (id, contents), a "
                        "HotpotQA or MuSiQue corpus or question file (its contexts/paragraphs), ODSum stories")
    p.add_argument("--allow", action="append", metavar="PRINCIPAL",
                   help="principal allowed to read the --corpus passages (repeatable; default: everyone)")
    p.add_argument("--limit", type=int, help="only the first N questions")
    p.add_argument("--tenant", help="tenant to read as (default: DOCQA_TENANT)")
    p.add_argument("--principal", action="append", help="principal (user or group) to read as (repeatable)")
    p.add_argument("--top-k", type=int, dest="top_k", help="documents per retrieval, for strategies that take it")
    p.add_argument("--option", action="append", default=[], metavar="[PIPELINE.]NAME=VALUE",
                   help="a strategy build option (repeatable; VALUE read as JSON, else as text), e.g. "
                        "contregen.max_llm_calls=8, or max_iterations=2 for every strategy that takes it")
    p.add_argument("--recall-k", type=int, dest="recall_k",
                   help="supporting-passage recall over the first K distinct retrieved passages (default: all)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out, skipping answered pairs")
    p.add_argument("--judge", action="store_true",
                   help="also score each answer 0-10 for correctness, completeness and relevance with the judge "
                        "model (DOCQA_LLM_ROLES__JUDGE__BASE_URL/MODEL/API_KEY, else the global DOCQA_LLM_*)")
    p.add_argument("--label", help="evaluation label in the audit trail (default: the --out folder name)")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_eval)
    eval_sub = p.add_subparsers(dest="eval_command")
    c = eval_sub.add_parser("compare", help="per-metric deltas of two runs with a paired test; exit 1 on a regression")
    c.add_argument("old", type=Path, help="the baseline run's --out directory")
    c.add_argument("new", type=Path, help="the candidate run's --out directory")
    c.add_argument("--metric", default="f1",
                   help="score that gates (em, f1, acc, rouge_l, support_recall, citation_precision, ..., "
                        "judge_correctness, ...)")
    c.add_argument("--threshold", type=float, default=0.02,
                   help="largest tolerated drop of the metric's mean, on its scale (0-1; judge scores 0-10)")
    c.add_argument("--output", type=Path, help="CSV of the deltas (default: NEW/compare.csv)")
    c.set_defaults(handler=cmd_compare)
    r = eval_sub.add_parser("rescore", help="score a run again from its results.jsonl (acc, citation precision, "
                                            "answer sources) and rewrite its summary and reports")
    r.add_argument("run", type=Path, help="the run's --out directory")
    r.add_argument("--dataset", type=Path,
                   help="the run's question file: supporting passage ids for results written before they were kept")
    r.add_argument("--format", dest="dataset_format", default="auto", choices=FORMATS,
                   help="the --dataset layout (default: detected)")
    r.add_argument("--corpus", type=Path,
                   help="ODSum: the stories file, whose pieces are a question's supporting passages")
    r.add_argument("--traces", action="store_true",
                   help="read the cited passage ids of results written before they were kept from the answers' "
                        "audit traces (the configured database)")
    r.set_defaults(handler=cmd_rescore)


def cmd_eval(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.evaluation.datasets import load_dataset, with_story_support
    from docqa.evaluation.report import markdown_table, write_reports
    from docqa.evaluation.runner import run_evaluation
    from docqa.runtime import Runtime

    if args.conversations is not None:
        return cmd_eval_conversations(args, settings)
    if args.dataset is None or args.out is None:
        raise DocqaError("docqa eval needs --dataset FILE (or --conversations FILE) and --out DIR")
    if args.limit is not None and args.limit < 1:
        raise DocqaError("--limit must be at least 1")
    names = [n.strip() for n in args.pipelines.split(",") if n.strip()]
    if not names:
        raise DocqaError("--pipelines names no strategy")
    questions = load_dataset(args.dataset, args.dataset_format)[: args.limit]
    scope = AccessScope(tenant=args.tenant or settings.tenant, principals=frozenset(args.principal or []))
    options: dict[str, Any] = {"top_k": args.top_k} if args.top_k is not None else {}
    pipeline_options = parse_options(args.option, names)
    options.update(pipeline_options.pop("", {}))
    runtime = Runtime(settings)
    if args.corpus is not None:
        from docqa.evaluation.corpus import read_corpus, write_missing
        from docqa.evaluation.records import with_record_sets
        from docqa.topics import refit_if_due

        corpus = read_corpus(args.corpus, tenant=scope.tenant, access=args.allow or [EVERYONE])
        questions = with_record_sets(with_story_support(questions, corpus), args.corpus, corpus)
        written = write_missing(runtime, corpus)
        print(f"corpus {args.corpus}: {written} new passages stored for tenant {scope.tenant!r}", file=sys.stderr)
        # As after an ingestion: AT-RAG narrows by the tenant's topic model, fitted once the corpus is stored.
        refitted = refit_if_due(runtime, scope.tenant) if written else None
        if refitted:
            print(refitted, file=sys.stderr)
    elif any(q.record_selection is not None for q in questions):
        raise DocqaError("record questions (`select`) need --corpus naming the patient records they ask about")
    judge = None
    if args.judge:
        from docqa.evaluation.judge import JUDGE_ROLE, AnswerJudge
        from docqa.llm.client import check_llm_endpoint

        if runtime.settings.endpoint_for(JUDGE_ROLE) == runtime.settings.endpoint_for("generator"):
            print("note: no DOCQA_LLM_ROLES__JUDGE__* set, so the answering model judges its own answers",
                  file=sys.stderr)
        check_llm_endpoint(runtime.settings, JUDGE_ROLE)
        judge = AnswerJudge(chat_generator=runtime.chat_generator(JUDGE_ROLE))
    records = run_evaluation(runtime, questions, names, args.out, scope=scope, label=args.label,
                             options=options, pipeline_options=pipeline_options, resume=args.resume,
                             progress=not args.quiet, recall_k=args.recall_k,
                             judge=judge)
    rows = write_reports(args.out, records)
    print(markdown_table(rows))
    print(f"\nwrote {args.out}/results.jsonl, summary.csv, report.md, report.html and plots")
    return 0


def cmd_eval_conversations(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.evaluation.conversations import (
        evaluate_conversations,
        format_summary,
        load_conversations,
        summarize,
        write_results,
    )
    from docqa.runtime import Runtime

    if args.out is None or args.dataset is not None:
        raise DocqaError("docqa eval --conversations FILE needs --out DIR (and no --dataset)")
    k = args.recall_k or 5
    if k < 1:
        raise DocqaError("--recall-k must be at least 1")
    cases = load_conversations(args.conversations)
    scope = AccessScope(tenant=args.tenant or settings.tenant, principals=frozenset(args.principal or []))
    runtime = Runtime(settings)
    if args.corpus is not None:
        from docqa.evaluation.corpus import read_corpus, write_missing

        written = write_missing(runtime, read_corpus(args.corpus, tenant=scope.tenant, access=args.allow or [EVERYONE]))
        print(f"corpus {args.corpus}: {written} new passages stored for tenant {scope.tenant!r}", file=sys.stderr)
    results = evaluate_conversations(runtime, cases[: args.limit], scope, k)
    summary = summarize(results, k)
    write_results(args.out, results, summary)
    print(format_summary(summary))
    print(f"\nwrote {args.out}/conversations.jsonl and conversation_summary.json")
    return 0


def parse_options(specs: list[str], names: list[str]) -> dict[str, dict[str, Any]]:
    """`[PIPELINE.]NAME=VALUE` options by strategy ("" for those meant for every strategy that takes them).

    A named strategy's options are checked by its options model when it is built (a wrong name or value fails
    before any question runs); shared ones go only to the strategies whose options include them.
    """
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        key, sep, text = spec.partition("=")
        pipeline, dot, name = key.strip().rpartition(".")
        if not sep or not name or (dot and not pipeline):
            raise DocqaError(f"--option {spec!r}: expected [PIPELINE.]NAME=VALUE")
        if pipeline and pipeline not in names:
            raise DocqaError(f"--option {spec!r}: {pipeline!r} is not among --pipelines")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        out.setdefault(pipeline, {})[name] = value
    return out


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.evaluation.compare import compare_runs, format_table, regressions, write_comparison
    from docqa.evaluation.report import JUDGE_METRICS, SCORE_METRICS

    if args.metric not in (*SCORE_METRICS, *JUDGE_METRICS):
        raise DocqaError(f"--metric must be one of {', '.join((*SCORE_METRICS, *JUDGE_METRICS))}")
    if args.threshold < 0:
        raise DocqaError("--threshold must not be negative")
    deltas = compare_runs(args.old, args.new)
    print(format_table(deltas))
    output = args.output or args.new / "compare.csv"
    write_comparison(output, deltas)
    failed = regressions(deltas, args.metric, args.threshold)
    for d in failed:
        print(f"regression: {d.pipeline} {d.metric} {d.old:.4f} -> {d.new:.4f} ({d.delta:+.4f}, "
              f"threshold {args.threshold}; sign test p={d.sign_p:.3f})", file=sys.stderr)
    if not any(d.metric == args.metric for d in deltas):
        raise DocqaError(f"neither run defines {args.metric} for the questions they share")
    return EXIT_REGRESSION if failed else 0


def cmd_rescore(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.evaluation.report import markdown_table, write_reports
    from docqa.evaluation.rescore import cited_ids_from_traces, rescore_run, trace_ids_of

    if not args.run.is_dir():
        raise DocqaError(f"no such run directory: {args.run}")
    if args.corpus is not None and args.dataset is None:
        raise DocqaError("--corpus only completes the questions of --dataset")
    questions = []
    if args.dataset is not None:
        from docqa.evaluation.datasets import load_dataset, with_story_support

        questions = load_dataset(args.dataset, args.dataset_format)
        if args.corpus is not None:
            from docqa.evaluation.corpus import read_corpus

            questions = with_story_support(questions, read_corpus(args.corpus, tenant=settings.tenant))
    cited = None
    if args.traces:
        wanted = trace_ids_of(args.run)
        cited = cited_ids_from_traces(settings, wanted)
        print(f"cited passages of {len(cited)} of {len(wanted)} answers read from their audit traces", file=sys.stderr)
    records = rescore_run(args.run, questions, cited)
    rows = write_reports(args.run, records)
    print(markdown_table(rows))
    print(f"\nrewrote {args.run}/results.jsonl, summary.csv, report.md, report.html and plots")
    return 0
