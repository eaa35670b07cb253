"""Answering one question for an authenticated caller: choose the pipeline, hold a query slot, run it with
its audit trace in a worker thread, bounded by the query timeout.

The access scope always comes from the caller (`Caller.scope()`), never from the request.

Usage:
    prepared = prepare(context, "Who wrote Hamlet?", "auto", {})
    result = await answer(context, caller, prepared)
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from docqa.access import AccessScope
from docqa.errors import UnknownPipelineError
from docqa.pipelines.base import QAPipeline, config_hash, validate_question
from docqa.recording import listen_to_steps
from docqa.result import PipelineResult, Step
from docqa.server.accounts.identity import Caller
from docqa.server.api_errors import ApiError
from docqa.server.audit.recorder import answer_with_audit
from docqa.server.auto_select import choose_pipeline
from docqa.server.context import ServerContext

AUTO = "auto"


@dataclass(frozen=True)
class Prepared:
    question: str
    pipeline: str
    options: dict[str, Any]
    selection: dict[str, Any] = field(default_factory=dict)


def prepare(context: ServerContext, question: str, pipeline: str, options: dict[str, Any]) -> Prepared:
    """Validate the question and the pipeline name and resolve `auto`, before any work starts.

    :raises InvalidQuestionError: an empty or too long question.
    :raises UnknownPipelineError: a name that is neither `auto` nor registered.
    """
    cleaned = validate_question(question, context.settings.max_question_chars)
    names = context.pipelines.names()
    if pipeline == AUTO:
        choice = choose_pipeline(cleaned, names)
        return Prepared(cleaned, choice.name, options, choice.to_dict())
    if pipeline not in names:
        raise UnknownPipelineError(f"unknown pipeline {pipeline!r}; available: {', '.join([AUTO, *names])}")
    return Prepared(cleaned, pipeline, options, {"mode": "explicit", "pipeline": pipeline})


class SelectedPipeline:
    """Runs a pipeline and adds how it was selected to the result's config (and so to its audited hash)."""

    def __init__(self, inner: QAPipeline, selection: dict[str, Any]) -> None:
        self.inner = inner
        self.name = inner.name
        self.selection = selection

    def config(self) -> dict[str, Any]:
        return {**self.inner.config(), "selection": self.selection}

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None) -> PipelineResult:
        result = self.inner.run(question, scope, filters)
        config = {k: v for k, v in result.config.items() if k != "config_hash"}
        config["selection"] = self.selection
        result.config = {**config, "config_hash": config_hash(config)}
        return result


async def answer(
    context: ServerContext, caller: Caller, prepared: Prepared, on_step: Callable[[Step], None] | None = None
) -> PipelineResult:
    """Run `prepared` for `caller` inside a query slot; 503 when no slot frees up, 504 on timeout."""
    async with context.slots.acquire():
        return await answer_in_slot(context, caller, prepared, on_step)


async def answer_in_slot(
    context: ServerContext, caller: Caller, prepared: Prepared, on_step: Callable[[Step], None] | None = None
) -> PipelineResult:
    """Run `prepared` in the query thread pool; the caller already holds a query slot."""

    def work() -> PipelineResult:
        pipeline = SelectedPipeline(context.pipelines.get(prepared.pipeline, prepared.options), prepared.selection)
        if on_step is None:
            return answer_with_audit(pipeline, prepared.question, caller.scope(), caller.user_id, context.settings)
        with listen_to_steps(on_step):
            return answer_with_audit(pipeline, prepared.question, caller.scope(), caller.user_id, context.settings)

    loop = asyncio.get_running_loop()
    # run_in_executor (not anyio's to_thread) so a timeout returns at once; the abandoned run finishes
    # in its thread, bounded by the LLM call timeouts.
    future = loop.run_in_executor(context.executor, contextvars.copy_context().run, work)
    try:
        return await asyncio.wait_for(future, timeout=context.settings.query_timeout_s)
    except TimeoutError:
        raise ApiError(504, "timeout", f"the query took longer than {context.settings.query_timeout_s:g} s") from None
