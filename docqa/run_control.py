"""Server-side bounds of one question's run: its LLM call budget, its deadline and its cancellation.

A `RunControl` is active in the context of a run (`with control.active(): ...`); it reaches every thread the run
starts through `contextvars`. Two places consult it, so no strategy can escape it whatever its options:
- every step boundary (`StepRecorder.step`) calls `check_run()`, which raises `RunStopped` once the run was
  cancelled or its deadline passed;
- every LLM call (`docqa.llm.calls`) calls `take_llm_call()`, which also counts the call against the
  per-question budget and caps the completion tokens and the prompt size.

The outcome of a run (completed, failed, timed out, cancelled) is decided exactly once: whoever calls
`decide` first wins, and only the winner writes the run's audit trace.

Usage:
    control = RunControl(max_llm_calls=64, max_completion_tokens=2048, max_prompt_chars=60_000, timeout_s=300)
    with control.active():
        result = pipeline.run(question, scope)
    control.stop(OUTCOME_TIMED_OUT)  # from another thread: the run stops at its next step boundary
"""

from __future__ import annotations

import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from haystack.core.errors import PipelineRuntimeError

from docqa.errors import DocqaError, check_bounds

OUTCOME_COMPLETED = "completed"
OUTCOME_FAILED = "failed"
OUTCOME_TIMED_OUT = "timed_out"
OUTCOME_CANCELLED = "cancelled"
STOPPED_OUTCOMES = (OUTCOME_TIMED_OUT, OUTCOME_CANCELLED)

_active: contextvars.ContextVar[RunControl | None] = contextvars.ContextVar("docqa_run_control", default=None)


class RunStopped(Exception):
    """The run was timed out or cancelled; raised at its next step boundary or LLM call."""

    def __init__(self, outcome: str) -> None:
        super().__init__(f"the run was stopped: {outcome}")
        self.outcome = outcome


class LLMBudgetExceededError(DocqaError):
    """A question needed more LLM calls (or a larger prompt) than the server allows per question."""

    code = "llm_budget_exceeded"
    http_status = 422


class RunControl:
    """Budget, deadline and cancellation of one run; thread-safe (see the module docstring)."""

    def __init__(self, *, max_llm_calls: int, max_completion_tokens: int, max_prompt_chars: int,
                 timeout_s: float | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        check_bounds(max_llm_calls=(max_llm_calls, 1, None), max_completion_tokens=(max_completion_tokens, 1, None),
                     max_prompt_chars=(max_prompt_chars, 1, None))
        self.max_llm_calls = max_llm_calls
        self.max_completion_tokens = max_completion_tokens
        self.max_prompt_chars = max_prompt_chars
        self._clock = clock
        self.deadline = None if timeout_s is None else clock() + timeout_s
        self.llm_calls = 0
        self.outcome: str | None = None
        self._stop_requested: str | None = None
        self._lock = threading.Lock()
        self._on_stop: Callable[[str], None] | None = None

    @classmethod
    def from_settings(cls, settings: Any, timeout_s: float | None = None) -> RunControl:
        return cls(max_llm_calls=settings.max_llm_calls_per_question,
                   max_completion_tokens=settings.max_completion_tokens,
                   max_prompt_chars=settings.max_prompt_chars, timeout_s=timeout_s)

    @contextmanager
    def active(self) -> Iterator[RunControl]:
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)

    def decide(self, outcome: str) -> bool:
        """Settle the run's outcome; True for the first caller only (the one that writes the trace)."""
        with self._lock:
            if self.outcome is not None:
                return False
            self.outcome = outcome
            return True

    def on_stop(self, callback: Callable[[str], None]) -> None:
        """Call `callback(outcome)` when `stop` settles the outcome (e.g. to write the run's trace at once)."""
        self._on_stop = callback

    def stop(self, outcome: str) -> bool:
        """Ask the run to stop (timed out, cancelled); True when this settled its outcome.

        The run itself notices at its next step boundary or LLM call and raises `RunStopped`.
        """
        if outcome not in STOPPED_OUTCOMES:
            raise ValueError(f"a run is stopped as one of {STOPPED_OUTCOMES}, not {outcome!r}")
        with self._lock:
            if self._stop_requested is None:
                self._stop_requested = outcome
        if not self.decide(outcome):
            return False
        if self._on_stop is not None:
            self._on_stop(outcome)
        return True

    def halt(self, outcome: str) -> None:
        """Make the run stop at its next step boundary or LLM call, settling nothing and writing nothing.

        For a signal handler: no lock, no I/O. `stop(outcome)` afterwards settles the outcome and writes it.
        """
        if outcome not in STOPPED_OUTCOMES:
            raise ValueError(f"a run is stopped as one of {STOPPED_OUTCOMES}, not {outcome!r}")
        if self._stop_requested is None:
            self._stop_requested = outcome

    def remaining_s(self) -> float | None:
        """Seconds left before the deadline (negative once past); None without a deadline."""
        return None if self.deadline is None else self.deadline - self._clock()

    def stop_reason(self) -> str | None:
        """The outcome the run must stop with now, or None while it may go on."""
        if self._stop_requested is not None:
            return self._stop_requested
        if self.deadline is not None and self._clock() >= self.deadline:
            return OUTCOME_TIMED_OUT
        return None

    def check(self) -> None:
        reason = self.stop_reason()
        if reason is not None:
            raise RunStopped(reason)

    def take_llm_call(self, prompt_chars: int, max_tokens: Any) -> int | None:
        """Count one LLM call; returns the completion-token cap to send (None: the generator's default).

        :raises RunStopped: the run was stopped.
        :raises LLMBudgetExceededError: the call would exceed the per-question budget or prompt size.
        """
        self.check()
        if prompt_chars > self.max_prompt_chars:
            raise LLMBudgetExceededError(
                f"a prompt of {prompt_chars} characters exceeds the server limit of {self.max_prompt_chars}"
            )
        with self._lock:
            if self.llm_calls >= self.max_llm_calls:
                raise LLMBudgetExceededError(
                    f"the question needed more than {self.max_llm_calls} LLM calls (the server's limit per question)"
                )
            self.llm_calls += 1
        return None if max_tokens is None else bounded_max_tokens(max_tokens, self.max_completion_tokens)


def budget_error_behind(exc: BaseException) -> LLMBudgetExceededError | None:
    """The LLM budget error behind `exc`, through the errors Haystack wraps a failed component's in (its
    `__cause__`, one per nested pipeline)."""
    cause: BaseException | None = exc
    while isinstance(cause, PipelineRuntimeError):
        cause = cause.__cause__
    return cause if isinstance(cause, LLMBudgetExceededError) else None


def bounded_max_tokens(value: Any, ceiling: int | None = None) -> int:
    """A completion-token cap the endpoint may receive: a positive int, at most `ceiling`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"max_tokens must be a positive integer, not {value!r}")
    return value if ceiling is None else min(value, ceiling)


def current_run() -> RunControl | None:
    return _active.get()


def check_run() -> None:
    """Raise `RunStopped` if the run in this context was stopped (called at every step boundary)."""
    control = _active.get()
    if control is not None:
        control.check()
