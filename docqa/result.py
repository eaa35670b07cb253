"""The pipeline contract: what every strategy returns, whatever its control flow."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class LLMUsage:
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: LLMUsage) -> None:
        self.calls += other.calls
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens

    def to_dict(self) -> dict[str, int]:
        return {**asdict(self), "total_tokens": self.total_tokens}


@dataclass
class Step:
    """One thing a pipeline did: a retrieval, a summary, a judgement, a generation ...

    `index` is the position in the run; `parent` is the index of the enclosing step for tree-shaped
    strategies (None at the top level).
    """

    index: int
    kind: str
    name: str
    inputs: dict[str, Any] = field(default_factory=dict)
    outputs: dict[str, Any] = field(default_factory=dict)
    started_at: float = 0.0
    duration_s: float = 0.0
    llm: LLMUsage = field(default_factory=LLMUsage)
    parent: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "name": self.name,
            "parent": self.parent,
            "inputs": self.inputs,
            "outputs": self.outputs,
            "started_at": self.started_at,
            "duration_s": self.duration_s,
            "llm": self.llm.to_dict(),
            "error": self.error,
        }


@dataclass
class Citation:
    document_id: str
    source: str | None = None
    score: float | None = None
    snippet: str = ""
    # For a record in an answer's record table: its row (date, type, name, code, value, unit, range, flag ...).
    record: dict[str, Any] | None = None
    # Where the passage stands in its file ("page 3", "slide 2", "sheet Q3, rows 2-41", "attachment a.pdf,
    # page 1"), and whether its text was recognised from a scan by OCR (the reader should check the scan).
    location: str | None = None
    ocr: bool = False

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key, empty in (("record", None), ("location", None), ("ocr", False)):
            if data[key] is empty:
                del data[key]
        return data


@dataclass
class Totals:
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    wall_time_s: float = 0.0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_tokens": self.total_tokens}


@dataclass
class PipelineResult:
    """Answer, citations, the ordered steps taken, and totals. `stop_reason` says why an iterative loop ended."""

    pipeline: str
    question: str
    answer: str
    citations: list[Citation] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    totals: Totals = field(default_factory=Totals)
    stop_reason: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    trace_id: str | None = None
    # "model" (generated), "extracted" (the model gave no usable answer: `answer` quotes retrieved sentences) or
    # "none" (neither); `answer_note` says why in one sentence a user can read.
    answer_source: str = "model"
    answer_note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "pipeline": self.pipeline,
            "question": self.question,
            "answer": self.answer,
            "answer_source": self.answer_source,
            "answer_note": self.answer_note,
            "citations": [c.to_dict() for c in self.citations],
            "steps": [s.to_dict() for s in self.steps],
            "totals": self.totals.to_dict(),
            "stop_reason": self.stop_reason,
            "config": self.config,
            "trace_id": self.trace_id,
        }
