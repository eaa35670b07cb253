"""Typed, bounded options of each strategy: one model per strategy, validated the same way from every entry.

The CLI, the HTTP API and any other caller pass options through `validate_options`, which refuses unknown
names, wrong types (`top_k=2.5`, `max_tokens="x"`) and values beyond the server's ceilings
(`docqa.settings.Settings.max_*`), with one line naming the option. The LLM client enforces the per-question
call budget and the completion-token cap again on every call, whatever a strategy passes.

Usage:
    options = validate_options("atrag", {"max_iterations": 3}, settings)   # -> ATRAGOptions
    options.build_kwargs()                                                # -> {"max_iterations": 3}
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from docqa.errors import InvalidOptionsError
from docqa.settings import Settings

PositiveInt = Annotated[int, Field(ge=1)]
# Paging through an exact record set costs nothing beyond the page itself; the bound only refuses nonsense.
MAX_RECORD_OFFSET = 10_000_000


class StrategyOptions(BaseModel):
    """Options common to every strategy's model; `ceilings` maps a field to the setting that bounds it."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    ceilings: ClassVar[dict[str, str]] = {}
    # The setting a builder falls back to when a field is not given (`top_k or settings.top_k`).
    setting_defaults: ClassVar[dict[str, str]] = {}

    @model_validator(mode="after")
    def _within_ceilings(self, info: ValidationInfo) -> StrategyOptions:
        settings = (info.context or {}).get("settings") or Settings()
        for name, setting in self.ceilings.items():
            value = getattr(self, name)
            ceiling = getattr(settings, setting)
            if value is not None and value > ceiling:
                raise ValueError(f"{name} must be at most {ceiling} (server limit DOCQA_{setting.upper()})")
        return self

    def build_kwargs(self) -> dict[str, Any]:
        """The options that were given, as keyword arguments of the strategy's builder."""
        return self.model_dump(exclude_none=True)

    def resolved(self, settings: Settings, builder_defaults: dict[str, Any]) -> StrategyOptions:
        """These options with every field not given set to what the builder would use, so that options meaning
        the same strategy are equal (and hash equal): `{}` and `{"top_k": 5}` when 5 is the default.

        :param builder_defaults: the builder's own keyword defaults (its signature), for fields without a setting.
        """
        filled: dict[str, Any] = {}
        for name in type(self).model_fields:
            if getattr(self, name) is not None:
                continue
            if name in self.setting_defaults:
                filled[name] = getattr(settings, self.setting_defaults[name])
            elif builder_defaults.get(name) is not None:
                filled[name] = builder_defaults[name]
        # Not re-validated: a default beyond a ceiling is the deployment's choice, exactly as the builder takes it.
        return self.model_copy(update=filled) if filled else self

    def __hash__(self) -> int:
        # A list option (MSPR's sources) keeps the generated hash from working; the JSON form is canonical.
        return hash((type(self), self.model_dump_json()))


class NoRetrievalOptions(StrategyOptions):
    ceilings: ClassVar[dict[str, str]] = {"max_tokens": "max_completion_tokens"}
    setting_defaults: ClassVar[dict[str, str]] = {"max_tokens": "llm_max_tokens"}

    max_tokens: PositiveInt | None = None


class StandardOptions(StrategyOptions):
    ceilings: ClassVar[dict[str, str]] = {"top_k": "max_top_k", "max_tokens": "max_completion_tokens"}
    setting_defaults: ClassVar[dict[str, str]] = {"top_k": "top_k", "max_tokens": "llm_max_tokens"}

    top_k: PositiveInt | None = None
    max_tokens: PositiveInt | None = None


class ReSPOptions(StrategyOptions):
    ceilings: ClassVar[dict[str, str]] = {
        "top_k": "max_top_k", "max_iterations": "max_iterations",
        "summary_tokens": "max_completion_tokens", "answer_tokens": "max_completion_tokens",
    }
    setting_defaults: ClassVar[dict[str, str]] = {"top_k": "top_k", "max_iterations": "resp_max_iterations"}

    top_k: PositiveInt | None = None
    max_iterations: PositiveInt | None = None
    summary_tokens: PositiveInt | None = None
    answer_tokens: PositiveInt | None = None


class ATRAGOptions(StrategyOptions):
    ceilings: ClassVar[dict[str, str]] = {
        "top_k": "max_top_k", "max_iterations": "max_iterations", "max_scoped_records": "max_scoped_records",
        "max_tokens": "max_completion_tokens", "max_prompt_documents": "max_prompt_documents",
        "max_document_chars": "max_document_chars",
    }
    setting_defaults: ClassVar[dict[str, str]] = {"top_k": "top_k", "max_tokens": "llm_max_tokens"}

    top_k: PositiveInt | None = None
    max_iterations: PositiveInt | None = None
    min_topic_probability: Annotated[float, Field(ge=0.0, le=1.0, allow_inf_nan=False)] | None = None
    max_scoped_records: PositiveInt | None = None
    max_tokens: PositiveInt | None = None
    max_prompt_documents: PositiveInt | None = None
    max_document_chars: Annotated[int, Field(ge=50)] | None = None


