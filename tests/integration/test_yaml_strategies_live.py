"""The review's hostile YAML strategies, against the deployed server (gunicorn, PostgreSQL, the scripted LLM):
a file that would send the audit key to a host of its choosing, one that fetches the question's URLs and one with
a Secret are skipped at start-up (logged with file and line) and that host never hears from the server; a file
whose component raises answers `strategy_failed` (502) with a `failed` trace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.loopback_http import LoopbackSite, reply
from tests.support.server_stack import Stack, server_stack
from tests.unit.test_yaml_strategy_contract import HOSTILE_FETCHER, HOSTILE_GENERATOR, HOSTILE_SECRET, RAISES

pytestmark = pytest.mark.integration

HOSTILE_FILES = ("exfiltrate", "fetch", "secret")


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[LoopbackSite]:
    """The host the hostile files point at: it answers anything like an OpenAI endpoint, and records it."""
    completion = b'{"id": "x", "object": "chat.completion", "model": "m", "choices": [{"index": 0, ' \
                 b'"finish_reason": "stop", "message": {"role": "assistant", "content": "got it"}}]}'
    with LoopbackSite({"*": reply(completion)}) as site:
        yield site


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory, elsewhere: LoopbackSite) -> Path:
    workdir = tmp_path_factory.mktemp("yaml_strategies")
    directory = workdir / "pipelines"
    directory.mkdir()
    (directory / "exfiltrate.yaml").write_text(HOSTILE_GENERATOR.format(host=elsewhere.base.split("//")[1]))
    (directory / "fetch.yaml").write_text(HOSTILE_FETCHER.format())
    (directory / "secret.yaml").write_text(HOSTILE_SECRET)
    (directory / "raises.yaml").write_text(RAISES)
    return workdir


@pytest.fixture(scope="module")
def stack(workdir: Path) -> Iterator[Stack]:
    env = {"DOCQA_PIPELINES_DIR": str(workdir / "pipelines")}
    with server_stack(workdir, workers=1, extra_env=env) as running:
        yield running


@pytest.fixture(scope="module")
def client(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.base_url, timeout=120) as http:
        yield http


def test_hostile_files_are_not_served_and_their_host_hears_nothing(client, stack, workdir, elsewhere):
    models = {m["id"] for m in client.get("/v1/models", headers=stack.auth("alice")).json()["data"]}
    assert "raises" in models and not models & set(HOSTILE_FILES)
    question = f"What does {elsewhere.url('/secret')} say about the quarterly policy report?"
    for name in HOSTILE_FILES:
        asked = client.post("/v1/query", headers=stack.auth("alice"), json={"question": question, "pipeline": name})
        assert asked.status_code == 404 and asked.json()["error"]["code"] == "unknown_pipeline", asked.text
    chat = client.post("/v1/chat/completions", headers=stack.auth("alice"),
                       json={"model": "exfiltrate", "messages": [{"role": "user", "content": question}]})
    assert chat.status_code == 404, chat.text
    answered = client.post("/v1/query", headers=stack.auth("alice"), json={"question": question, "pipeline": "auto"})
    assert answered.status_code == 200, answered.text
    assert elsewhere.hits == []
    log = (workdir / "gunicorn.log").read_text()
    for name, needle in (("exfiltrate", "OpenAIChatGenerator"), ("fetch", "LinkContentFetcher"),
                         ("secret", "type: env_var")):
        text = (workdir / "pipelines" / f"{name}.yaml").read_text()
        line = next(n for n, row in enumerate(text.splitlines(), 1) if needle in row)
        assert f"strategy file skipped: {workdir / 'pipelines' / name}.yaml: line {line}: " in log


def test_a_raising_component_is_strategy_failed_with_a_failed_trace(client, stack):
    response = client.post("/v1/query", headers=stack.auth("alice"),
                           json={"question": "What is the code word?", "pipeline": "raises"})
    assert response.status_code == 502, response.text
    error = response.json()["error"]
    assert error["code"] == "strategy_failed"
    assert error["message"] == "strategy 'raises' failed: one of its components raised NoRouteSelectedException"
    [listed] = client.get("/v1/traces", params={"status": "failed", "pipeline": "raises"},
                          headers=stack.auth("audrey")).json()["traces"]
    trace = client.get(f"/v1/traces/{listed['id']}", headers=stack.auth("audrey")).json()
    assert trace["status"] == "failed" and trace["question"] == "What is the code word?"
    assert trace["error"].startswith("StrategyFailedError: strategy 'raises' failed")
    assert [(s["name"], s["error"].split(":")[0]) for s in trace["steps"]] == [("router", "NoRouteSelectedException")]
    assert client.post("/v1/traces/verify", headers=stack.auth("audrey")).json()["ok"] is True
