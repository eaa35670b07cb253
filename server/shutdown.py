"""A worker told to stop (SIGTERM: gunicorn's graceful shutdown or a deploy; SIGINT at a terminal) stops its
runs at once, and each is traced `cancelled` before the drain ends.

On SIGTERM uvicorn stops accepting and waits for in-flight requests (up to gunicorn's `graceful_timeout`)
before the lifespan shutdown runs: a long run would go on calling the model through the whole drain and lose
its trace when the worker was killed at its end. Here the signal itself halts every active run (no further LLM
call starts; the handler does no I/O) and a thread writes their `cancelled` traces right away; then the
signal goes on to the handler it replaced (uvicorn's), so the drain proceeds as before. Questions that reach
a query slot during the drain are refused and traced `cancelled` (`ServerContext.stopping`).

Usage, in the application's lifespan:
    with cancel_runs_on_signals(context):
        yield
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from docqa.run_control import OUTCOME_CANCELLED, RunControl
from docqa.server.context import ServerContext

logger = logging.getLogger(__name__)

# SIGTERM: gunicorn's graceful stop; SIGQUIT: its quick stop (the master got SIGINT); SIGINT: a terminal.
SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGQUIT, signal.SIGINT)
# How long the lifespan shutdown waits for the cancelled traces still being written.
WRITE_WAIT_S = 10.0


@contextmanager
def cancel_runs_on_signals(context: ServerContext,
                           signals: tuple[signal.Signals, ...] = SHUTDOWN_SIGNALS) -> Iterator[None]:
    """While open, `signals` first stop the context's runs (`stop_runs_now`), then reach their previous handler."""
    if threading.current_thread() is not threading.main_thread():
        # Signal handlers belong to the main thread; an in-process test client runs the lifespan elsewhere.
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in signals}
    writers: list[threading.Thread] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        writers.append(stop_runs_now(context))
        _pass_on(previous[signal.Signals(signum)], signum, frame)

    for sig in signals:
        signal.signal(sig, on_signal)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if signal.getsignal(sig) is on_signal:
                signal.signal(sig, handler)
        # uvicorn re-raises the signal once served, with its default action: the traces must be written first.
        for writer in writers:
            writer.join(WRITE_WAIT_S)


def stop_runs_now(context: ServerContext) -> threading.Thread:
    """Halt every active run of `context` and write their `cancelled` traces in a new thread (returned).

    Safe in a signal handler: the halt is a flag each run reads at its next step boundary or LLM call.
    """
    context.stopping = True
    runs = list(context.active_runs)
    for control in runs:
        control.halt(OUTCOME_CANCELLED)
    # Not a daemon: the interpreter waits for these traces before the worker process exits.
    writer = threading.Thread(target=_record_cancelled, args=(runs,), name="docqa-shutdown-traces")
    writer.start()
    return writer


def _record_cancelled(runs: list[RunControl]) -> None:
    for control in runs:
        try:
            control.stop(OUTCOME_CANCELLED)  # False when the run settled first: its own trace stands
        except Exception:  # one failed trace write must not keep the others from being written
            logger.exception("could not record a run cancelled at shutdown")
    if runs:
        logger.warning("shutdown: %d run(s) in progress stopped and traced as cancelled", len(runs))


def _pass_on(handler: Any, signum: int, frame: FrameType | None) -> None:
    if callable(handler):
        handler(signum, frame)
    elif handler == signal.SIG_DFL:
        # Nothing was installed before us: the signal's default action (terminate) still applies.
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
