"""One question's run and its single audit trace, written by whoever settles the outcome first.

`run()` (in a worker thread) first commits the run's `started` row, then writes `completed` or `failed`;
`control.stop(...)` (from the request side, at a timeout, a disconnect or a server shutdown) writes
`timed_out`/`cancelled` at once with the steps taken so far, and the run stops at its next step boundary
without writing anything more. The trace id is `run_id` in every case; a run whose process died is traced
`interrupted` later (`docqa.audit.recorder.close_interrupted_runs`).

What the service decided before the run is data of the run, recorded in every outcome's trace: `run_data`
(how the strategy was selected) beside the strategy's config, and `leading_steps` (a conversation rewrite)
before the strategy's own steps. The config hash is the strategy's (`config_hash`, computed once when it was
built): the run data is covered by the trace's chain MAC like every other recorded field.

Usage:
    result = AuditedRun(pipeline, "Who founded Acme?", scope, "alice", settings,
                        run_data={"selection": {"mode": "explicit", "pipeline": "standard"}}).run()
    result.trace_id  # committed before the answer is returned
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from docqa.access import AccessScope
from docqa.audit.recorder import (
    TraceRecord,
    close_interrupted_runs_now_and_then,
    models_from_settings,
    open_run,
    record_answer,
    stopped_description,
)
from docqa.pipelines.base import QAPipeline, config_hash
from docqa.recording import StepRecorder, capture_recorders
from docqa.result import PipelineResult, Step
from docqa.run_control import OUTCOME_CANCELLED, OUTCOME_COMPLETED, OUTCOME_FAILED, RunControl, RunStopped
from docqa.settings import Settings


class AuditedRun:
    """Runs `pipeline` on `question` as `scope` under `control`, and writes the run's one trace."""

    def __init__(
        self,
        pipeline: QAPipeline,
        question: str,
        scope: AccessScope,
        asked_by: str,
        settings: Settings,
        *,
        filters: dict[str, Any] | None = None,
        models: dict[str, Any] | None = None,
        run_options: Mapping[str, Any] | None = None,
        control: RunControl | None = None,
        run_data: Mapping[str, Any] | None = None,
        leading_steps: Sequence[Step] = (),
        strategy_hash: str | None = None,
    ) -> None:
        """
        :param asked_by: the authenticated caller (user id), never taken from the request body.
        :param models: the model serving each LLM role; defaults to the settings' per-role endpoints.
        :param run_options: strategy-specific keyword arguments of `pipeline.run` (e.g. AT-RAG's `as_of`).
        :param control: the run's budget, deadline and cancellation (default: the settings' limits, no deadline).
        :param run_data: recorded in the trace's config beside the strategy's (e.g. `selection`).
        :param leading_steps: steps taken before the strategy ran (e.g. the conversation rewrite), recorded first.
        :param strategy_hash: the hash of `pipeline.config()` when already known (the pipeline cache keeps it).
        """
        self.pipeline = pipeline
        self.question = question
        self.scope = scope
        self.settings = settings
        self.filters = filters
        self.run_options = dict(run_options or {})
        self.control = control or RunControl.from_settings(settings)
        self.control.on_stop(self._record_stopped)
        self.run_data = dict(run_data or {})
        self.leading_steps = list(leading_steps)
        self._strategy_hash = strategy_hash
        self._recorders: list[StepRecorder] = []
        self.run_id = str(uuid.uuid4())
        # A stop and the start of the run never interleave: a run stopped first never writes its `started` row.
        self._starting = threading.Lock()
        self._common: dict[str, Any] = {
            "asked_by": asked_by, "tenant": scope.tenant, "pipeline": pipeline.name,
            "models": models if models is not None else models_from_settings(settings),
            "asked_at": datetime.now(UTC),
        }

    def run(self) -> PipelineResult:
        """Run the pipeline; returns the result with its committed trace id, or raises (trace written)."""
        close_interrupted_runs_now_and_then(self.settings)
        with self._starting:
            if self.control.outcome is not None:  # stopped before it began; the stop wrote the trace
                raise RunStopped(self.control.outcome)
            open_run(self.settings, run_id=self.run_id, question=self.question, config=self._config(),
                     timeout_s=self.control.remaining_s(), **self._common)
        with capture_recorders() as recorders, self.control.active():
            self._recorders = recorders
            try:
                result = self.pipeline.run(self.question, self.scope, self.filters, **self.run_options)
            except RunStopped as exc:
                # The run noticed its own deadline before the request side did.
                if self.control.decide(exc.outcome):
                    self._record_stopped(exc.outcome)
                raise
            except Exception as exc:
                if self.control.decide(OUTCOME_FAILED):
                    record = TraceRecord(
                        question=self.question, config=self._config(), config_hash=self._config_hash(),
                        error=f"{type(exc).__name__}: {exc}", steps=self._steps(_steps_of_failed_run(recorders)),
                        **self._common,
                    )
                    record_answer(self.settings, record, run_id=self.run_id)
                raise
        if not self.control.decide(OUTCOME_COMPLETED):
            # Timed out or cancelled while finishing: the caller never got this answer, and the trace says so.
            raise RunStopped(self.control.outcome or OUTCOME_CANCELLED)
        result.config = {**result.config, **self.run_data}
        result.steps = self._steps(result.steps)
        record = TraceRecord(question=result.question, result=result, **self._common)
        result.trace_id = record_answer(self.settings, record, run_id=self.run_id)
        return result

    def _config(self) -> dict[str, Any]:
        """The config of a run without a result (started, failed, stopped): the strategy's and the run data."""
        return {**self.pipeline.config(), **self.run_data}

    def _config_hash(self) -> str:
        if self._strategy_hash is None:
            self._strategy_hash = config_hash(self.pipeline.config())
        return self._strategy_hash

    def _steps(self, steps: Sequence[Step]) -> list[Step]:
        """The leading steps, then the strategy's, renumbered after them."""
        if not self.leading_steps:
            return list(steps)
        shift = len(self.leading_steps)
        leading = [replace(step, index=index) for index, step in enumerate(self.leading_steps)]
        return [*leading, *(replace(step, index=step.index + shift,
                                    parent=None if step.parent is None else step.parent + shift) for step in steps)]

    def _record_stopped(self, outcome: str) -> None:
        with self._starting:
            described = stopped_description(outcome)
            steps = self._recorders[0].snapshot(f"not finished: the run {described}") if self._recorders else []
            record = TraceRecord(
                question=self.question, config=self._config(), config_hash=self._config_hash(), status=outcome,
                error=f"the run {described}", steps=self._steps(steps), **self._common,
            )
            record_answer(self.settings, record, run_id=self.run_id)


def _steps_of_failed_run(recorders: list[StepRecorder]) -> list[Step]:
    # The first recorder is the pipeline's own; any later one belongs to a nested helper and would reuse
    # step positions.
    return list(recorders[0].steps) if recorders else []

