"""A worker told to stop: its runs are halted by the signal itself and traced `cancelled`, the signal still
reaches the handler it replaced (uvicorn's drain), and questions reaching a slot during the drain are refused.
The same against gunicorn: tests/integration/test_runs_through_shutdown.py."""

from __future__ import annotations

import os
import signal
import time
from types import SimpleNamespace

from fastapi.testclient import TestClient
from sqlalchemy import select
from sqlalchemy.orm import Session

from docqa.audit.models import AuditRun, AuditTrace
from docqa.db import make_engine
from docqa.run_control import RunControl
from docqa.server.shutdown import cancel_runs_on_signals
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


def limits() -> RunControl:
    return RunControl(max_llm_calls=4, max_completion_tokens=64, max_prompt_chars=10_000)


def test_a_shutdown_signal_halts_every_run_traces_it_and_reaches_the_previous_handler():
    runs = [limits(), limits()]
    written: list[str] = []
    for control in runs:
        control.on_stop(written.append)
    context = SimpleNamespace(active_runs=set(runs), stopping=False)
    previous_calls: list[int] = []

    def previous(signum: int, _frame: object) -> None:
        previous_calls.append(signum)

    original = signal.signal(signal.SIGTERM, previous)
    try:
        with cancel_runs_on_signals(context, (signal.SIGTERM,)):  # type: ignore[arg-type]
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs on the main thread at its next bytecode boundary
            assert context.stopping
            assert [control.stop_reason() for control in runs] == ["cancelled", "cancelled"]
            assert previous_calls == [signal.SIGTERM]
        # Leaving waits for the trace writer, and gives the signal back to the handler it replaced.
        assert written == ["cancelled", "cancelled"]
        assert [control.outcome for control in runs] == ["cancelled", "cancelled"]
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, original)


def test_a_question_reaching_a_slot_during_the_drain_is_refused_and_traced_cancelled(tmp_path):
    llm = ScriptedChatGenerator(default="Paris")
    app, keys = build_test_app(tmp_path, llm)
    with TestClient(app) as client:
        app.state.context.stopping = True
        response = client.post("/v1/query", headers=auth(keys["alice"]),
                               json={"question": "What is the capital of France?", "pipeline": "no_retrieval"})
    assert response.status_code == 503 and response.json()["error"]["code"] == "cancelled"
    assert llm.calls == []
    settings = app.state.context.settings
    with Session(make_engine(settings.resolved_database_url())) as session:
        statuses = [t.status for t in session.scalars(select(AuditTrace))
                    if t.question == "What is the capital of France?"]
        assert statuses == ["cancelled"]
        assert list(session.scalars(select(AuditRun))) == []
