"""Evaluation questions from the files users bring: FlashRAG-style JSONL and a simple CSV.

JSONL, one object a line: `question`, `golden_answers` (a list, or `answer` as one string), optional `id`,
`supporting` (ids of the passages that answer it; `supporting_ids` also read), `records` (ids of the records a
record question should return), `short_answers` (ASQA-style alias lists), and run inputs `as_of`/`patient_id`.
ASQA's layout is read too (a `.json` array or JSONL of objects with `qa_pairs[].short_answers` and
`annotations[].long_answer`): the long answers are the references for ROUGE-L, the short answers score
short-answer recall.
CSV: a header with `question` and `answer` columns (`|` separates accepted answers), optional `id`.

Usage:
    questions = load_dataset(Path("questions.jsonl"))
    questions[0].answers, questions[0].supporting_ids
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docqa.errors import DocqaError


@dataclass(frozen=True)
class EvalQuestion:
    id: str
    question: str
    answers: tuple[str, ...] = ()
    supporting_ids: tuple[str, ...] = ()
    record_ids: tuple[str, ...] | None = None
    short_answers: tuple[tuple[str, ...], ...] = ()
    run_inputs: dict[str, Any] = field(default_factory=dict)


def question_id(question: str) -> str:
    """A stable id for a question without one, so resumed and compared runs pair the same questions."""
    return hashlib.sha256(question.strip().encode()).hexdigest()[:16]


def load_dataset(path: Path) -> list[EvalQuestion]:
    """Questions of a `.jsonl`, `.json` (array) or `.csv` file; a bad entry raises DocqaError naming where."""
    if not path.is_file():
        raise DocqaError(f"no such dataset file: {path}")
    suffix = path.suffix.lower()
    if suffix == ".json":
        questions = _read_json_array(path)
    elif suffix == ".jsonl":
        questions = _read_jsonl(path)
    elif suffix == ".csv":
        questions = _read_csv(path)
    else:
        raise DocqaError(f"unsupported dataset format {suffix or '(none)'!r}: expected .jsonl, .json or .csv")
    ids = [q.id for q in questions]
    duplicates = sorted({i for i in ids if ids.count(i) > 1}) if len(set(ids)) != len(ids) else []
    if duplicates:
        raise DocqaError(f"{path}: duplicate question ids: {', '.join(duplicates[:5])}")
    return questions


def _strings(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(str(v) for v in value)


def _from_object(raw: Any, where: str) -> EvalQuestion:
    if not isinstance(raw, dict) or not isinstance(raw.get("question"), str) or not raw["question"].strip():
        raise DocqaError(f"{where}: expected an object with a non-empty `question`")
    answers = _strings(raw.get("golden_answers", raw.get("answer")))
    if not answers and isinstance(raw.get("annotations"), list):  # ASQA: the annotators' long answers
        answers = tuple(a["long_answer"] for a in raw["annotations"] if isinstance(a, dict) and a.get("long_answer"))
    supporting = _strings(raw.get("supporting", raw.get("supporting_ids")))
    records = raw.get("records")
    short = tuple(_strings(group) for group in raw.get("short_answers") or [])
    if not short and isinstance(raw.get("qa_pairs"), list):  # ASQA: one alias list per disambiguation
        short = tuple(_strings(p.get("short_answers")) for p in raw["qa_pairs"] if isinstance(p, dict))
    run_inputs = {key: raw[key] for key in ("as_of", "patient_id") if raw.get(key) is not None}
    return EvalQuestion(
        id=str(raw.get("id") or question_id(raw["question"])), question=raw["question"].strip(), answers=answers,
        supporting_ids=supporting, record_ids=None if records is None else _strings(records), short_answers=short,
        run_inputs=run_inputs,
    )


def _read_jsonl(path: Path) -> list[EvalQuestion]:
    questions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocqaError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        questions.append(_from_object(raw, f"{path}:{number}"))
    return questions


def _read_json_array(path: Path) -> list[EvalQuestion]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DocqaError(f"{path}: not JSON ({exc.msg})") from exc
    if not isinstance(raw, list):
        raise DocqaError(f"{path}: expected a JSON array of questions (or use .jsonl, one object a line)")
    return [_from_object(item, f"{path}[{index}]") for index, item in enumerate(raw)]


def _read_csv(path: Path) -> list[EvalQuestion]:
    with path.open(encoding="utf-8-sig", newline="") as handle:
        reader = csv.DictReader(handle)
        if not reader.fieldnames or "question" not in reader.fieldnames:
            raise DocqaError(f"{path}: expected a header with `question` and `answer` columns")
        questions = []
        for number, row in enumerate(reader, 2):
            answers = [a.strip() for a in (row.get("answer") or "").split("|") if a.strip()]
            questions.append(_from_object({"id": row.get("id"), "question": row.get("question") or "",
                                           "golden_answers": answers}, f"{path}:{number}"))
    return questions
