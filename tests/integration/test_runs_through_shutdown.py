"""A trace for every question through deploys and crashes, against the server as deployed: gunicorn with one
uvicorn worker, a slow scripted LLM (every call takes 1.5 s, each arrival logged) that never lets an MSPR run
end early, and the audit chain checked by `docqa audit verify` afterwards.

- SIGTERM to gunicorn mid-run (a deploy): the run stops at once, no LLM call starts after the signal, and its
  trace says `cancelled` before the worker has drained.
- SIGKILL to every gunicorn process mid-run (OOM kill, power loss): the run stays `started`; the next server
  on the same database closes it as `interrupted` at start.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from docqa.audit.models import AuditRun, AuditTrace
from docqa.audit.runs import process_start
from docqa.db import session_factory
from tests.support.live_server import REPO_ROOT, free_port, gunicorn_server, worker_pids
from tests.support.scripted_openai_server import llm_calls_since
from tests.support.server_stack import Stack, server_stack

pytestmark = pytest.mark.integration

LLM_DELAY_S = 1.5
ENV = {"DOCQA_QUERY_TIMEOUT_S": "120", "DOCQA_MSPR_MAX_STEPS": "10"}


def ask_in_background(stack: Stack, question: str) -> dict[str, Any]:
    """POST an MSPR question from a thread; the dict gets `status` (or `error`) when the request ends."""
    outcome: dict[str, Any] = {}

    def target() -> None:
        try:
            response = httpx.post(f"{stack.base_url}/v1/query", headers=stack.auth("alice"), timeout=120,
                                  json={"question": question, "pipeline": "mspr"})
            outcome["status"] = response.status_code
        except httpx.HTTPError as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def wait_for_llm_call(calls_log: Path, since: float, marker: str, timeout_s: float = 180) -> None:
    deadline = time.monotonic() + timeout_s
    while llm_calls_since(calls_log, since, marker) == 0:
        assert time.monotonic() < deadline, "the run never called the LLM"
        time.sleep(0.1)


def wait_gone(pid: int, timeout_s: float) -> float:
    """Seconds until `pid` exited (a zombie counts as exited)."""
    start = time.monotonic()
    while process_start(pid) is not None:
        assert time.monotonic() - start < timeout_s, f"process {pid} still running after {timeout_s:g} s"
        time.sleep(0.05)
    return time.monotonic() - start


def wait_traced(stack: Stack, question: str, timeout_s: float) -> float:
    """Polls the database until the question has a trace; returns when it was seen (epoch seconds)."""
    deadline = time.monotonic() + timeout_s
    while not stored(stack, question)[0]:
        assert time.monotonic() < deadline, "no trace written"
        time.sleep(0.05)
    return time.time()


def stored(stack: Stack, question: str) -> tuple[list[AuditTrace], list[AuditRun]]:
    with session_factory(stack.settings)() as session:
        traces = list(session.scalars(select(AuditTrace).where(AuditTrace.question == question)))
        runs = list(session.scalars(select(AuditRun).where(AuditRun.question == question)))
        return traces, runs


def audit_verify(stack: Stack) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "docqa.cli", "audit", "verify", "--json"], cwd=REPO_ROOT,
                          env={**os.environ, **stack.env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.fixture
def calls_log(tmp_path: Path) -> Path:
    return tmp_path / "llm-calls.log"


def test_sigterm_mid_run_stops_it_at_once_and_traces_it_cancelled(tmp_path, calls_log):
    with server_stack(tmp_path, workers=1, llm_mode="adversarial", llm_delay_ms=int(LLM_DELAY_S * 1000),
                      extra_env=ENV, llm_calls_log=calls_log) as stack:
        marker = uuid.uuid4().hex
        question = f"Which code word do the quarterly policy reports share? {marker}"
        asked_at = time.time()
        request = ask_in_background(stack, question)
        wait_for_llm_call(calls_log, asked_at, marker)

        signalled_at = time.time()
        os.kill(stack.server.pid, signal.SIGTERM)
        traced_in = wait_traced(stack, question, timeout_s=40) - signalled_at
        drained_in = time.time() - signalled_at + wait_gone(stack.server.pid, timeout_s=40)
        request["thread"].join(10)

        # The call in flight at the signal may finish; none starts afterwards, even once the worker is gone.
        time.sleep(2 * LLM_DELAY_S)
        assert llm_calls_since(calls_log, signalled_at, marker) == 0
        traces, runs = stored(stack, question)
        assert runs == []
        [trace] = traces
        assert trace.status == "cancelled" and trace.answer is None
        # Written while the model call was still in flight: that step is there, marked unfinished.
        assert any(step.error and "not finished" in step.error for step in trace.steps), trace.steps
        assert request.get("status") in (None, 503), request
        report = audit_verify(stack)
        assert report["ok"] and report["broken"] is None
        print(f"\nSIGTERM -> cancelled trace committed: {traced_in:.2f} s; -> gunicorn exited: {drained_in:.2f} s "
              f"(LLM delay {LLM_DELAY_S:g} s per call, graceful_timeout 30 s); LLM calls after the signal: 0")


def test_sigkill_mid_run_leaves_it_started_until_the_next_start_closes_it_interrupted(tmp_path, calls_log):
    with server_stack(tmp_path, workers=1, llm_mode="adversarial", llm_delay_ms=int(LLM_DELAY_S * 1000),
                      extra_env=ENV, llm_calls_log=calls_log) as stack:
        marker = uuid.uuid4().hex
        question = f"Which code word do the quarterly policy reports share? {marker}"
        asked_at = time.time()
        request = ask_in_background(stack, question)
        wait_for_llm_call(calls_log, asked_at, marker)

        # What the OOM killer or a power cut does: every process of the server at once, nothing runs after.
        os.killpg(stack.server.pid, signal.SIGKILL)
        wait_gone(stack.server.pid, timeout_s=10)
        request["thread"].join(10)
        assert "error" in request

        traces, runs = stored(stack, question)
        assert traces == []
        [left] = runs  # visibly started, never traced

        with gunicorn_server(stack.env, free_port(), log_path=tmp_path / "restarted.log"):
            traces, runs = stored(stack, question)
            assert runs == []
            [trace] = traces
            assert (trace.id, trace.status, trace.answer) == (left.id, "interrupted", None)
            assert "ended before it finished" in trace.error and trace.pipeline == "mspr"
            report = audit_verify(stack)
            assert report["ok"] and report["broken"] is None


def test_a_restarted_worker_leaves_the_runs_of_its_live_sibling_alone(tmp_path, calls_log):
    # Each LLM call takes 30 s here, so the run outlasts the replacement worker's start (20-45 s on a busy host).
    env = {**ENV, "DOCQA_LLM_TIMEOUT_S": "120"}
    with server_stack(tmp_path, workers=2, llm_mode="adversarial", llm_delay_ms=30_000, extra_env=env,
                      llm_calls_log=calls_log) as stack:
        log = tmp_path / "gunicorn.log"
        marker = uuid.uuid4().hex
        question = f"Which code word do the quarterly policy reports share? {marker}"
        asked_at = time.time()
        ask_in_background(stack, question)
        wait_for_llm_call(calls_log, asked_at, marker)
        [running] = stored(stack, question)[1]
        [sibling] = [pid for pid in worker_pids(stack.server.pid) if pid != running.pid]

        # The sibling dies as an OOM kill would take it; gunicorn starts another worker, which closes the runs
        # of processes that are gone as it starts, and must not take the live worker's run for one of them.
        started_before = log.read_text().count("Application startup complete")
        os.kill(sibling, signal.SIGKILL)
        killed_at = time.time()
        deadline = time.monotonic() + 120
        while log.read_text().count("Application startup complete") <= started_before:
            assert time.monotonic() < deadline, "gunicorn did not replace the killed worker"
            time.sleep(0.2)
        traces, runs = stored(stack, question)
        assert traces == [] and [run.id for run in runs] == [running.id]
        replaced_in = time.time() - killed_at

        # Still running: a deploy now stops it, and its one trace says cancelled, not interrupted.
        os.kill(stack.server.pid, signal.SIGTERM)
        wait_gone(stack.server.pid, timeout_s=60)
        traces, runs = stored(stack, question)
        assert runs == [] and [(t.id, t.status) for t in traces] == [(running.id, "cancelled")]
        assert audit_verify(stack)["ok"]
        print(f"\nworker replaced and leftovers closed {replaced_in:.1f} s after the SIGKILL; the sibling's run "
              "stayed started")
