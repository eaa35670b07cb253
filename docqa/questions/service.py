"""The one question service: every entry point (HTTP, OpenAI chat, web UI, CLI, evaluation, MCP) asks through it.

It validates once (`prepare`: the question masked and checked, a follow-up rewritten, the strategy chosen or
`auto` resolved with how, options into the strategy's options model, runtime inputs), reuses or builds the
strategy (`PipelineCache`, keyed by the options model, built outside any global lock), runs it under the run
control (LLM call budget, deadline, cancellation) with its one audit trace written for every outcome
(`AuditedRun`), and stores a conversation's turn. The access scope always comes from the `Asker`, never from the
request.

Three ways to ask, one path:
- `answer(...)`: in the calling thread (CLI, evaluation); Ctrl-C leaves a `cancelled` trace;
- `await ask(...)`: in the service's thread pool, inside a query slot when the service has slots, bounded by its
  timeout, cancelled when `disconnected()` turns true or the awaiting task is cancelled, refused once the
  service is stopping; every stop leaves its trace (`timed_out`/`cancelled`);
- `await stream(...)`: `ask` as events (selection, steps, answer tokens, result or error); the slot is taken
  before it returns, so overload is an error of the call, not of the stream.

Usage:
    service = QuestionService(runtime)
    answer = service.answer(Ask("Who founded Acme?", strategy="standard", options={"top_k": 3}),
                            Asker(AccessScope("acme", frozenset({"user:alice"})), asked_by="alice"))
    answer.result.answer, answer.result.trace_id, answer.selection
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.orm import sessionmaker

from docqa.audit.recorder import record_stopped_before_start
from docqa.audit.scrub import mask_secrets
from docqa.db import session_factory
from docqa.errors import DocqaError
from docqa.extractive_fallback import ANSWER_SOURCE_MODEL
from docqa.pipelines.base import validate_question
from docqa.pipelines.options import StrategyOptions
from docqa.pipelines.registry import check_inputs, resolve_options
from docqa.questions.audited_run import AuditedRun
from docqa.questions.conversation_turns import rewrite_against, rewrite_in_conversation, store_turn
from docqa.questions.errors import QueryFailedError, stopped_error
from docqa.questions.pipeline_cache import PipelineCache
from docqa.questions.question import Ask, Asker, Question
from docqa.questions.strategy_choice import select_strategy
from docqa.recording import listen_to_steps
from docqa.result import PipelineResult, Step
from docqa.run_control import OUTCOME_CANCELLED, OUTCOME_TIMED_OUT, RunControl, RunStopped
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.token_stream import TokenSink, stream_answer_tokens

logger = logging.getLogger(__name__)

StepSink = Callable[[Step], None]
Disconnected = Callable[[], Awaitable[bool]]
# How often a waiting `ask` checks whether its client is still connected.
DISCONNECT_POLL_S = 0.5
DEFAULT_WORKERS = 4


class Slots(Protocol):
    """A bound on concurrent runs (`docqa.server.limits.QuerySlots`): `take` waits or raises when none frees up."""

    async def take(self) -> None: ...

    def give_back(self) -> None: ...


@dataclass(frozen=True)
class Answer:
    """An answered question: the run's result (with its committed trace id), the validated question it
    answered, and the stored conversation the turn went to (None: none named, or the turn could not be stored)."""

    question: Question
    result: PipelineResult
    conversation_id: str | None = None

    @property
    def selection(self) -> dict[str, Any]:
        return dict(self.question.selection)


class QuestionService:
    """Answers questions for every entry point; one per process (or per server worker).

    :param settings: the limits and endpoints questions run under (default: the runtime's settings).
    :param sessions: database sessions for stored conversations (default: from the settings, on first use).
    :param slots: bounds concurrent `ask`/`stream` runs; None: unbounded.
    :param timeout_s: the deadline of an `ask`/`stream` run (and of `answer` runs without their own control).
    :param workers: threads running `ask`/`stream` questions; beyond the slots they absorb abandoned runs.
    """

    def __init__(self, runtime: Runtime, *, settings: Settings | None = None, sessions: sessionmaker | None = None,
                 slots: Slots | None = None, timeout_s: float | None = None, workers: int = DEFAULT_WORKERS,
                 cache_size: int = 32) -> None:
        self.runtime = runtime
        self.settings = settings or runtime.settings
        self.slots = slots
        self.timeout_s = timeout_s
        self.pipelines = PipelineCache(runtime, cache_size)
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="docqa-query")
        # Runs in progress, so that a stopping server cancels them and each still leaves its trace.
        self.active_runs: set[RunControl] = set()
        # Set when the process is told to stop (`docqa.server.shutdown`): no new run begins.
        self.stopping = False
        self._sessions = sessions

    # ---- validation ----------------------------------------------------------------------------------------

    def strategies(self) -> list[str]:
        """The registered strategy names (besides `auto`)."""
        return self.pipelines.names()

    def options(self, strategy: str, options: Mapping[str, Any] | None) -> StrategyOptions:
        """`options` validated into `strategy`'s options model, every default filled in; pass the model in an
        `Ask` to ask many questions without validating again.

        :raises UnknownPipelineError: no strategy of that name.
        :raises InvalidOptionsError: an unknown, mistyped or out-of-range option.
        """
        return resolve_options(strategy, dict(options or {}), self.settings)

    def prepare(self, ask: Ask, asker: Asker) -> Question:
        """Validate `ask` once, before any work starts; reads the stored conversation when one is named.

        :raises ConversationNotFoundError: the named conversation is not the asker's.
        :raises InvalidQuestionError: an empty or too long question.
        :raises UnknownPipelineError: a strategy that is neither `auto` nor registered.
        :raises InvalidOptionsError: an option or input the strategy does not take, of the wrong type or too large.
        """
        # Masked once here: the conversation, the model, the steps and the logs only ever see this copy.
        asked = mask_secrets(ask.question, self.settings)
        if ask.conversation_id is not None:
            rewrite = rewrite_in_conversation(self.sessions, self.settings, asker, ask.conversation_id, asked,
                                              self.runtime.chat_generator)
        elif ask.history:
            history = [{**turn, "content": mask_secrets(turn.get("content") or "", self.settings)}
                       if isinstance(turn, Mapping) else mask_secrets(turn, self.settings) for turn in ask.history]
            rewrite = rewrite_against(history, asked, self.settings, self.runtime.chat_generator)
        else:
            rewrite = None
        text = validate_question(asked if rewrite is None else rewrite.question, self.settings.max_question_chars)
        strategy, selection = select_strategy(text, ask.strategy, self.strategies(), self.settings)
        if ask.channel is not None:
            selection = {**selection, "channel": ask.channel}
        options = ask.options if isinstance(ask.options, StrategyOptions) else self.options(strategy, ask.options)
        return Question(
            text=text, asked=asked, strategy=strategy, options=options,
            run_inputs=check_inputs(strategy, dict(ask.inputs)), selection=selection, rewrite=rewrite,
            conversation_id=ask.conversation_id, filters=ask.filters,
        )

    @property
    def sessions(self) -> sessionmaker:
        if self._sessions is None:
            self._sessions = session_factory(self.settings)
        return self._sessions

    # ---- asking ----------------------------------------------------------------------------------------------

    def answer(self, question: Ask | Question, asker: Asker, *, on_step: StepSink | None = None,
               on_token: TokenSink | None = None, control: RunControl | None = None) -> Answer:
        """Prepare (unless already a `Question`) and answer in this thread.

        :param control: the run's budget, deadline and cancellation (default: the settings' limits and the
            service's timeout).
        :raises QueryTimedOutError, QueryCancelledError: the run was stopped (its trace says so).
        """
        prepared = question if isinstance(question, Question) else self.prepare(question, asker)
        control = self._controlled(prepared, asker, control)
        self.active_runs.add(control)
        try:
            if self.stopping:
                control.stop(OUTCOME_CANCELLED)
            result = self._run(prepared, asker, control, on_step, on_token)
        except KeyboardInterrupt:
            # Interrupted at the terminal: the question still leaves its one trace, marked cancelled.
            control.stop(OUTCOME_CANCELLED)
            raise
        except RunStopped as exc:
            raise stopped_error(exc.outcome, self.timeout_s) from None
        finally:
            self.active_runs.discard(control)
        return Answer(prepared, result, self._store_turn(prepared, asker, result))

    async def ask(self, question: Ask | Question, asker: Asker, *, on_step: StepSink | None = None,
                  on_token: TokenSink | None = None, disconnected: Disconnected | None = None) -> Answer:
        """Prepare and answer in the service's threads, inside a query slot, bounded by the service's timeout.

        `on_step` gets each finished step and `on_token(text, call)` each token of an answer the model writes, in
        the run's thread. At the timeout, when `disconnected()` turns true, or when the awaiting task is
        cancelled, the run is stopped: its trace is written at once as `timed_out`/`cancelled` and its thread
        stops at the next step boundary, making no further LLM calls.
        """
        prepared = await self._prepared(question, asker)
        if self.slots is not None:
            await self.slots.take()
        try:
            result = await self._run_async(prepared, asker, on_step, on_token, disconnected)
        finally:
            if self.slots is not None:
                self.slots.give_back()
        return Answer(prepared, result, await asyncio.to_thread(self._store_turn, prepared, asker, result))

    async def stream(self, question: Ask | Question, asker: Asker) -> QuestionStream:
        """Prepare and take a query slot now; the returned stream runs the question when iterated.

        Errors of validation and overload are raised here, before any response starts.
        """
        prepared = await self._prepared(question, asker)
        if self.slots is not None:
            await self.slots.take()
        return QuestionStream(self, prepared, asker)

    def close(self) -> None:
        """Stop every active run (each traced `cancelled`) and the threads; for a process that ends."""
        self.stopping = True
        for control in list(self.active_runs):
            try:
                control.stop(OUTCOME_CANCELLED)
            except Exception:  # one failed trace write must not keep the others from being written
                logger.exception("could not record a run cancelled at shutdown")
        self.executor.shutdown(wait=False, cancel_futures=True)

    # ---- the run ---------------------------------------------------------------------------------------------

    async def _prepared(self, question: Ask | Question, asker: Asker) -> Question:
        if isinstance(question, Question):
            return question
        if question.conversation_id is not None:  # reads the database: off the event loop
            return await asyncio.to_thread(self.prepare, question, asker)
        return self.prepare(question, asker)

    def _run(self, question: Question, asker: Asker, control: RunControl, on_step: StepSink | None,
             on_token: TokenSink | None) -> PipelineResult:
        """Build or reuse the strategy and run it with its trace, in this thread."""
        control.check()  # stopped while queued for a thread: build nothing
        built = self.pipelines.get(question.strategy, question.options)
        leading = question.leading_steps()
        run = AuditedRun(
            built.pipeline, question.text, asker.scope, asker.asked_by, self.settings, filters=question.filters,
            run_options=question.run_inputs, control=control, run_data=_run_data(question, asker),
            leading_steps=leading, strategy_hash=built.config_hash,
        )
        with ExitStack() as listening:
            if on_step is not None:
                for step in leading:
                    on_step(step)
                listening.enter_context(listen_to_steps(on_step))
            if on_token is not None:
                listening.enter_context(stream_answer_tokens(on_token))
            return run.run()

    def _controlled(self, question: Question, asker: Asker, control: RunControl | None = None) -> RunControl:
        """The run's control (default: the settings' limits and the service's timeout), tracing a stop that comes
        before the run has started in its thread (`AuditedRun` takes over once it has)."""
        control = control or RunControl.from_settings(self.settings, timeout_s=self.timeout_s)
        control.on_stop(lambda outcome: record_stopped_before_start(
            self.settings, outcome, asked_by=asker.asked_by, tenant=asker.tenant, question=question.text,
            pipeline=question.strategy, config={"pipeline": question.strategy,
                                                "options": question.options.build_kwargs(),
                                                **_run_data(question, asker)},
        ))
        return control

    async def _run_async(self, question: Question, asker: Asker, on_step: StepSink | None,
                         on_token: TokenSink | None, disconnected: Disconnected | None,
                         control: RunControl | None = None) -> PipelineResult:
        control = control or self._controlled(question, asker)
        self.active_runs.add(control)
        if self.stopping:
            # The process is shutting down: no run begins now, and the question is traced `cancelled`.
            await asyncio.to_thread(control.stop, OUTCOME_CANCELLED)
            self.active_runs.discard(control)
            raise stopped_error(OUTCOME_CANCELLED, self.timeout_s)
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(self.executor, contextvars.copy_context().run, self._run, question, asker,
                                      control, on_step, on_token)
        watcher = asyncio.ensure_future(_until(disconnected)) if disconnected is not None else None
        try:
            waiting = {future} if watcher is None else {future, watcher}
            done, _ = await asyncio.wait(waiting, timeout=self.timeout_s, return_when=asyncio.FIRST_COMPLETED)
            if future not in done:
                outcome = OUTCOME_CANCELLED if watcher is not None and watcher in done else OUTCOME_TIMED_OUT
                # Blocking database work (the trace) stays off the event loop.
                if await asyncio.to_thread(control.stop, outcome):
                    raise stopped_error(outcome, self.timeout_s)
                # The run settled its own outcome first (completed or failed): that is what the caller gets.
            try:
                return await future
            except RunStopped as exc:
                raise stopped_error(exc.outcome, self.timeout_s) from None
        except asyncio.CancelledError:
            # The awaiting task went away (a streaming client disconnected): the thread still writes the trace.
            loop.run_in_executor(None, control.stop, OUTCOME_CANCELLED)
            raise
        finally:
            self.active_runs.discard(control)
            if watcher is not None:
                watcher.cancel()

    def _store_turn(self, question: Question, asker: Asker, result: PipelineResult) -> str | None:
        if question.conversation_id is None:
            return None
        return store_turn(self.sessions, asker, question.conversation_id, question.asked, result)


def _run_data(question: Question, asker: Asker) -> dict[str, Any]:
    """What the trace records of the run beside the strategy's config, in every outcome."""
    return {
        "selection": dict(question.selection),
        # Who the question was asked as: CLI and eval askers are no users, so "who could read this?" asks about
        # these principals.
        "asked_as": asker.scope.effective_principals,
    }


async def _until(disconnected: Disconnected) -> None:
    while not await disconnected():
        await asyncio.sleep(DISCONNECT_POLL_S)


class QuestionStream:
    """A prepared question holding its query slot; iterate `events()` once to run it, `release()` when done.

    Events, as (kind, data): ("selection", how the strategy was selected), ("step", step dict) per finished step,
    ("token", {"text", "call"}) per piece of an answer the model writes (echo-free, see `docqa.token_stream`; a
    preview: the result's answer is authoritative), ("answer_replaced", {"answer_source", "answer_note"}) just
    before a result whose answer is not the model's, then ("result", `Answer`) or ("error", `DocqaError`).
    """

    def __init__(self, service: QuestionService, question: Question, asker: Asker) -> None:
        self.service = service
        self.question = question
        self.asker = asker
        self._released = service.slots is None

    def release(self) -> None:
        """Give the query slot back (once; safe to call again, e.g. when the client left before the stream)."""
        if not self._released:
            self._released = True
            if self.service.slots is not None:
                self.service.slots.give_back()

    async def events(self) -> AsyncIterator[tuple[str, Any]]:
        service, question = self.service, self.question
        yield "selection", dict(question.selection)
        queue: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        loop = asyncio.get_running_loop()

        def on_step(step: Step) -> None:  # called in the run's thread
            loop.call_soon_threadsafe(queue.put_nowait, ("step", step.to_dict()))

        def on_token(text: str, call: int) -> None:  # called in the run's thread
            loop.call_soon_threadsafe(queue.put_nowait, ("token", {"text": text, "call": call}))

        # The control is made here, not in the task: a client that leaves before the task has begun still gets
        # its run stopped and traced (a task cancelled before its first step runs none of its code).
        control = service._controlled(question, self.asker)
        task = asyncio.ensure_future(service._run_async(question, self.asker, on_step, on_token, None, control))
        task.add_done_callback(lambda _task: queue.put_nowait(("done", None)))
        try:
            while True:
                kind, data = await queue.get()
                if kind == "done":
                    break
                yield kind, data
        finally:
            # The client left before the end: the run stops at its next step boundary and is traced as cancelled
            # (stopping twice settles nothing more: the first outcome wins).
            if not task.done():
                task.cancel()
                loop.run_in_executor(None, control.stop, OUTCOME_CANCELLED)
        try:
            result: PipelineResult = task.result()
        except DocqaError as exc:
            if exc.detail:
                logger.warning("%s: %s", exc.code, exc.detail)
            yield "error", exc
            return
        except Exception:
            logger.exception("streamed query failed")
            yield "error", QueryFailedError("the query failed; see the server log")
            return
        if result.answer_source != ANSWER_SOURCE_MODEL:
            yield "answer_replaced", {"answer_source": result.answer_source, "answer_note": result.answer_note}
        conversation_id = await asyncio.to_thread(service._store_turn, question, self.asker, result)
        yield "result", Answer(question, result, conversation_id)
