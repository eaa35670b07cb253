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
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from docqa.access import AccessScope
from docqa.accounts.identity import Caller
from docqa.audit.recorder import AuditedRun, record_stopped_before_start
from docqa.conversation import RewrittenQuestion
from docqa.errors import UnknownPipelineError
from docqa.pipelines.base import QAPipeline, config_hash, validate_question
from docqa.pipelines.registry import check_inputs
from docqa.recording import listen_to_steps
from docqa.result import PipelineResult, Step
from docqa.run_control import OUTCOME_CANCELLED, OUTCOME_TIMED_OUT, RunControl, RunStopped
from docqa.server.api_errors import ApiError
from docqa.server.auto_select import choose_pipeline, multi_sources
from docqa.server.context import ServerContext
from docqa.token_stream import TokenSink, stream_answer_tokens

AUTO = "auto"
# How often a non-streaming request checks whether its client is still connected.
_DISCONNECT_POLL_S = 0.5


@dataclass(frozen=True)
class Prepared:
    question: str
    pipeline: str
    options: dict[str, Any]
    selection: dict[str, Any] = field(default_factory=dict)
    # Runtime inputs of the strategy's run (AT-RAG's as_of / patient_id), beside its build options.
    run_options: dict[str, Any] = field(default_factory=dict)
    # A conversation's follow-up rewritten into `question` (`docqa.conversation.Rewrite`), recorded as a step.
    rewrite: Any = None


def prepare(context: ServerContext, question: str, pipeline: str, options: dict[str, Any],
            run_inputs: dict[str, Any] | None = None) -> Prepared:
    """Validate the question and the pipeline name and resolve `auto`, before any work starts.

    :raises InvalidQuestionError: an empty or too long question.
    :raises UnknownPipelineError: a name that is neither `auto` nor registered.
    :raises InvalidOptionsError: an option the strategy does not take, of the wrong type or out of range.
    """
    cleaned = validate_question(question, context.settings.max_question_chars)
    names = context.pipelines.names()
    if pipeline == AUTO:
        choice = choose_pipeline(cleaned, names, sources=multi_sources(context.settings))
        name, selection = choice.name, choice.to_dict()
    elif pipeline not in names:
        raise UnknownPipelineError(f"unknown pipeline {pipeline!r}; available: {', '.join([AUTO, *names])}")
    else:
        name, selection = pipeline, {"mode": "explicit", "pipeline": pipeline}
    context.pipelines.check(name, options)
    return Prepared(cleaned, name, options, selection, check_inputs(name, run_inputs))


class SelectedPipeline:
    """Runs a pipeline and adds how it was selected to the result's config (and so to its audited hash)."""

    def __init__(self, inner: QAPipeline, selection: dict[str, Any]) -> None:
        self.inner = inner
        self.name = inner.name
        self.selection = selection

    def config(self) -> dict[str, Any]:
        return {**self.inner.config(), "selection": self.selection}

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None,
            **inputs: Any) -> PipelineResult:
        result = self.inner.run(question, scope, filters, **inputs)
        config = {k: v for k, v in result.config.items() if k != "config_hash"}
        config["selection"] = self.selection
        result.config = {**config, "config_hash": config_hash(config)}
        return result


async def answer(
    context: ServerContext, caller: Caller, prepared: Prepared, on_step: Callable[[Step], None] | None = None,
    disconnected: Callable[[], Awaitable[bool]] | None = None,
) -> PipelineResult:
    """Run `prepared` for `caller` inside a query slot; 503 when no slot frees up, 504 on timeout."""
    async with context.slots.acquire():
        return await answer_in_slot(context, caller, prepared, on_step, disconnected)


async def answer_in_slot(
    context: ServerContext, caller: Caller, prepared: Prepared, on_step: Callable[[Step], None] | None = None,
    disconnected: Callable[[], Awaitable[bool]] | None = None, on_token: TokenSink | None = None,
) -> PipelineResult:
    """Run `prepared` in the query thread pool; the caller already holds a query slot.

    `on_step` gets each finished step and `on_token(text, call)` each token of an answer the model writes, in
    the run's thread.

    At the query timeout, when `disconnected()` turns true, or when this task is cancelled (a streaming client
    left), the run is stopped: its trace is written at once as `timed_out`/`cancelled` and its thread stops at
    the next step boundary, making no further LLM calls.
    """
    settings = context.settings
    control = RunControl.from_settings(settings, timeout_s=settings.query_timeout_s)
    # Until the run has started in its thread, a stop still leaves a trace (written by this fallback).
    control.on_stop(lambda outcome: record_stopped_before_start(
        settings, outcome, asked_by=caller.user_id, tenant=caller.tenant, question=prepared.question,
        pipeline=prepared.pipeline, config={"pipeline": prepared.pipeline, "options": prepared.options,
                                            "selection": prepared.selection},
    ))

    def work() -> PipelineResult:
        control.check()  # stopped while queued for a thread: build nothing
        pipeline: QAPipeline = SelectedPipeline(context.pipelines.get(prepared.pipeline, prepared.options),
                                                prepared.selection)
        if prepared.rewrite is not None:
            pipeline = RewrittenQuestion(pipeline, prepared.rewrite)
        run = AuditedRun(pipeline, prepared.question, caller.scope(), caller.user_id, settings,
                         control=control, run_options=prepared.run_options)
        with ExitStack() as listening:
            if on_step is not None:
                listening.enter_context(listen_to_steps(on_step))
            if on_token is not None:
                listening.enter_context(stream_answer_tokens(on_token))
            return run.run()

    context.active_runs.add(control)
    if context.stopping:
        # The worker is shutting down: no run begins now, and the question is traced `cancelled`.
        await asyncio.to_thread(control.stop, OUTCOME_CANCELLED)
        context.active_runs.discard(control)
        raise _stopped(OUTCOME_CANCELLED, settings.query_timeout_s)
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(context.executor, contextvars.copy_context().run, work)
    watcher = asyncio.ensure_future(_until(disconnected)) if disconnected is not None else None
    try:
        waiting = {future} if watcher is None else {future, watcher}
        done, _ = await asyncio.wait(waiting, timeout=settings.query_timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if future not in done:
            outcome = OUTCOME_CANCELLED if watcher is not None and watcher in done else OUTCOME_TIMED_OUT
            # Blocking database work (the trace) stays off the event loop.
            if await asyncio.to_thread(control.stop, outcome):
                raise _stopped(outcome, settings.query_timeout_s)
            # The run settled its own outcome first (completed or failed): that is what the caller gets.
        return await _result(future, settings.query_timeout_s)
    except asyncio.CancelledError:
        # The request itself went away (a streaming client disconnected): the thread still writes the trace.
        asyncio.get_running_loop().run_in_executor(None, control.stop, OUTCOME_CANCELLED)
        raise
    finally:
        context.active_runs.discard(control)
        if watcher is not None:
            watcher.cancel()


async def _until(disconnected: Callable[[], Awaitable[bool]]) -> None:
    while not await disconnected():
        await asyncio.sleep(_DISCONNECT_POLL_S)


async def _result(future: asyncio.Future[PipelineResult], timeout_s: float) -> PipelineResult:
    try:
        return await future
    except RunStopped as exc:
        raise _stopped(exc.outcome, timeout_s) from None


def _stopped(outcome: str, timeout_s: float) -> ApiError:
    if outcome == OUTCOME_TIMED_OUT:
        return ApiError(504, "timeout", f"the query took longer than {timeout_s:g} s")
    return ApiError(503, "cancelled", "the query was cancelled")
