"""`docqa llm status` and `docqa llm stop` say what runs and what was stopped, without starting a model."""

from __future__ import annotations

import json
import time

import pytest

from docqa.cli import main
from docqa.llm import local_server


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCQA_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("DOCQA_LLM_BASE_URL", raising=False)
    return tmp_path


def record_server(data_dir, monkeypatch, pid: int = 4242) -> None:
    state = {"pid": pid, "port": 40123, "started_at": time.time() - 125,
             "config": {"model_path": "/models/gemma.gguf"}}
    (data_dir / "llm").mkdir()
    (data_dir / "llm" / "server.json").write_text(json.dumps(state))
    monkeypatch.setattr(local_server, "_is_our_server", lambda p: p == pid)
    monkeypatch.setattr(local_server, "_terminate", lambda p: p == pid)


def test_status_when_nothing_runs_says_when_it_starts(data_dir, capsys) -> None:
    assert main(["llm", "status"]) == 1
    out = capsys.readouterr().out
    assert "not running" in out and "docqa llm start" in out
    assert not (data_dir / "llm").exists()  # asking starts nothing


def test_status_and_stop_name_the_server(data_dir, monkeypatch, capsys) -> None:
    record_server(data_dir, monkeypatch)
    assert main(["llm", "status"]) == 0
    out = capsys.readouterr().out
    assert "running: local LLM server at http://127.0.0.1:40123/v1 (pid 4242" in out
    assert "/models/gemma.gguf" in out and "up 2 min" in out
    assert main(["llm", "stop"]) == 0
    assert "stopped the local LLM server at http://127.0.0.1:40123/v1 (pid 4242" in capsys.readouterr().out
    assert main(["llm", "stop"]) == 0
    assert f"no local LLM server was running for {data_dir}" in capsys.readouterr().out


def test_status_names_a_configured_endpoint(data_dir, monkeypatch, capsys) -> None:
    monkeypatch.setenv("DOCQA_LLM_BASE_URL", "http://127.0.0.1:9/v1")
    assert main(["llm", "status"]) == 1
    out = capsys.readouterr().out
    assert "models are served by http://127.0.0.1:9/v1" in out and "docqa llm start" not in out
