"""The contract every strategy follows: `run(question, scope)` returns a `PipelineResult`.

A pipeline's steps are recorded from its spans into a `StepRecorder` (`docqa.step_tracer`); `finish` turns the
recorder into the result, its extractive fallback a `docqa.fallback` span (so a step) of the same run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from docqa.access import AccessScope
from docqa.errors import InvalidQuestionError
from docqa.recording import StepRecorder
from docqa.result import Citation, PipelineResult
from docqa.spans import STEP_OUTPUT, step_span
from docqa.step_tracer import record_steps


@runtime_checkable
class QAPipeline(Protocol):
    name: str

    def config(self) -> dict[str, Any]:
        """Everything that shapes the answer (top-k, iterations, models, prompt hashes): hashed for audit."""
        ...

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        ...


class ValidatedQuestion(str):
    """A question `validate_question` accepted, with the length limit it was checked against: a strategy run given
    one does not check it again (the question service validates once per request)."""

    max_chars: int

    def __new__(cls, text: str, max_chars: int) -> ValidatedQuestion:
        checked = super().__new__(cls, text)
        checked.max_chars = max_chars
        return checked


def is_validated(question: str, max_chars: int) -> bool:
    """True when `question` was validated against a limit no looser than `max_chars`."""
    return isinstance(question, ValidatedQuestion) and question.max_chars <= max_chars


def validate_question(question: str, max_chars: int) -> ValidatedQuestion:
    """Strip and check a question; raises `InvalidQuestionError` with a one-line reason."""
    if not isinstance(question, str):
        raise InvalidQuestionError("question must be a string")
    cleaned = question.strip()
    if not cleaned:
        raise InvalidQuestionError("question is empty")
    if len(cleaned) > max_chars:
        raise InvalidQuestionError(f"question is {len(cleaned)} characters long; the limit is {max_chars}")
    return ValidatedQuestion(cleaned, max_chars)


@dataclass(frozen=True)
class GroundingOutcome:
    """What a strategy's grounding node decided: the source of the shown answer, its note and the reason."""

    answer_source: str
    answer_note: str | None = None
    reason: str | None = None


def config_hash(config: dict[str, Any]) -> str:
    canonical = json.dumps(config, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()


def finish(
    pipeline: QAPipeline,
    question: str,
    answer: str,
    citations: list[Citation],
    recorder: StepRecorder,
    stop_reason: str | None = None,
    grounding: GroundingOutcome | None = None,
    passages: Sequence[Any] = (),
) -> PipelineResult:
    """The result of a run. With `grounding` (the strategy's grounding node ran) its decision stands, refined only
    by what the node cannot see: a reply the generator dropped as an echo. Without it, an unusable answer is
    replaced by sentences quoted from `passages` (what the run's outputs hold)."""
    config = pipeline.config()
    with record_steps(recorder):
        if grounding is not None:
            answer, citations, source, note = _grounded_answer(question, answer, citations, recorder, grounding)
        else:
            answer, citations, source, note = _usable_answer(question, answer, citations, recorder, passages)
    return PipelineResult(
        pipeline=pipeline.name,
        question=question,
        answer=answer,
        citations=citations,
        answer_source=source,
        answer_note=note,
        steps=recorder.steps,
        totals=recorder.totals(),
        stop_reason=stop_reason,
        config={**config, "config_hash": config_hash(config)},
    )


def _usable_answer(question: str, answer: str, citations: list[Citation], recorder: StepRecorder,
                   passages: Sequence[Any]) -> tuple[str, list[Citation], str, str | None]:
    """The model's answer when usable; else the best-matching sentences of `passages`, labelled as extracted.

    An `answer_fallback` step (a span) so the trace shows what the model said and what replaced it.
    """
    from docqa import extractive_fallback as fallback

    # Record-table answers are built from records, not generated: nothing to fall back from.
    reason = None if any(c.record is not None for c in citations) else fallback.unusable_reason(
        question, answer, recorder.steps)
    if reason is None:
        return answer, citations, fallback.ANSWER_SOURCE_MODEL, None
    with step_span("fallback", "answer_fallback", inputs={"reason": reason, "model_answer": answer}) as span:
        extraction = fallback.extract_answer(question, fallback.passage_pool(passages))
        span.set_content_tag(STEP_OUTPUT, _sentences(extraction))
    if not extraction.text:
        note = f"No answer: {fallback.reason_text(reason)}, and no retrieved passage matches the question."
        return "", [], fallback.ANSWER_SOURCE_NONE, note
    note = (f"No answer from the model ({fallback.reason_text(reason)}). These sentences are quoted from the "
            "retrieved passages, not generated.")
    return extraction.text, citations_from_documents(extraction.documents), fallback.ANSWER_SOURCE_EXTRACTED, note


def _grounded_answer(question: str, answer: str, citations: list[Citation], recorder: StepRecorder,
                     grounding: GroundingOutcome) -> tuple[str, list[Citation], str, str | None]:
    from docqa import extractive_fallback as fallback
    from docqa.components.grounding_checker import fallback_note

    # The node saw an empty answer; a model that did reply was only echoing the prompt (the generator dropped it).
    if grounding.reason == fallback.REASON_EMPTY and grounding.answer_source in (
            fallback.ANSWER_SOURCE_EXTRACTED, fallback.ANSWER_SOURCE_NONE) and fallback.unusable_reason(
            question, "", recorder.steps) == fallback.REASON_ECHO:
        grounding = GroundingOutcome(grounding.answer_source, fallback_note(
            fallback.REASON_ECHO, extracted=grounding.answer_source == fallback.ANSWER_SOURCE_EXTRACTED),
            fallback.REASON_ECHO)
    return answer, citations, grounding.answer_source, grounding.answer_note


def _sentences(extraction: Any) -> dict[str, Any]:
    return {"sentences": [{"sentence": s, "document_id": d.id, "score": round(score, 3)}
                          for s, d, score in extraction.sentences]}


def citations_from_documents(documents: list[Any], snippet_chars: int = 200) -> list[Citation]:
    return [
        Citation(
            document_id=doc.id,
            source=(doc.meta or {}).get("source") or (doc.meta or {}).get("title"),
            score=doc.score,
            snippet=(doc.content or "")[:snippet_chars],
            location=(doc.meta or {}).get("location"),
            ocr=(doc.meta or {}).get("ocr") is True,
        )
        for doc in documents
    ]
