"""LLM call helpers: malformed output never crashes, refused formats fall back, endpoint failures are one line."""

import socket
from typing import Any

import httpx
import openai
import pytest
from haystack.dataclasses import ChatMessage
from openai.types.chat import ChatCompletion

from docqa.errors import LLMUnavailableError
from docqa.llm.calls import (
    YES_NO_BARE_SCHEMA,
    YES_NO_SCHEMA,
    generate_json,
    generate_text,
    generate_yes_no,
    parse_json_object,
    parse_yes_no,
)
from docqa.llm.client import build_chat_generator
from docqa.recording import StepRecorder
from docqa.settings import Settings
from docqa.spans import step_span
from docqa.step_tracer import ensure_step_tracing, record_steps
from tests.support.scripted_chat import ScriptedChatGenerator

SCHEMA = {
    "type": "object",
    "properties": {"title": {"type": "string"}, "year": {"type": "integer"}},
    "required": ["title", "year"],
}


def _status_error(cls: type[openai.APIStatusError], status: int, message: str) -> openai.APIStatusError:
    request = httpx.Request("POST", "http://llm.test/v1/chat/completions")
    return cls(message, response=httpx.Response(status, request=request), body=None)


class FakeEndpoint:
    """A chat generator that behaves like a server accepting only some response_format shapes."""

    def __init__(self, base_url: str, accepts: set[str], reply: str, rejection: Any = None) -> None:
        self.api_base_url = base_url
        self.accepts = accepts
        self.reply = reply
        self.rejection = rejection or (lambda: _status_error(openai.BadRequestError, 400, "bad response_format"))
        self.formats: list[str] = []
        self.sent: list[dict[str, Any] | None] = []

    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        response_format = (generation_kwargs or {}).get("response_format")
        shape = response_format["type"] if response_format else "none"
        self.sent.append(response_format)
        self.formats.append(shape)
        if shape not in self.accepts:
            raise self.rejection()
        return {"replies": [ChatMessage.from_assistant(self.reply, meta={"model": "fake"})]}


class Raising:
    api_base_url = "http://llm.test/v1"

    def __init__(self, exc: Exception) -> None:
        self.exc = exc

    def run(self, messages: list[ChatMessage], generation_kwargs: dict[str, Any] | None = None) -> dict[str, Any]:
        raise self.exc


class TestParseYesNo:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ('{"answer": "Yes"}', True),
            ('{ "answer": "No"} ', False),
            ('"Yes"', True),
            ('"No"', False),
            ("Yes.", True),
            ("no, the passages do not say", False),
            ('```json\n{"answer": "No"}\n```', False),
            ("The answer is yes", True),
            ("", None),
            ("   ", None),
            ("Maybe, it depends on the year of publication", None),
            ('{"answer": "Perhaps"}', None),
            ('{"answer": 3}', None),
            ('{"verdict": "Yes"}', None),
            ('{"answer": ["Yes"]}', None),
            ("Paris is the capital of France and yes it is", None),
        ],
    )
    def test_reads_only_clear_verdicts(self, text, expected):
        assert parse_yes_no(text) is expected


class TestParseJsonObject:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            ('{"a": 1}', {"a": 1}),
            ('```json\n{"a": [1, 2]}\n```', {"a": [1, 2]}),
            ('Sure! Here it is: {"a": {"b": null}} Hope that helps.', {"a": {"b": None}}),
            ("", None),
            ("no json here", None),
            ('{"a": 1', None),
            ("{'a': 1}", None),
            ("[1, 2, 3]", None),
            ('"just a string"', None),
            ("{}", {}),
            # What a grammar-constrained local model writes: a raw line break inside a string.
            ('{ "thought": "Who?\nReply", "action": "answer"}', {"thought": "Who?\nReply", "action": "answer"}),
        ],
    )
    def test_extracts_an_object_or_none(self, text, expected):
        assert parse_json_object(text) == expected


