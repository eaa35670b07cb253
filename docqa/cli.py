"""The `docqa` command line: ingest, ask, pipelines, demo, and the service commands."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from docqa.access import EVERYONE, AccessScope
from docqa.cli_output import Spinner, announce_embedding_export, quiet_third_party
from docqa.errors import DocqaError
from docqa.ingestion.cli import add_placement_arguments, placement
from docqa.settings import Settings

DEMO_QUESTION = "Within how many days must employees submit their expense reports?"


def _scope(settings: Settings, args: argparse.Namespace) -> AccessScope:
    # The CLI runs on the operator's machine with direct store access; it reads as the principals it is given.
    return AccessScope(tenant=args.tenant or settings.tenant, principals=frozenset(args.principal or []))


def _runtime(settings: Settings) -> Any:
    from docqa.runtime import Runtime

    return Runtime(settings)


def _load_strategy_files(settings: Settings) -> list[str]:
    from docqa.pipelines.yaml_strategies import load_pipelines_dir

    return load_pipelines_dir(settings)


def cmd_pipelines(args: argparse.Namespace, settings: Settings) -> int:
    if getattr(args, "pipelines_command", None) is None and settings.pipelines_dir is None:
        from docqa.strategy_listing import builtin_strategies

        try:
            listed = builtin_strategies()  # read from the sources: no Haystack, no PyTorch, no model
        except LookupError:
            pass
        else:
            for name, description in listed:
                print(f"{name:14} {description}")
            return 0
    from docqa.pipelines.registry import available_pipelines

    errors = _load_strategy_files(settings)
    if getattr(args, "pipelines_command", None) == "export":
        from docqa.pipelines.yaml_strategies import export_strategy

        sys.stdout.write(export_strategy(args.name, _runtime(settings)))
        return 0
    for spec in available_pipelines():
        print(f"{spec.name:14} {spec.description}")
    for error in errors:
        print(f"skipped: {error}", file=sys.stderr)
    return 0


def _print_ingest_report(report: Any) -> None:
    print(report.summary())
    for item in report.failed:
        print(f"  failed: {item.source}: {item.reason}", file=sys.stderr)


def cmd_ingest(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.ingestion.pipeline import ingest_paths

    paths = [Path(p) for p in args.paths]
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise DocqaError(f"no such file or directory: {', '.join(missing)}")
    announce_embedding_export(settings)
    report = ingest_paths(_runtime(settings), paths, progress=not args.quiet, **placement(args, settings))
    _print_ingest_report(report)
    for path in paths:
        if path.is_dir() and ((path / "patients.csv").is_file() or any(path.glob("*.json"))):
            print(f"note: {path} holds patient records (a Synthea CSV export or FHIR bundles), which are not "
                  f"documents: ingest them with `docqa records {path}`", file=sys.stderr)
        elif path.is_file() and path.suffix.lower() == ".json":
            print(f"note: {path} is a FHIR bundle (patient records), not a document: ingest it with "
                  f"`docqa records {path}`", file=sys.stderr)
        elif path.is_file() and path.suffix.lower() == ".csv" and (path.parent / "patients.csv").is_file():
            print(f"note: {path.name} is a table of a Synthea CSV export (patient records): ingest the export's "
                  f"folder with `docqa records {path.parent}`", file=sys.stderr)
    return 0 if not report.failed else 1


def _run_question(settings: Settings, runtime: Any, pipeline_name: str, question: str, scope: AccessScope,
                  asked_by: str, options: dict[str, Any], run_options: dict[str, Any] | None = None,
                  conversation: str | None = None) -> Any:
    """One question through the question service (as the HTTP API asks it); Ctrl-C leaves a cancelled trace.

    :param conversation: a stored conversation of `asked_by` to ask in ("new" starts one).
    :returns: the service's `Answer` (its `result`, and the `conversation_id` the turn was stored in)."""
    from docqa.questions import Ask, Asker, QuestionService
    from docqa.step_tracer import enable_step_tracing

    enable_step_tracing(settings)
    _load_strategy_files(settings)
    ask = Ask(question, strategy=pipeline_name, options=options, inputs=run_options or {},
              conversation_id=conversation)
    return QuestionService(runtime).answer(ask, Asker(scope, asked_by=asked_by))


