"""Evaluation questions from the files users bring: FlashRAG-style JSONL and a simple CSV.

JSONL, one object a line: `question`, `golden_answers` (a list, or `answer` as one string), optional `id`,
`supporting` (ids of the passages that answer it; `supporting_ids` also read), `records` (ids of the records a
record question should return), `short_answers` (ASQA-style alias lists), and run inputs `as_of`/`patient_id`.
A time-scoped record question may name its records with `select` (record type, period, "abnormal", last visit)
instead of ids: the gold set is then computed from the records corpus (see `records`).
ASQA's layout is read too (a `.json` array or JSONL of objects with `qa_pairs[].short_answers` and
`annotations[].long_answer`): the long answers are the references for ROUGE-L, the short answers score
short-answer recall.
CSV: a header with `question` and `answer` columns (`|` separates accepted answers), optional `id`.
HotpotQA, MuSiQue and ODSum files are read in their published layouts (see `formats`), detected from the first
entry or named with `fmt`.

Usage:
    questions = load_dataset(Path("questions.jsonl"))
    questions = load_dataset(Path("hotpotqa_dev.json"), fmt="hotpotqa")
    questions[0].answers, questions[0].supporting_ids
"""

from __future__ import annotations

import csv
import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from docqa.errors import DocqaError
from docqa.evaluation.formats import LAYOUTS, detect_format, question_fields

if TYPE_CHECKING:
    from haystack import Document

FORMATS = ("auto", "flashrag", "asqa", "csv", *LAYOUTS)


@dataclass(frozen=True)
class EvalQuestion:
    id: str
    question: str
    answers: tuple[str, ...] = ()
    supporting_ids: tuple[str, ...] = ()
    record_ids: tuple[str, ...] | None = None
    short_answers: tuple[tuple[str, ...], ...] = ()
    run_inputs: dict[str, Any] = field(default_factory=dict)
    gold_title: str | None = None  # ODSum: the story whose pieces are the supporting passages
    # A record question's `select` (see `records`): its record_ids are computed from the records corpus.
    record_selection: dict[str, Any] | None = None


def question_id(question: str) -> str:
    """A stable id for a question without one, so resumed and compared runs pair the same questions."""
    return hashlib.sha256(question.strip().encode()).hexdigest()[:16]


def load_dataset(path: Path, fmt: str = "auto") -> list[EvalQuestion]:
    """Questions of a `.jsonl`, `.json` (array) or `.csv` file; a bad entry raises DocqaError naming where.

    :param fmt: one of FORMATS; "auto" detects HotpotQA, MuSiQue and ODSum from the first entry and reads
        anything else as FlashRAG-style/ASQA objects (or CSV by its suffix).
    """
    if fmt not in FORMATS:
        raise DocqaError(f"unknown dataset format {fmt!r}: expected one of {', '.join(FORMATS)}")
    if not path.is_file():
        raise DocqaError(f"no such dataset file: {path}")
    suffix = path.suffix.lower()
    if fmt == "csv" or (fmt == "auto" and suffix == ".csv"):
        questions = _read_csv(path)
    elif suffix == ".json":
        questions = _from_entries(_read_json_array(path), fmt)
    elif suffix == ".jsonl":
        questions = _from_entries(read_jsonl(path), fmt)
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
    selection = None
    if raw.get("select") is not None:
        from docqa.evaluation.records import RecordSelection

        if records is not None:
            raise DocqaError(f"{where}: give either `records` or `select`, not both")
        if not isinstance(raw.get("as_of"), str) or not isinstance(raw.get("patient_id"), str):
            raise DocqaError(f"{where}: a record question with `select` needs `as_of` and `patient_id`")
        selection = RecordSelection.from_dict(raw["select"], where).to_dict()
    return EvalQuestion(
        id=str(raw.get("id") or question_id(raw["question"])), question=raw["question"].strip(), answers=answers,
        supporting_ids=supporting, record_ids=None if records is None else _strings(records), short_answers=short,
        run_inputs=run_inputs, gold_title=raw.get("gold_title"), record_selection=selection,
    )


def _from_entries(entries: list[tuple[str, Any]], fmt: str) -> list[EvalQuestion]:
    layout = fmt if fmt in LAYOUTS else None
    if fmt == "auto" and entries:
        layout = detect_format(entries[0][1])
    if layout is None:
        return [_from_object(raw, where) for where, raw in entries]
    return [_from_object(fields, where) for where, raw in entries for fields in question_fields(layout, raw, where)]


def with_story_support(questions: list[EvalQuestion], corpus: list[Document]) -> list[EvalQuestion]:
    """ODSum questions with their gold story's pieces (from the stories read as the corpus) as supporting ids."""
    by_title: dict[str, list[str]] = {}
    for doc in corpus:
        by_title.setdefault(str(doc.meta.get("title", "")), []).append(doc.id)
    return [replace(q, supporting_ids=tuple(by_title.get(q.gold_title, ())))
            if q.gold_title is not None and not q.supporting_ids else q for q in questions]


def read_jsonl(path: Path) -> list[tuple[str, Any]]:
    """Each non-blank line of a JSONL file with its location (`path:line`); a line that is not JSON is an error."""
    entries = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocqaError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        entries.append((f"{path}:{number}", raw))
    return entries


def _read_json_array(path: Path) -> list[tuple[str, Any]]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DocqaError(f"{path}: not JSON ({exc.msg})") from exc
    if not isinstance(raw, list):
        raise DocqaError(f"{path}: expected a JSON array of questions (or use .jsonl, one object a line)")
    return [(f"{path}[{index}]", item) for index, item in enumerate(raw)]


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
