"""Secrets pasted into a question are masked where it enters docqa: no model, conversation, step, trace or eval
result ever holds them (`docqa.audit.scrub.mask_secrets`, called by every entry point)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError

from docqa.access import AccessScope
from docqa.audit.scrub import MASK, mask_secrets
from docqa.evaluation.datasets import EvalQuestion
from docqa.evaluation.runner import RESULTS_FILE, run_evaluation
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.scripted_openai_server import scripted_openai_server
from tests.support.server_app import auth, build_test_app

# AWS's documented example access key id and secret (never valid), and a JWT of {"alg":"HS256"}.{"sub":"42"}.
AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI0MiJ9.m2QYMJ7VuNl5RTlCq9iZ7yqGOB3WAt3T2sT1Yx1fKnE"
# The MCP protocol version the in-process /mcp endpoint is called with.
MCP_VERSION = "2026-07-28"


def secret_of(key: str) -> str:
    """The secret part of a docqa key `dq_<key id>_<secret>` (the secret itself may hold `_`)."""
    return key.split("_", 2)[2]


def assert_clean(text: str, *secrets: str) -> None:
    for secret in secrets:
        assert secret not in text


class TestMaskSecrets:
    @pytest.mark.parametrize(
        "secret",
        [
            "dq_0123456789abcdef_s3cr3t-Secret_value",
            AWS_KEY_ID,
            "ASIAY34FZKBOKMUTVV7A",
            "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
            "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz",
            "xoxb-1234567890-abcdefghij",
            "AIzaSyD-1234567890abcdefghijklmnopqrstu",
            "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
            "sk-proj-abcdefghijklmnop1234",
            JWT,
            "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
        ],
    )
    def test_credential_shapes_are_masked(self, secret):
        masked = mask_secrets(f"Why is {secret} refused by the gateway?", Settings())
        assert masked == f"Why is {MASK} refused by the gateway?"

    @pytest.mark.parametrize(
        ("question", "expected"),
        [
            ("curl -H 'Authorization: Bearer abcdef1234567890xyz'", f"curl -H 'Authorization: Bearer {MASK}'"),
            (f"aws_secret_access_key = {AWS_SECRET} fails", f"aws_secret_access_key = {MASK} fails"),
            ("my password=Hunter2024! is refused", f"my password={MASK} is refused"),
            (
                "post to https://hooks.slack.com/services/T000/B000/XXXXXXXX",
                "post to https://hooks.slack.com/services/***",
            ),
        ],
    )
    def test_the_name_in_front_of_a_masked_value_stays(self, question, expected):
        assert mask_secrets(question, Settings()) == expected

    @pytest.mark.parametrize(
        "question",
        [
            "What are the basic principles of the travel policy?",
            "Is a bearer bond negotiable under the 2024 rules?",
            "Which sk-learn-compatible estimators does the team use?",
            "Was the 2024 budget 1234567890123456 euros or less?",
            "What does the AKIA prefix of an AWS key mean?",
            "The password policy says: minimum length 12. Is that still true?",
            "How often is the api_key rotated?",
            "What does token: mean in the log format?",
            "Explain JWT eyJ headers and the dq_ratio metric.",
        ],
    )
    def test_ordinary_questions_are_left_alone(self, question):
        assert mask_secrets(question, Settings()) == question

    def test_the_servers_own_credentials_are_masked(self):
        settings = Settings(llm_api_key="local-llm-key-31337", database_url="postgresql://app:pg-Pass-77@db/docqa")
        masked = mask_secrets("is local-llm-key-31337 or pg-Pass-77 the right one?", settings)
        assert masked == f"is {MASK} or {MASK} the right one?"

    def test_operator_patterns_from_the_environment(self, monkeypatch):
        monkeypatch.setenv("DOCQA_SECRET_PATTERNS", json.dumps([r"\bcorp-[0-9a-f]{12}\b", r"EMP\d{6}"]))
        settings = Settings()
        assert mask_secrets("corp-0123456789ab for EMP123456, not corp-xyz", settings) == (
            f"{MASK} for {MASK}, not corp-xyz"
        )

    @pytest.mark.parametrize(
        ("pattern", "reason"), [("corp-(", "not a regular expression"), ("x*", "matches the empty string")]
    )
    def test_unusable_operator_patterns_are_refused_at_load(self, pattern, reason):
        with pytest.raises(ValidationError, match=reason):
            Settings(secret_patterns=[pattern])


@pytest.fixture
def llm() -> ScriptedChatGenerator:
    # Echoes the prompt, so a secret that reached the model would also come back in the answer.
    return ScriptedChatGenerator(rules=[(".", lambda prompt: f"Noted: {prompt}")])


@pytest.fixture
def served(tmp_path, llm):
    app, keys = build_test_app(tmp_path, llm)
    with TestClient(app) as client:
        yield client, keys


def prompts(llm: ScriptedChatGenerator) -> str:
    assert llm.calls
    return json.dumps(llm.calls)


class TestHttpEntries:
    def test_query_steps_and_trace_hold_the_question_masked(self, served, llm):
        client, keys = served
        key = keys["bob"]
        response = client.post(
            "/v1/query",
            headers=auth(keys["alice"]),
            json={"question": f"Is my key {key} (and {AWS_KEY_ID}) still valid?", "pipeline": "no_retrieval"},
        )
        assert response.status_code == 200, response.text
        assert_clean(prompts(llm), secret_of(key), AWS_KEY_ID)
        assert_clean(response.text, secret_of(key), AWS_KEY_ID)
        assert f"Is my key {MASK} (and {MASK}) still valid?" in json.dumps(response.json()["steps"])
        trace = client.get(f"/v1/traces/{response.json()['trace_id']}", headers=auth(keys["audrey"])).json()
        assert trace["question"] == f"Is my key {MASK} (and {MASK}) still valid?"
        assert_clean(json.dumps(trace), secret_of(key), AWS_KEY_ID)

    def test_streamed_steps_hold_the_question_masked(self, served, llm):
        client, keys = served
        response = client.post(
            "/v1/query",
            headers=auth(keys["alice"]),
            json={"question": f"Does {JWT} still work?", "pipeline": "no_retrieval", "stream": True},
        )
        assert response.status_code == 200 and "event: result" in response.text
        assert_clean(response.text, JWT.split(".")[2])
        assert_clean(prompts(llm), JWT.split(".")[2])

    def test_a_conversation_stores_title_and_turns_masked(self, served, llm):
        client, keys = served
        key = keys["bob"]
        first = client.post(
            "/v1/query",
            headers=auth(keys["alice"]),
            json={
                "question": f"Where is Halcyon registered? My key is {key}",
                "pipeline": "no_retrieval",
                "conversation_id": "new",
            },
        )
        assert first.status_code == 200, first.text
        conversation_id = first.json()["conversation_id"]
        follow_up = client.post(
            "/v1/query",
            headers=auth(keys["alice"]),
            json={
                "question": f"and when was it founded? {AWS_KEY_ID}",
                "pipeline": "no_retrieval",
                "conversation_id": conversation_id,
            },
        )
        assert follow_up.status_code == 200, follow_up.text
        assert_clean(prompts(llm), secret_of(key), AWS_KEY_ID)

        stored = client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys["alice"])).json()
        assert stored["title"] == f"Where is Halcyon registered? My key is {MASK}"
        assert [turn["question"] for turn in stored["turns"]] == [
            f"Where is Halcyon registered? My key is {MASK}",
            f"and when was it founded? {MASK}",
        ]
        assert_clean(json.dumps(stored), secret_of(key), AWS_KEY_ID)
        listed = client.get("/v1/conversations", headers=auth(keys["alice"])).text
        assert_clean(listed, secret_of(key))

    def test_every_user_turn_of_an_openai_chat_is_masked(self, served, llm):
        client, keys = served
        key = keys["bob"]
        response = client.post(
            "/v1/chat/completions",
            headers=auth(keys["alice"]),
            json={
                "model": "no_retrieval",
                "conversation_id": "new",
                "messages": [
                    {"role": "user", "content": f"Where is Halcyon registered? key {key}"},
                    {"role": "assistant", "content": "In Oslo."},
                    {"role": "user", "content": [{"type": "text", "text": f"and when was it founded? {AWS_KEY_ID}"}]},
                ],
            },
        )
        assert response.status_code == 200, response.text
        assert_clean(prompts(llm), AWS_KEY_ID)
        assert_clean(response.text, AWS_KEY_ID, secret_of(key))
        assert response.json()["docqa"]["question"].endswith(MASK)
        conversation_id = response.json()["docqa"]["conversation_id"]
        stored = client.get(f"/v1/conversations/{conversation_id}", headers=auth(keys["alice"])).json()
        assert stored["title"] == f"and when was it founded? {MASK}"
        assert_clean(json.dumps(stored), AWS_KEY_ID)

    def test_earlier_turns_of_an_openai_chat_are_masked_before_the_rewrite(self, served, llm):
        client, keys = served
        # Unmasked, the key would be the subject the follow-up's "it" is rewritten to, and so reach the model.
        response = client.post(
            "/v1/chat/completions",
            headers=auth(keys["alice"]),
            json={
                "model": "no_retrieval",
                "messages": [
                    {"role": "user", "content": f"Who owns {AWS_KEY_ID}?"},
                    {"role": "user", "content": "and when was it created?"},
                ],
            },
        )
        assert response.status_code == 200, response.text
        assert response.json()["docqa"]["question"] == f"When was it created? (regarding: Who owns {MASK})"
        assert_clean(prompts(llm), AWS_KEY_ID)

    def test_an_mcp_ask_holds_the_question_masked(self, served, llm):
        client, keys = served
        key = keys["bob"]
        meta = {
            "io.modelcontextprotocol/protocolVersion": MCP_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
        }
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {
                "name": "ask",
                "_meta": meta,
                "arguments": {
                    "question": f"Is my key {key} (and {AWS_KEY_ID}) still valid?",
                    "strategy": "no_retrieval",
                },
            },
        }
        response = client.post(
            "/mcp",
            json=call,
            headers={
                **auth(keys["alice"]),
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": MCP_VERSION,
                "Mcp-Method": "tools/call",
                "Mcp-Name": "ask",
            },
        )
        assert response.status_code == 200, response.text
        assert response.json()["result"].get("isError") is not True, response.text
        assert_clean(prompts(llm), secret_of(key), AWS_KEY_ID)
        assert_clean(response.text, secret_of(key), AWS_KEY_ID)
        traces = client.get("/v1/traces", headers=auth(keys["audrey"])).json()["traces"]
        assert traces[0]["question"] == f"Is my key {MASK} (and {MASK}) still valid?"


class TestCommandLineEntries:
    def test_docqa_ask_never_sends_the_key(self, tmp_path):
        calls_log = tmp_path / "llm_calls.jsonl"
        key = "dq_0123456789abcdef_s3cr3t-Secret_value"
        with scripted_openai_server(mode="echo", answer="Noted.", calls_log=str(calls_log)) as base_url:
            env = {
                **os.environ,
                "DOCQA_DATA_DIR": str(tmp_path / "data"),
                "DOCQA_LLM_BASE_URL": base_url,
                "DOCQA_LLM_MODEL": "scripted",
                "DOCQA_LLM_MAX_RETRIES": "0",
            }
            proc = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "docqa.cli",
                    "ask",
                    f"Is {key} or {AWS_KEY_ID} valid?",
                    "--pipeline",
                    "no_retrieval",
                    "--json",
                ],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
        assert proc.returncode == 0, proc.stderr
        sent = calls_log.read_text()
        assert sent.strip() and f"Is {MASK} or {MASK} valid?" in sent
        assert_clean(sent + proc.stdout + proc.stderr, secret_of(key), AWS_KEY_ID)
        assert json.loads(proc.stdout)["question"] == f"Is {MASK} or {MASK} valid?"

    def test_eval_results_and_prompts_hold_the_question_masked(self, tmp_path, llm):
        settings = Settings(data_dir=tmp_path / "data")
        runtime = Runtime(settings, chat_generator_factory=lambda _role: llm)
        question = EvalQuestion("k1", f"Is {AWS_KEY_ID} the deploy key?", ("no",))
        [record] = run_evaluation(
            runtime,
            [question],
            ["no_retrieval"],
            tmp_path / "run",
            scope=AccessScope("acme", frozenset({"alice"})),
            progress=False,
        )
        assert record.error is None and record.question == f"Is {MASK} the deploy key?"
        assert_clean(prompts(llm) + Path(tmp_path / "run" / RESULTS_FILE).read_text(), AWS_KEY_ID)