def _print_result(result: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False))
        return
    _print_answer(result)
    table = result.steps[-1].outputs.get("table") if result.steps and result.steps[-1].kind == "record_table" else None
    if table is not None:
        _print_record_table(table)
    elif result.citations:
        print("\nSources:")
        for number, citation in enumerate(result.citations, 1):
            print(f"  [{number}] {citation.source or citation.document_id}  (id {citation.document_id})")
    totals = result.totals
    trace = f", trace {result.trace_id}" if result.trace_id else ""
    print(
        f"\n{result.pipeline}: {len(result.steps)} steps, {totals.llm_calls} LLM calls, "
        f"{totals.total_tokens} tokens, {totals.wall_time_s:.1f} s{trace}"
    )


def _print_answer(result: Any) -> None:
    """The answer; one the model did not give is labelled, line by line, so it never reads as generated."""
    if _no_readable_passage(result):
        print(result.answer)
        print("(--principal sets the principals the question is asked as; repeat it for several.)")
        return
    if result.answer_source in ("model", "record_table"):
        print(result.answer or "(no answer)")
        if result.answer_note:
            print(f"Note: {result.answer_note}")
        return
    print(result.answer_note or "(no answer)")
    for line in result.answer.splitlines():
        print(f"Extracted: {line}")


def _no_readable_passage(result: Any) -> bool:
    """Whether nothing the caller may read matched: found by the count before the run (its stop reason), or by the
    grounding node when the strategy's own retrieval came back empty (AT-RAG's patient filter, say)."""
    return result.stop_reason == "no_readable_passage" or (result.answer_source == "none" and any(
        step.kind == "grounding" and (step.outputs or {}).get("reason") == "no_readable_passage"
        for step in result.steps))


def _print_record_table(table: dict[str, Any]) -> None:
    """The answer's record table, one line per record, in date order."""
    print(f"\nRecord table ({table['shown']} of {table['total']} records):")
    for row in table["rows"]:
        value = f"{row['value']} {row['unit'] or ''}".strip() if row["value"] is not None else ""
        reference = f"ref {row['reference_range']}" if row["reference_range"] else ""
        cells = [str(row["date"] or "")[:10], row["type"] or "", row["name"] or "", row["code"] or "", value,
                 reference, row["flag"] or "", row["record_id"][:12]]
        print("  " + " | ".join(cells))
    for note in table["notes"]:
        print(f"  note: {note}")