class TestMalformedOutputNeverCrashes:
    @pytest.mark.parametrize(
        "output", ["", "I think so", '{"answer": ', "```\nnot json\n```", '{"answer": ["Yes"]}', "null"]
    )
    def test_yes_no_gives_none(self, output):
        assert generate_yes_no(ScriptedChatGenerator(default=output), "Is it?") is None

    @pytest.mark.parametrize(
        "output",
        [
            "",
            "The book is Dune (1965).",
            '{"title": "Dune", "year": 19',
            '{"name": "Dune", "date": 1965}',
            '{"title": "Dune"}',
            "[]",
            "```json\n```",
        ],
        ids=["empty", "prose", "broken", "wrong-keys", "missing-key", "array", "empty-fence"],
    )
    def test_json_gives_none(self, output):
        assert generate_json(ScriptedChatGenerator(default=output), "Which book?", SCHEMA) is None

    def test_json_in_fences_with_extra_keys_is_accepted(self):
        llm = ScriptedChatGenerator(default='```json\n{"title": "Dune", "year": 1965, "extra": true}\n```')
        assert generate_json(llm, "Which book?", SCHEMA) == {"title": "Dune", "year": 1965, "extra": True}

    def test_text_is_stripped_and_empty_when_silent(self):
        assert generate_text(ScriptedChatGenerator(default="  Paris \n"), "Capital?") == "Paris"
        assert generate_text(ScriptedChatGenerator(default=""), "Capital?") == ""

    def test_no_replies_at_all(self):
        class Silent:
            def run(self, messages, generation_kwargs=None):
                return {"replies": []}

        assert generate_yes_no(Silent(), "Is it?") is None
        assert generate_text(Silent(), "Say something") == ""

    def test_truncated_structured_reply_is_parsed_defensively(self):
        completion = ChatCompletion.model_validate(
            {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "length",
                        "message": {"role": "assistant", "content": '{"title": "Du'},
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 16, "total_tokens": 21},
            }
        )
        llm = Raising(openai.LengthFinishReasonError(completion=completion))
        recorder = StepRecorder()
        ensure_step_tracing()
        with record_steps(recorder), step_span("generation", "g"):
            assert generate_json(llm, "Which book?", SCHEMA) is None
        assert recorder.steps[0].llm.completion_tokens == 16


class TestConstrainedRequests:
    def test_schema_sent_as_json_schema_first(self):
        llm = ScriptedChatGenerator(default='{"answer": "Yes"}')
        assert generate_yes_no(llm, "Is it?") is True
        response_format = llm.calls[0]["generation_kwargs"]["response_format"]
        assert response_format["type"] == "json_schema"
        assert response_format["json_schema"]["schema"] == YES_NO_SCHEMA
        assert llm.calls[0]["generation_kwargs"]["max_tokens"] == 16

    def test_falls_back_to_json_object_schema_and_remembers_it(self):
        llm = FakeEndpoint("http://fallback-a.test/v1", accepts={"json_object"}, reply='"No"')
        assert generate_yes_no(llm, "Is it?") is False
        assert generate_yes_no(llm, "Is it?") is False
        assert llm.formats == ["json_schema", "json_object", "json_object"]
        # llama-cpp-python's grammar takes any root type: the verdict is asked for as a bare string.
        assert llm.sent[-1] == {"type": "json_object", "schema": YES_NO_BARE_SCHEMA}

    def test_json_object_style_sends_the_callers_schema(self):
        llm = FakeEndpoint("http://fallback-e.test/v1", accepts={"json_object"}, reply='{"title": "D", "year": 1}')
        assert generate_json(llm, "Which?", SCHEMA) == {"title": "D", "year": 1}
        assert llm.sent[-1] == {"type": "json_object", "schema": SCHEMA}

    def test_falls_back_to_unconstrained_and_remembers_it(self):
        llm = FakeEndpoint("http://fallback-b.test/v1", accepts={"none"}, reply="Yes, it is.")
        assert generate_yes_no(llm, "Is it?") is True
        assert generate_json(llm, "Which?", SCHEMA) is None
        assert llm.formats == ["json_schema", "json_object", "none", "none"]

    def test_llama_cpp_python_validation_error_counts_as_a_refused_format(self):
        def rejection():
            return _status_error(
                openai.InternalServerError,
                500,
                "1 validation error: response_format.type Input should be 'text' or 'json_object'",
            )

        llm = FakeEndpoint(
            "http://fallback-c.test/v1", accepts={"json_object"}, reply='{"answer": "Yes"}', rejection=rejection
        )
        assert generate_yes_no(llm, "Is it?") is True
        assert llm.formats == ["json_schema", "json_object"]

    def test_calls_are_spans_added_to_the_step_they_run_in(self):
        llm = FakeEndpoint("http://fallback-d.test/v1", accepts={"json_object"}, reply='{"answer": "Yes"}')
        recorder = StepRecorder()
        ensure_step_tracing()
        with record_steps(recorder), step_span("grading", "grader"):
            generate_yes_no(llm, "Is it?", purpose="sufficiency")
        (call,) = recorder.steps[0].outputs["llm_calls"]
        assert call["purpose"] == "sufficiency"
        assert call["constrained"] is True
        assert call["response"] == '{"answer": "Yes"}'
        assert recorder.steps[0].llm.calls == 1


