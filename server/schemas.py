"""Request and response bodies of the query endpoints (the OpenAPI schema is generated from these)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from docqa.questions import Answer, Ask

OptionValue = str | int | float | bool
# Runtime inputs a strategy may take beside its options, as top-level body fields (validated per strategy).
RUN_INPUTS = ("as_of", "patient_id", "record_offset")


class QueryRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    question: str = Field(min_length=1, max_length=100_000, description="The question; the server's limit applies.")
    pipeline: str = Field(default="auto", min_length=1, max_length=64, description="A strategy name or 'auto'.")
    options: dict[str, OptionValue] = Field(default_factory=dict, description="Builder options, e.g. top_k.")
    stream: bool = Field(default=False, description="Answer as server-sent events, one per finished step.")
    as_of: str | None = Field(default=None, max_length=40,
                              description="atrag: the ISO instant relative time phrases count back from.")
    patient_id: str | None = Field(default=None, max_length=200,
                                   description="atrag: the patient a time-scoped question is about.")
    record_offset: int | None = Field(default=None, ge=0, description=(
        "atrag: records to skip (newest first) when an exact record set is larger than max_scoped_records."))
    conversation_id: str | None = Field(default=None, min_length=1, max_length=36, description=(
        "Ask in one of your stored conversations (a follow-up is rewritten against its earlier questions), or "
        "'new' to start one; the answer is stored as the conversation's next turn."))

    def to_ask(self) -> Ask:
        inputs = {name: value for name in RUN_INPUTS if (value := getattr(self, name)) is not None}
        return Ask(self.question, strategy=self.pipeline, options=dict(self.options), inputs=inputs,
                   conversation_id=self.conversation_id)


class CitationOut(BaseModel):
    document_id: str
    source: str | None = None
    score: float | None = None
    snippet: str = ""
    record: dict[str, Any] | None = Field(default=None, description="atrag: the record's row of the record table.")
    location: str | None = Field(default=None, description=(
        "Where the passage stands in its file: 'page 3', 'slide 2', 'sheet Q3, rows 2-41', 'attachment a.pdf, "
        "page 1'."))
    ocr: bool = Field(default=False, description="The passage was read from a scan by OCR: check the scan.")


class QueryResponse(BaseModel):
    answer: str
    answer_source: str = Field(default="model", description=(
        "'model' (generated), 'extracted' (the model gave no usable answer; `answer` quotes the best-matching "
        "retrieved sentences with [n] citations) or 'none'."))
    answer_note: str | None = Field(default=None, description="Why the answer is not the model's, when it is not.")
    pipeline: str
    trace_id: str | None
    citations: list[CitationOut]
    selection: dict[str, Any]
    stop_reason: str | None = None
    totals: dict[str, Any]
    steps: list[dict[str, Any]]
    conversation_id: str | None = Field(default=None, description="The conversation this answer was stored in.")


def query_response(answer: Answer) -> dict[str, Any]:
    data = answer.result.to_dict()
    return {
        "answer": data["answer"],
        "answer_source": data["answer_source"],
        "answer_note": data["answer_note"],
        "pipeline": data["pipeline"],
        "trace_id": data["trace_id"],
        "citations": data["citations"],
        "selection": answer.selection,
        "stop_reason": data["stop_reason"],
        "totals": data["totals"],
        "steps": data["steps"],
        "conversation_id": answer.conversation_id,
    }