def cmd_ask(args: argparse.Namespace, settings: Settings) -> int:
    options: dict[str, Any] = {}
    if args.top_k is not None:
        options["top_k"] = args.top_k
    run_options = {name: value for name, value in (("as_of", args.as_of), ("patient_id", args.patient),
                                                   ("record_offset", args.record_offset)) if value is not None}
    announce_embedding_export(settings)
    with Spinner(f"answering with {args.pipeline}"):
        answer = _run_question(
            settings, _runtime(settings), args.pipeline, args.question, _scope(settings, args),
            asked_by=args.asked_by, options=options, run_options=run_options, conversation=args.conversation,
        )
    _print_result(answer.result, args.json)
    if args.conversation is not None:
        stored = answer.conversation_id
        print(f"conversation {stored} (continue with --conversation {stored} --asked-by {args.asked_by})" if stored
              else "note: the turn was not stored in the conversation", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest the bundled sample corpus and answer one question over it."""
    from docqa.ingestion.pipeline import ingest_paths

    runtime = _runtime(settings)
    announce_embedding_export(settings)
    corpus = resources.files("docqa").joinpath("sample_corpus")
    with resources.as_file(corpus) as corpus_dir:
        paths = sorted(Path(corpus_dir).glob("*.md"))
        report = ingest_paths(runtime, paths, tenant=settings.tenant, access=[EVERYONE], progress=False)
    _print_ingest_report(report)
    question = args.question or DEMO_QUESTION
    print(f"\nQuestion: {question}\n")
    scope = AccessScope(tenant=settings.tenant)
    with Spinner(f"answering with {args.pipeline}"):
        result = _run_question(settings, runtime, args.pipeline, question, scope, asked_by="cli-demo",
                               options={}).result
    _print_result(result, args.json)
    return 0


def cmd_records(args: argparse.Namespace, settings: Settings) -> int:
    """Ingest patient records: FHIR R4 bundles (files or folders of them) and Synthea CSV export folders.

    Each patient's stored records are replaced whole, so re-ingesting a patient updates in place.
    """
    from docqa.ingestion.records import (
        group_by_patient,
        parse_fhir_bundle,
        parse_synthea_csv_dir,
        write_patient_records,
    )

    tenant = args.tenant or settings.tenant
    access = args.allow or [EVERYONE]
    documents = []
    for path in (Path(p) for p in args.paths):
        if path.is_dir() and (path / "patients.csv").is_file():
            documents += parse_synthea_csv_dir(path, tenant=tenant, access=access)
        elif path.is_dir():
            for bundle in sorted(path.glob("*.json")):
                documents += parse_fhir_bundle(bundle, tenant=tenant, access=access)
        elif path.is_file():
            documents += parse_fhir_bundle(path, tenant=tenant, access=access)
        else:
            raise DocqaError(f"no such file or directory: {path}")
    from docqa.audit.cli import cli_actor
    from docqa.topics import refit_topic_model, schedule_topic_refit, tenant_topic_assigner, topic_model_status

    runtime = _runtime(settings)
    embedder = runtime.document_embedder()
    embedder.warm_up()
    # New records are tagged with the tenant's current topic model (by record type), so it stays current.
    assigner = None if args.refit_topics else tenant_topic_assigner(runtime, tenant)
    written = deleted = 0
    patients = group_by_patient(documents)
    for patient_id, records in patients.items():
        counts = write_patient_records(runtime.document_store, records, tenant=tenant, patient_id=patient_id,
                                       embedder=embedder, topic_assigner=assigner)
        written += counts["written"]
        deleted += counts["deleted"]
    print(f"{len(patients)} patients: {written} records written, {deleted} stale records deleted")
    if args.refit_topics:
        try:
            info = refit_topic_model(runtime, tenant, actor=cli_actor())
        except ValueError as exc:
            print(f"topic model: not refitted ({exc})", file=sys.stderr)
        else:
            print(f"topic model: refitted, version {info.version} ({info.n_topics} topics, {info.mode})")
            return 0
    else:
        # Fitted automatically when the tenant has none yet or its corpus grew enough since the last fit.
        outcome = schedule_topic_refit(runtime, tenant)
        if outcome:
            print(outcome)
    print(topic_model_status(runtime, tenant).message())
    return 0


def cmd_topics(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.audit.cli import cli_actor
    from docqa.topics import refit_topic_model, topic_model_status

    tenant = args.tenant or settings.tenant
    if args.action == "status":
        status = topic_model_status(_runtime(settings), tenant)
        print(json.dumps(status.to_dict()) if args.json else status.message())
        return 0
    try:
        info = refit_topic_model(_runtime(settings), tenant, actor=cli_actor())
    except ValueError as exc:
        raise DocqaError(f"cannot fit a topic model for tenant {tenant!r}: {exc}") from exc
    print(f"topic model version {info.version} for tenant {tenant!r}: {info.n_topics} topics ({info.mode})")
    return 0


def cmd_llm(args: argparse.Namespace, settings: Settings) -> int:
    from docqa.llm import local_server

    if args.action == "start":
        print(local_server.ensure_local_llm(settings))
        return 0
    running = local_server.local_llm_status(settings)
    uptime = f", up {_duration(time.time() - running[1])}" if running and running[1] else ""
    if args.action == "stop":
        stopped = local_server.stop_local_llm(settings)
        if stopped and running:
            print(f"stopped the {running[0]}{uptime}")
        else:
            print(f"no local LLM server was running for {settings.data_dir}")
        return 0
    if settings.llm_base_url:
        print(f"models are served by {settings.llm_base_url} (DOCQA_LLM_BASE_URL), model {settings.llm_model}")
    if running:
        print(f"running: {running[0]}{uptime}; log {local_server.log_path(settings)}")
        return 0
    print(f"not running for {settings.data_dir}" + ("" if settings.llm_base_url else
          ": it starts with the first question that needs the model, or now with `docqa llm start`"))
    return 1


def _duration(seconds: float) -> str:
    minutes, secs = divmod(int(max(0.0, seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min" if hours else f"{minutes} min {secs} s" if minutes else f"{secs} s"


# Commands defined here: running one of them needs none of the optional command modules (some import Haystack).
CORE_COMMANDS = frozenset({"pipelines", "ingest", "ask", "demo", "records", "topics", "llm"})


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The whole parser; for a `command` of CORE_COMMANDS, without the optional commands (a faster start)."""
    parser = argparse.ArgumentParser(prog="docqa", description="Enterprise document question answering.")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress to stderr")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("pipelines", help="list the question-answering strategies (also those of DOCQA_PIPELINES_DIR)")
    p.set_defaults(handler=cmd_pipelines)
    pipelines_sub = p.add_subparsers(dest="pipelines_command")
    export = pipelines_sub.add_parser("export", help="print a strategy as Haystack YAML (Pipeline.dumps())")
    export.add_argument("name", help="strategy name")

    p = sub.add_parser("ingest", help="ingest files (text, Markdown, HTML, PDF, DOCX, PPTX, "
                       "XLSX, CSV, ODT, ODS, ODP, RTF, EML, MSG, PNG, JPEG, TIFF; scans by OCR) synchronously")
    p.add_argument("paths", nargs="+", help="files or directories")
    add_placement_arguments(p)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    p.set_defaults(handler=cmd_ingest)

    p = sub.add_parser("ask", help="answer a question over the ingested documents")
    p.add_argument("question")
    p.add_argument("--pipeline", default="standard", help="strategy name (see `docqa pipelines`)")
    p.add_argument("--json", action="store_true", help="print answer, citations, steps, usage and trace id as JSON")
    p.add_argument("--top-k", type=int, dest="top_k")
    p.add_argument("--tenant")
    p.add_argument("--principal", action="append", help="principal (user or group) to read as (repeatable)")
    p.add_argument("--asked-by", default="cli", dest="asked_by",
                   help="who is asking, for the audit trail (and whose stored conversations --conversation reads)")
    p.add_argument("--conversation", metavar="ID",
                   help="ask in a stored conversation of --asked-by: a follow-up is rewritten against its earlier "
                        "questions and answers ('new' starts one; its id is printed)")
    p.add_argument("--as-of", dest="as_of", help="reference date for time-scoped questions (atrag; default: now)")
    p.add_argument("--patient", help="patient id the question is about (atrag)")
    p.add_argument("--record-offset", type=int, dest="record_offset",
                   help="atrag: records to skip (newest first) to page through a large exact record set")
    p.set_defaults(handler=cmd_ask)

    p = sub.add_parser("demo", help="ingest the bundled sample corpus and answer a question over it")
    p.add_argument("question", nargs="?")
    p.add_argument("--pipeline", default="standard")
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=cmd_demo)

    p = sub.add_parser("records", help="ingest patient records (FHIR R4 bundle files, Synthea CSV folders)")
    p.add_argument("paths", nargs="+")
    p.add_argument("--tenant")
    p.add_argument("--allow", action="append", metavar="PRINCIPAL", help="principal allowed to read (repeatable)")
    p.add_argument("--refit-topics", action="store_true", dest="refit_topics",
                   help="fit a new topic model version for the tenant afterwards (else one is fitted "
                        "automatically when none exists or the corpus grew enough, and the status is reported)")
    p.set_defaults(handler=cmd_records)

    p = sub.add_parser("topics", help="AT-RAG topic model administration")
    p.add_argument("action", choices=["refit", "status"],
                   help="refit: fit a new topic model version and re-tag the tenant's documents; "
                        "status: the versions, whether the latest covers the tenant's documents and when the "
                        "next automatic refit is due")
    p.add_argument("--tenant")
    p.add_argument("--json", action="store_true", help="status as JSON")
    p.set_defaults(handler=cmd_topics)

    p = sub.add_parser("llm", help="manage the embedded local LLM server")
    p.add_argument("action", choices=["start", "stop", "status"],
                   help="start: start it now; stop: stop it and say what was stopped; status: whether it runs "
                        "(exit 0) or not (exit 1), its address, model and uptime")
    p.set_defaults(handler=cmd_llm)

    if command not in CORE_COMMANDS:
        _add_optional_commands(sub)
    return parser