class TestEndpointFailures:
    @pytest.mark.parametrize(
        ("exc", "fragment"),
        [
            (_status_error(openai.AuthenticationError, 401, "invalid key"), "rejected the API key"),
            (_status_error(openai.NotFoundError, 404, "no such model"), "does not serve the model"),
            (_status_error(openai.InternalServerError, 500, "boom\ntraceback line"), "failed"),
            (_status_error(openai.BadRequestError, 400, "context window exceeded"), "rejected the request"),
        ],
        ids=["auth", "model", "server", "request"],
    )
    def test_become_one_line_unavailable_errors(self, exc, fragment):
        with pytest.raises(LLMUnavailableError) as info:
            generate_text(Raising(exc), "Hello")
        assert fragment in info.value.message
        assert "\n" not in info.value.message

    def test_other_exceptions_propagate(self):
        with pytest.raises(KeyError):
            generate_text(Raising(KeyError("bug")), "Hello")

    def test_unreachable_endpoint_with_the_real_client(self):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        # Nothing listens on the port once the socket is closed.
        settings = Settings(llm_base_url=f"http://127.0.0.1:{port}/v1", llm_max_retries=0, llm_timeout_s=5)
        generator = build_chat_generator(settings, "generator")
        for call in (lambda: generate_text(generator, "Hello"), lambda: generate_yes_no(generator, "Is it?")):
            with pytest.raises(LLMUnavailableError) as info:
                call()
            # Callers (and traces) are told the model is unavailable; only operators see where it was.
            assert info.value.message == "the language model is unavailable (its endpoint unreachable)"
            assert f"127.0.0.1:{port}" not in str(info.value)
            assert f"127.0.0.1:{port}" in info.value.detail
            assert "\n" not in info.value.detail


