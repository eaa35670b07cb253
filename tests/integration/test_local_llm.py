"""Through the real local LLM server: text, Yes/No and JSON come back well-formed (shape, not correctness)."""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from docqa.errors import LLMUnavailableError
from docqa.llm.calls import generate_json, generate_text, generate_yes_no
from docqa.llm.client import build_chat_generator, check_llm_endpoint
from docqa.llm.local_server import ensure_local_llm, log_path, stop_local_llm
from docqa.recording import StepRecorder
from docqa.settings import LLM_ROLES, Settings
from docqa.spans import step_span
from docqa.step_tracer import ensure_step_tracing, record_steps

pytestmark = pytest.mark.integration

PASSAGES = (
    "Passage 1: The Eiffel Tower was completed in 1889 for the World's Fair in Paris.\n"
    "Passage 2: Gustave Eiffel's company designed and built the tower."
)


class TestThroughTheLocalServer:
    def test_every_role_reaches_the_same_local_server(self, local_llm_settings):
        local = ensure_local_llm(local_llm_settings)
        for role in LLM_ROLES:
            check_llm_endpoint(local_llm_settings, role)
            assert build_chat_generator(local_llm_settings, role).api_base_url == local.base_url

    def test_text(self, local_llm_settings):
        generator = build_chat_generator(local_llm_settings, "generator")
        recorder = StepRecorder()
        ensure_step_tracing()
        with record_steps(recorder), step_span("generation", "generator"):
            text = generate_text(generator, f"{PASSAGES}\n\nWhen was the Eiffel Tower completed?", max_tokens=24)
        assert isinstance(text, str) and text
        usage = recorder.steps[0].llm
        assert usage.calls == 1 and usage.prompt_tokens > 0 and 0 < usage.completion_tokens <= 24

    def test_yes_no_is_constrained(self, local_llm_settings):
        generator = build_chat_generator(local_llm_settings, "grader")
        recorder = StepRecorder()
        ensure_step_tracing()
        with record_steps(recorder), step_span("grading", "grader"):
            verdict = generate_yes_no(
                generator, f"{PASSAGES}\n\nDo the passages say when the tower was completed? Answer Yes or No."
            )
        assert verdict in (True, False)
        # The raw reply is exactly the constrained JSON, so the server really applied the grammar.
        raw = recorder.steps[0].outputs["llm_calls"][-1]["response"]
        assert json.loads(raw) in ("Yes", "No")

    def test_json_is_constrained(self, local_llm_settings):
        generator = build_chat_generator(local_llm_settings, "planner")
        schema = {
            "type": "object",
            "properties": {
                "sub_questions": {"type": "array", "items": {"type": "string", "maxLength": 80},
                                  "minItems": 1, "maxItems": 2},
            },
            "required": ["sub_questions"],
            "additionalProperties": False,
        }
        data = generate_json(
            generator, "Split into sub-questions: Who designed the tower completed in 1889 in Paris?",
            schema, name="plan", max_tokens=96,
        )
        assert data is not None
        assert isinstance(data["sub_questions"], list) and 1 <= len(data["sub_questions"]) <= 2
        assert all(isinstance(item, str) for item in data["sub_questions"])


class TestSharedServer:
    def test_busy_server_is_reused_not_replaced(self, local_llm_settings):
        local = ensure_local_llm(local_llm_settings)
        generator = build_chat_generator(local_llm_settings, "generator")
        with ThreadPoolExecutor(max_workers=1) as pool:
            answer = pool.submit(generate_text, generator, "Write a long story about a tower.", max_tokens=64)
            time.sleep(0.5)  # let the generation take the model lock
            assert ensure_local_llm(local_llm_settings) == local
            assert isinstance(answer.result(timeout=300), str)


class TestServerLifecycle:
    """Each test owns its data_dir, hence its own server."""

    def test_reused_across_processes_restarted_when_dead_and_stopped(self, tmp_path):
        settings = Settings(data_dir=tmp_path)
        try:
            first = ensure_local_llm(settings)
            assert ensure_local_llm(settings) == first
            env = {"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", ""),
                   "DOCQA_DATA_DIR": str(tmp_path)}
            other = subprocess.run(
                [sys.executable, "-c",
                 "from docqa.llm.local_server import ensure_local_llm; from docqa.settings import Settings; "
                 "print(ensure_local_llm(Settings()).port)"],
                capture_output=True, text=True, env=env, timeout=120, check=True,
            )
            assert int(other.stdout.strip()) == first.port

            environ = Path(f"/proc/{first.pid}/environ").read_bytes().split(b"\0")
            assert not [v for v in environ if v.startswith((b"DOCQA_", b"OPENAI_"))]

            os.kill(first.pid, signal.SIGKILL)
            _wait_until_gone(first.pid)
            second = ensure_local_llm(settings)
            assert second.pid != first.pid
            check_llm_endpoint(settings, "reasoner")
        finally:
            stopped = stop_local_llm(settings)
        assert stopped is True
        with pytest.raises(LLMUnavailableError):
            check_llm_endpoint(settings.model_copy(update={"llm_base_url": second.base_url}), "reasoner")

    def test_unloadable_model_reports_the_server_log(self, tmp_path):
        model = tmp_path / "broken.gguf"
        model.write_bytes(b"not a model" * 100)
        settings = Settings(data_dir=tmp_path, local_llm_model_path=model)
        with pytest.raises(LLMUnavailableError) as info:
            ensure_local_llm(settings)
        message = info.value.message
        assert "exited with code" in message and str(log_path(settings)) in message
        assert "Failed to load model" in message
        assert "\n" not in message


def _wait_until_gone(pid: int, timeout_s: float = 10.0) -> None:
    """Until the process has exited (a zombie counts: its parent, this process, has not reaped it yet)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return
        if state == "Z":
            return
        time.sleep(0.1)
    raise AssertionError(f"process {pid} still running after {timeout_s} s")
