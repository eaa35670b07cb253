"""Building per-role chat generators from settings, and the endpoint check run before a pipeline."""

import json
import socket
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from haystack.components.generators.chat import OpenAIChatGenerator
from pydantic import SecretStr

from docqa.errors import LLMUnavailableError
from docqa.llm import client
from docqa.llm.local_server import LocalLLM
from docqa.settings import LLMEndpoint, Settings


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def http_status() -> Iterator[Callable[[int], str]]:
    """A loopback HTTP server answering every GET with a chosen status; yields a function status -> base URL."""
    servers = []

    def start(status: int) -> str:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                body = json.dumps({"data": []}).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


class TestBuildChatGenerator:
    def test_global_endpoint_and_generation_settings(self):
        settings = Settings(
            llm_base_url="http://vllm.test/v1", llm_model="big", llm_timeout_s=7, llm_max_retries=3,
            llm_temperature=0.2, llm_max_tokens=99,
        )
        generator = client.build_chat_generator(settings, "generator")
        assert isinstance(generator, OpenAIChatGenerator)
        assert generator.api_base_url == "http://vllm.test/v1"
        assert generator.model == "big"
        assert generator.timeout == 7
        assert generator.max_retries == 3
        assert generator.generation_kwargs == {"temperature": 0.2, "max_tokens": 99}

    def test_role_overrides_win_and_other_roles_keep_the_global_endpoint(self):
        settings = Settings(
            llm_base_url="http://global.test/v1", llm_model="small", llm_api_key=SecretStr("global-key"),
            llm_roles={"grader": LLMEndpoint(base_url="http://grader.test/v1", model="judge",
                                             api_key=SecretStr("grader-key"))},
        )
        grader = client.build_chat_generator(settings, "grader")
        reasoner = client.build_chat_generator(settings, "reasoner")
        assert (grader.api_base_url, grader.model, grader.api_key.resolve_value()) == (
            "http://grader.test/v1", "judge", "grader-key")
        assert (reasoner.api_base_url, reasoner.model, reasoner.api_key.resolve_value()) == (
            "http://global.test/v1", "small", "global-key")

    def test_role_override_of_the_model_only_keeps_the_global_url(self):
        settings = Settings(llm_base_url="http://global.test/v1", llm_roles={"planner": {"model": "planner-m"}})
        planner = client.build_chat_generator(settings, "planner")
        assert (planner.api_base_url, planner.model) == ("http://global.test/v1", "planner-m")

    def test_roles_from_environment_variables(self, monkeypatch):
        monkeypatch.setenv("DOCQA_LLM_BASE_URL", "http://env.test/v1")
        monkeypatch.setenv("DOCQA_LLM_ROLES__SUMMARIZER__MODEL", "summ")
        generator = client.build_chat_generator(Settings(), "summarizer")
        assert (generator.api_base_url, generator.model) == ("http://env.test/v1", "summ")

    def test_unknown_role_is_rejected(self):
        with pytest.raises(ValueError, match="unknown LLM role"):
            client.build_chat_generator(Settings(llm_base_url="http://x.test/v1"), "poet")

    def test_key_from_environment_is_referenced_not_copied(self, monkeypatch):
        monkeypatch.setenv("DOCQA_LLM_BASE_URL", "http://env.test/v1")
        monkeypatch.setenv("DOCQA_LLM_API_KEY", "sk-very-secret")
        generator = client.build_chat_generator(Settings(), "reasoner")
        serialized = json.dumps(generator.to_dict())
        assert "sk-very-secret" not in serialized
        assert "DOCQA_LLM_API_KEY" in serialized
        assert generator.api_key.resolve_value() == "sk-very-secret"

    def test_key_given_in_code_never_serialises(self):
        generator = client.build_chat_generator(
            Settings(llm_base_url="http://x.test/v1", llm_api_key=SecretStr("sk-in-code")), "reasoner"
        )
        assert "sk-in-code" not in repr(generator)
        with pytest.raises(ValueError):
            generator.to_dict()

    def test_no_base_url_uses_the_embedded_server(self, monkeypatch, tmp_path):
        local = LocalLLM(base_url="http://127.0.0.1:5555/v1", model="docqa-local", pid=1, port=5555,
                         model_path="/m.gguf")
        started = []
        monkeypatch.setattr(client, "ensure_local_llm", lambda settings: started.append(settings) or local)
        settings = Settings(data_dir=tmp_path, llm_roles={"grader": {"base_url": "http://remote.test/v1"}})
        generator = client.build_chat_generator(settings, "reasoner")
        assert (generator.api_base_url, generator.model) == (local.base_url, "docqa-local")
        assert started == [settings]
        # A role with its own URL never starts the local server.
        assert client.build_chat_generator(settings, "grader").api_base_url == "http://remote.test/v1"
        assert len(started) == 1


class TestCheckLLMEndpoint:
    def test_unreachable(self):
        port = closed_port()
        settings = Settings(llm_base_url=f"http://127.0.0.1:{port}/v1")
        with pytest.raises(LLMUnavailableError) as info:
            client.check_llm_endpoint(settings, "generator")
        assert info.value.message.startswith(f"LLM endpoint unreachable (http://127.0.0.1:{port}/v1, role generator)")
        assert "\n" not in info.value.message

    @pytest.mark.parametrize(("status", "fragment"), [(401, "rejected the API key"), (503, "HTTP 503")])
    def test_failing_answers(self, http_status, status, fragment):
        settings = Settings(llm_base_url=http_status(status))
        with pytest.raises(LLMUnavailableError, match=fragment):
            client.check_llm_endpoint(settings, "reasoner")

    @pytest.mark.parametrize("status", [200, 404])
    def test_answering_endpoints_pass(self, http_status, status):
        client.check_llm_endpoint(Settings(llm_base_url=http_status(status)), "reasoner")

    def test_checks_the_role_override(self, http_status):
        settings = Settings(llm_base_url=http_status(200),
                            llm_roles={"grader": {"base_url": f"http://127.0.0.1:{closed_port()}/v1"}})
        client.check_llm_endpoint(settings, "reasoner")
        with pytest.raises(LLMUnavailableError, match="role grader"):
            client.check_llm_endpoint(settings, "grader")

    def test_embedded_server_is_checked_by_starting_it_not_by_polling(self, monkeypatch, tmp_path):
        # /v1/models on llama_cpp.server waits for the model lock, so a busy shared server would look down.
        busy = LocalLLM(base_url=f"http://127.0.0.1:{closed_port()}/v1", model="docqa-local", pid=1, port=1,
                        model_path="/m.gguf")
        started = []
        monkeypatch.setattr(client, "ensure_local_llm", lambda settings: started.append(settings) or busy)
        client.check_llm_endpoint(Settings(data_dir=tmp_path), "grader")
        assert len(started) == 1