class MSPROptions(StrategyOptions):
    """MSPR: `max_steps` is the paper's AWI, `max_reviews` its SRT; `sources` picks (and orders) a subset of
    the configured DOCQA_MSPR_SOURCES; `refine=False` turns observation refinement off."""

    ceilings: ClassVar[dict[str, str]] = {
        "top_k": "max_top_k", "max_steps": "max_iterations", "max_reviews": "max_iterations",
        "max_tokens": "max_completion_tokens",
    }
    setting_defaults: ClassVar[dict[str, str]] = {
        "top_k": "top_k", "max_steps": "mspr_max_steps", "max_reviews": "mspr_max_reviews",
    }

    top_k: PositiveInt | None = None
    max_steps: PositiveInt | None = None
    max_reviews: Annotated[int, Field(ge=0)] | None = None
    max_tokens: PositiveInt | None = None
    sources: Annotated[list[Annotated[str, Field(min_length=1, max_length=200)]], Field(min_length=1,
                                                                                         max_length=10)] | None = None
    refine: bool | None = None


class ConTReOptions(StrategyOptions):
    """ConTRe, the retrieval half of ConTReGen: `max_llm_calls` is the question's call budget for the tree."""

    ceilings: ClassVar[dict[str, str]] = {
        "top_k": "max_top_k", "max_depth": "max_tree_depth", "max_breadth": "max_tree_breadth",
        "max_llm_calls": "max_llm_calls_per_question",
    }
    setting_defaults: ClassVar[dict[str, str]] = {
        "top_k": "top_k", "max_depth": "contregen_max_depth", "max_breadth": "contregen_max_breadth",
        "max_llm_calls": "max_llm_calls_per_question",
    }

    top_k: PositiveInt | None = None
    max_depth: PositiveInt | None = None
    max_breadth: PositiveInt | None = None
    max_llm_calls: PositiveInt | None = None


class ConTReGenOptions(ConTReOptions):
    """ConTReGen: ConTRe's options, and token caps of the node summaries and of the final answer (the budget
    covers expansion and synthesis together)."""

    ceilings: ClassVar[dict[str, str]] = {
        **ConTReOptions.ceilings,
        "summary_tokens": "max_completion_tokens", "answer_tokens": "max_completion_tokens",
    }

    summary_tokens: PositiveInt | None = None
    answer_tokens: PositiveInt | None = None


class StrategyInputs(BaseModel):
    """Runtime inputs of a strategy's run (beside its build options); none by default."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    def run_kwargs(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ATRAGInputs(StrategyInputs):
    """AT-RAG's time-scoped questions: the instant relative phrases count back from, the patient, and the page
    of an exact record set larger than `max_scoped_records` (records skipped, newest first)."""

    as_of: Annotated[str, Field(min_length=4, max_length=40)] | None = None
    patient_id: Annotated[str, Field(min_length=1, max_length=200)] | None = None
    record_offset: Annotated[int, Field(ge=0, le=MAX_RECORD_OFFSET)] | None = None

    @field_validator("as_of")
    @classmethod
    def _iso_instant(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                datetime.fromisoformat(value.strip())
            except ValueError:
                raise ValueError(f"as_of must be an ISO date or date-time, not {value!r}") from None
        return value


def validate_inputs(name: str, inputs: dict[str, Any] | None, model: type[StrategyInputs]) -> StrategyInputs:
    """:raises InvalidOptionsError: an input the strategy does not take, or one of the wrong form."""
    try:
        return model.model_validate(inputs or {})
    except ValidationError as exc:
        raise InvalidOptionsError(f"invalid inputs for pipeline {name!r}: {_one_line(exc)}") from None


def validate_options(
    name: str, options: dict[str, Any] | None, settings: Settings, model: type[StrategyOptions]
) -> StrategyOptions:
    """`options` checked against `model` and the settings' ceilings.

    :raises InvalidOptionsError: unknown option, wrong type or out of range; the message names the option.
    """
    try:
        return model.model_validate(options or {}, context={"settings": settings})
    except ValidationError as exc:
        raise InvalidOptionsError(f"invalid options for pipeline {name!r}: {_one_line(exc)}") from None


def _one_line(exc: ValidationError) -> str:
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        if error["type"] == "extra_forbidden":
            message = "not taken by this pipeline"
        problems.append(f"{where}: {message}" if where else message)
    return "; ".join(problems)