class TestStripPromptEcho:
    def test_keeps_the_answer_after_echoed_lines(self):
        from docqa.llm.calls import strip_prompt_echo

        prompt = "Answer briefly.\n\nQuestion: Who wrote Hamlet?\nAnswer:"
        reply = "Answer briefly.\nQuestion: Who wrote Hamlet?\nAnswer: Shakespeare\nQuestion: next?"
        assert strip_prompt_echo(reply, prompt) == "Shakespeare"

    def test_an_echo_only_reply_is_empty(self):
        from docqa.llm.calls import strip_prompt_echo

        assert strip_prompt_echo("Answer briefly.\n\n", "Answer briefly.\nQuestion: x") == ""

    def test_a_truncated_repeat_of_a_prompt_line_is_dropped_but_short_answers_stay(self):
        from docqa.llm.calls import strip_prompt_echo

        prompt = "[1] Onboarding guide New employees receive their laptop on their first day.\nQuestion: When?\nAnswer:"
        assert strip_prompt_echo("[1] Onboarding guide New employees receive", prompt) == ""
        assert strip_prompt_echo("[1] Onboarding", prompt) == "[1] Onboarding"

    def test_a_reply_starting_with_an_instruction_line_drops_the_echo(self):
        from docqa.llm.calls import strip_prompt_echo

        instruction = (
            "Write a complete, detailed answer to the question in several paragraphs, using the findings and the "
            "numbered passages below. End every paragraph with the numbers of the passages it is based on."
        )
        passage = "[1] Retief is left in charge of the directorate while Magnan is away for two weeks."
        prompt = f"{instruction}\n\n{passage}\nQuestion: What happens?\nAnswer:"
        echo = "Write a complete, detailed answer to the question in several paragraphs, using the findings and the "
        assert strip_prompt_echo(echo + "numbered passages below. [1][4]", prompt) == ""
        assert strip_prompt_echo(echo + "numbered passages below. Retief takes charge of MUDDLE.", prompt) == (
            "Retief takes charge of MUDDLE."
        )
        assert (
            strip_prompt_echo("numbered passages below. End every paragraph with the numbers of the passages", prompt)
            == ""
        )
        wandered = "the question in several paragraphs, using the findings and the numbered passages below. "
        assert strip_prompt_echo(wandered + "Retief leads the team.", prompt) == "Retief leads the team."
        # Quoting a passage is an answer, not an echo of the instructions.
        quoted = "[1] Retief is left in charge of the directorate while Magnan is away, and he acts at once."
        assert strip_prompt_echo(quoted, prompt) == quoted
        assert strip_prompt_echo("Write a complete answer: Retief takes charge.", prompt) == (
            "Write a complete answer: Retief takes charge."
        )

    def test_a_whole_instruction_line_run_into_the_answer_is_cut_and_placeholders_go(self):
        from docqa.llm.calls import strip_prompt_echo

        prompt = "Answer the question as briefly as possible.\n\nQuestion: Who wrote Hamlet?\nAnswer:"
        assert strip_prompt_echo("Answer the question as briefly as possible. Shakespeare", prompt) == "Shakespeare"
        reply = "Answer the question as briefly as possible.  Question: Who wrote Hamlet? Answer: x"
        assert strip_prompt_echo(reply, prompt) == ""
        cot = "Write two parts:\nReasoning: <step-by-step reasoning>\nAnswer: <the final answer in one sentence>"
        assert strip_prompt_echo("<the final answer in one sentence>", cot) == ""
        assert strip_prompt_echo("Paris <the final answer in one sentence>", cot) == "Paris"
        assert strip_prompt_echo("Use <b> for bold", cot) == "Use <b> for bold"  # not from the prompt: kept

    def test_an_echo_behind_an_answer_or_summary_label_is_an_echo(self):
        from docqa.llm.calls import strip_prompt_echo

        instruction = "Summarise what the numbered passages say about the question, in a few sentences, citing them."
        prompt = f"{instruction}\n\n[1] Retief is left in charge.\nQuestion: What happens?\nSummary:"
        assert strip_prompt_echo(f"Summary: {instruction}", prompt) == ""
        assert strip_prompt_echo(f"Answer: {instruction[:70]}", prompt) == ""
        assert strip_prompt_echo("Summary: Retief is in charge [1].", prompt) == "Retief is in charge [1]."
        assert strip_prompt_echo("Answer", prompt) == ""  # a bare label is no answer
        assert strip_prompt_echo("Answers vary by region.", prompt) == "Answers vary by region."
