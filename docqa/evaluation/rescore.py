"""Scoring a finished run again from its results.jsonl: `acc`, citation precision and the answer-source shares of
what users were shown, also for a run written before those were recorded.

A results line holds the displayed answer (`prediction`), `answer_source` and the accepted answers; lines written
since carry the cited passage ids and the question's supporting ids too. For older lines, the supporting ids come
from the run's dataset (`questions`, matched by question id) and the cited ids from each answer's audit trace
(`cited_ids_from_traces`). The scores are recomputed, results.jsonl is rewritten with them (every other field as it
was), and the reports are written again.

Usage:
    records = rescore_run(Path("runs/hotpot"), questions=load_dataset(Path("hotpot_dev.json")),
                          cited=cited_ids_from_traces(settings, trace_ids_of(Path("runs/hotpot"))))
    write_reports(Path("runs/hotpot"), records)
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from docqa.errors import DocqaError
from docqa.evaluation.datasets import EvalQuestion
from docqa.evaluation.runner import RESULTS_FILE, EvalRecord, read_results, score_displayed_answer

# Trace ids per database query: bounded so a large run never builds one huge IN list.
TRACE_BATCH = 500


def rescore_run(run_dir: Path, questions: Sequence[EvalQuestion] = (),
                cited: Mapping[str, list[str]] | None = None) -> list[EvalRecord]:
    """The run's records with supporting ids (from `questions`) and cited ids (from `cited`, by trace id) filled
    where missing and the displayed-answer scores recomputed; results.jsonl is replaced by them."""
    path = run_dir / RESULTS_FILE
    records = read_results(path)
    if not records:
        raise DocqaError(f"no evaluation results in {run_dir} (expected {RESULTS_FILE})")
    by_id = {q.id: q for q in questions}
    for record in records:
        question = by_id.get(record.question_id)
        if question is not None and not record.supporting_ids:
            record.supporting_ids = list(question.supporting_ids)
        if question is not None and not record.answers:
            record.answers = list(question.answers)
        if not record.cited_ids and cited and record.trace_id in cited:
            record.cited_ids = list(cited[record.trace_id])
        if record.error is None:
            score_displayed_answer(record)
    _replace(path, records)
    return records


def trace_ids_of(run_dir: Path) -> list[str]:
    return [r.trace_id for r in read_results(run_dir / RESULTS_FILE) if r.trace_id]


def cited_ids_from_traces(settings: Any, trace_ids: Sequence[str]) -> dict[str, list[str]]:
    """The cited document ids of each answered trace, in citation order, read from the audit database."""
    from sqlalchemy import select
    from sqlalchemy.exc import SQLAlchemyError

    from docqa.audit.models import AuditTrace
    from docqa.db import session_factory

    found: dict[str, list[str]] = {}
    wanted = list(dict.fromkeys(trace_ids))
    try:
        with session_factory(settings)() as session:
            for start in range(0, len(wanted), TRACE_BATCH):
                batch = wanted[start : start + TRACE_BATCH]
                for trace_id, citations in session.execute(
                        select(AuditTrace.id, AuditTrace.citations).where(AuditTrace.id.in_(batch))):
                    ids = [c.get("document_id") for c in citations or [] if isinstance(c, dict)]
                    found[trace_id] = list(dict.fromkeys(str(i) for i in ids if i))
    except SQLAlchemyError as exc:
        raise DocqaError("cannot read the audit traces from the configured database (DOCQA_DATABASE_URL, else "
                         f"DOCQA_DATA_DIR): {type(exc).__name__}") from exc
    return found


def _replace(path: Path, records: Sequence[EvalRecord]) -> None:
    # Written beside the original and renamed over it: an interruption leaves the old file whole.
    temporary = path.with_suffix(".jsonl.tmp")
    with temporary.open("w", encoding="utf-8") as output:
        for record in records:
            output.write(json.dumps(asdict(record), ensure_ascii=False) + "\n")
    os.replace(temporary, path)
