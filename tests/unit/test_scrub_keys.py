"""docqa API keys pasted into questions: masked in every stored trace field and step."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from docqa.access import AccessScope
from docqa.audit.recorder import TraceRecord, record_answer
from docqa.audit.scrub import MASK, clean, clean_text
from docqa.questions.audited_run import AuditedRun
from docqa.recording import StepRecorder, record_llm_call
from docqa.result import Citation, LLMUsage, PipelineResult
from docqa.settings import Settings
from tests.support.audit import tree_result
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app

SCOPE = AccessScope(tenant="acme", principals=frozenset({"user:alice"}))


@pytest.fixture
def app_and_keys(tmp_path):
    """Real keys, made by `create_key`, so the test follows their actual shape."""
    def echo(prompt: str) -> str:
        return f"Noted: {prompt}"

    return build_test_app(tmp_path, ScriptedChatGenerator(rules=[(".", echo)]))


@pytest.fixture
def key(app_and_keys) -> str:
    return app_and_keys[1]["bob"]


@pytest.fixture
def settings(app_and_keys) -> Settings:
    return app_and_keys[0].state.context.settings


def stored_text(settings: Settings) -> str:
    """Every audit row, as an auditor's text search over the database sees it."""
    engine = create_engine(settings.resolved_database_url())
    try:
        with engine.connect() as conn:
            rows = [dict(row._mapping) for table in ("audit_traces", "audit_steps")
                    for row in conn.execute(text(f"SELECT * FROM {table}"))]
    finally:
        engine.dispose()
    assert rows
    return json.dumps(rows, default=str)


def secret_of(key: str) -> str:
    return key.split("_", 2)[2]


def assert_masked(stored: str, key: str) -> None:
    assert key not in stored
    assert secret_of(key) not in stored
    assert MASK in stored


class TestPattern:
    def test_a_key_is_masked_whole_wherever_it_sits(self, key):
        for template in ("{k}", "my key is {k}.", "key={k}&x=1", "my_{k}", '"{k}"', "({k})", "Bearer {k}"):
            masked = clean_text(template.format(k=key), [])
            assert key not in masked and secret_of(key) not in masked and MASK in masked, template

    def test_a_clipped_key_is_masked_too(self, key):
        assert clean_text(key[:30] + "…[truncated]", []) == MASK + "…[truncated]"

    def test_ordinary_text_is_left_alone(self):
        for plain in ("dq_ratio is 0.4", "the dq_index table", "dq_0123_short", "sk-short"):
            assert clean_text(plain, []) == plain

    def test_dict_keys_are_masked(self, key):
        assert clean({f"answer to {key}": 1}, []) == {f"answer to {MASK}": 1}


class TestStoredTraces:
    def test_question_answer_steps_prompts_and_citations(self, settings, key):
        question = f"Is my key {key} still valid?"
        result = tree_result(question=question, answer=f"Your key {key} is valid [1].")
        result.citations.append(Citation("doc-k", "keys.txt", 0.5, f"key {key}"))
        recorder = StepRecorder()
        with recorder.step("check", "key_checker", inputs={"pasted": key, "query": question}) as step:
            record_llm_call(prompt=f"Check {key}", response=f"{key} looks fine", usage=LLMUsage(1, 3, 3))
            step.outputs = {"checked": [key], question: "by question"}
        result.steps.append(dataclasses.replace(recorder.steps[0], index=len(result.steps)))
        record_answer(settings, TraceRecord(asked_by="alice", tenant="acme", question=question, pipeline="tree_test",
                                            models={"generator": "gen"}, result=result))
        assert_masked(stored_text(settings), key)

    def test_failed_run_error_and_steps(self, settings, key):
        class Failing:
            name = "failing"

            def config(self) -> dict[str, Any]:
                return {"top_k": 1}

            def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None,
                    **_options: Any) -> PipelineResult:
                recorder = StepRecorder()
                with recorder.step("generation", "generator", inputs={"question": question}):
                    record_llm_call(prompt=f"Answer: {question}", response="", usage=LLMUsage(1, 5, 0))
                    raise RuntimeError(f"upstream refused the prompt {question!r}")

        with pytest.raises(RuntimeError):
            AuditedRun(Failing(), f"What can {key} do?", SCOPE, "alice", settings).run()
        stored = stored_text(settings)
        assert_masked(stored, key)
        assert "upstream refused the prompt" in stored

    def test_through_the_api_the_auditor_cannot_find_the_key(self, app_and_keys, key):
        app, keys = app_and_keys
        with TestClient(app) as client:
            response = client.post("/v1/query", headers=auth(keys["bob"]),
                                   json={"question": f"Why does {key} fail?", "pipeline": "no_retrieval"})
            assert response.status_code == 200
            trace_id = response.json()["trace_id"]
            auditor = auth(keys["audrey"])
            trace = client.get(f"/v1/traces/{trace_id}", headers=auditor)
            assert trace.status_code == 200
            assert_masked(trace.text, key)
            found = client.get("/v1/traces", params={"text": secret_of(key)[:40]}, headers=auditor).json()
            assert found["total"] == 0
        assert_masked(stored_text(app.state.context.settings), key)