def _add_optional_commands(sub: argparse._SubParsersAction) -> None:
    """Commands owned by the server, audit and ingestion layers register themselves here."""
    hooks = (
        ("docqa.audit.cli", "add_audit_commands"),
        ("docqa.audit.cli", "add_db_commands"),
        ("docqa.feedback", "add_feedback_commands"),
        ("docqa.conversations_store", "add_conversation_commands"),
        ("docqa.server.cli", "add_server_commands"),
        ("docqa.ingestion.cli", "add_ingest_commands"),
        ("docqa.evaluation.cli", "add_eval_commands"),
        ("docqa.store_copy", "add_store_commands"),
        ("docqa.store_commands", "add_snapshot_commands"),
        ("docqa.sources.cli", "add_sources_commands"),
    )
    import importlib

    for module_name, function_name in hooks:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):
                continue
            raise
        getattr(module, function_name)(sub)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Before anything imports the libraries whose warnings and progress bars are hidden without -v.
    quiet_third_party(verbose=any(a in ("-v", "--verbose") for a in argv))
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(levelname)s %(message)s")
    if args.verbose:
        logging.getLogger().setLevel(logging.INFO)
    try:
        settings = Settings()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        print(f"error: invalid setting DOCQA_{field.upper()}: {first['msg']}", file=sys.stderr)
        return 2
    try:
        return int(args.handler(args, settings) or 0)
    except DocqaError as exc:
        print(f"error: {exc.message}" + (f": {exc.detail}" if exc.detail else ""), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
