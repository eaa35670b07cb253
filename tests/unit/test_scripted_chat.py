"""The scripted chat generator used by control-flow tests behaves exactly as scripted."""

import pytest
from haystack import Pipeline
from haystack.components.builders import ChatPromptBuilder
from haystack.dataclasses import ChatMessage

from docqa.llm.calls import generate_json, generate_yes_no
from tests.support.scripted_chat import ScriptedChatGenerator


def ask(llm: ScriptedChatGenerator, prompt: str, **kwargs) -> ChatMessage:
    return llm.run(messages=[ChatMessage.from_user(prompt)], **kwargs)["replies"][0]


class TestScriptedChatGenerator:
    def test_first_matching_rule_answers(self):
        llm = ScriptedChatGenerator(rules=[(r"capital", "Paris"), (r"capital of France", "never")], default="?")
        assert ask(llm, "What is the capital of France?").text == "Paris"

    def test_no_match_answers_default(self):
        llm = ScriptedChatGenerator(rules=[(r"capital", "Paris")], default="I don't know")
        assert ask(llm, "Who wrote Hamlet?").text == "I don't know"

    def test_list_answers_in_order_then_repeats_last(self):
        llm = ScriptedChatGenerator(rules=[(r"sufficient", ["No", "No", "Yes"])])
        assert [ask(llm, "Is it sufficient?").text for _ in range(5)] == ["No", "No", "Yes", "Yes", "Yes"]

    def test_lists_advance_independently_per_rule(self):
        llm = ScriptedChatGenerator(rules=[(r"^a", ["a1", "a2"]), (r"^b", ["b1", "b2"])])
        assert [ask(llm, p).text for p in ("a", "b", "a", "b")] == ["a1", "b1", "a2", "b2"]

    def test_callable_gets_the_prompt(self):
        llm = ScriptedChatGenerator(rules=[(r"echo", lambda prompt: prompt.upper())])
        assert ask(llm, "echo me").text == "ECHO ME"

    def test_callable_may_raise_to_simulate_failures(self):
        def fail(prompt: str) -> str:
            raise ConnectionError("down")

        llm = ScriptedChatGenerator(rules=[(r".", fail)])
        with pytest.raises(ConnectionError):
            ask(llm, "anything")

    def test_prompt_is_the_last_user_message(self):
        llm = ScriptedChatGenerator(rules=[(r"second", "matched")], default="missed")
        messages = [
            ChatMessage.from_system("second system"),
            ChatMessage.from_user("first"),
            ChatMessage.from_assistant("second answer"),
            ChatMessage.from_user("the second question"),
        ]
        assert llm.run(messages=messages)["replies"][0].text == "matched"
        assert llm.calls[0]["prompt"] == "the second question"

    def test_regex_spans_lines(self):
        llm = ScriptedChatGenerator(rules=[(r"Question:.*Evidence:", "ok")], default="no")
        assert ask(llm, "Question: x\n\nEvidence: y").text == "ok"

    def test_records_calls_with_generation_kwargs(self):
        llm = ScriptedChatGenerator(default="fine")
        ask(llm, "hello", generation_kwargs={"max_tokens": 5})
        ask(llm, "again")
        assert llm.calls == [
            {"prompt": "hello", "generation_kwargs": {"max_tokens": 5}, "response": "fine"},
            {"prompt": "again", "generation_kwargs": {}, "response": "fine"},
        ]

    def test_reply_meta_carries_model_and_usage(self):
        reply = ask(ScriptedChatGenerator(default="two words"), "three word prompt")
        assert reply.meta["model"] == "scripted"
        assert reply.meta["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}

    @pytest.mark.parametrize(
        "rules",
        [[("(unclosed", "x")], [("ok", [])], [("ok", ["a", 1])], [("ok", 42)]],
        ids=["bad-regex", "empty-list", "non-string-item", "wrong-type"],
    )
    def test_invalid_rules_fail_at_construction(self, rules):
        with pytest.raises(ValueError):
            ScriptedChatGenerator(rules=rules)

    def test_callable_returning_non_string_is_an_error(self):
        llm = ScriptedChatGenerator(rules=[(r".", lambda prompt: 42)])
        with pytest.raises(TypeError):
            ask(llm, "x")

    def test_round_trips_through_dict(self):
        llm = ScriptedChatGenerator(rules=[(r"a", "A"), (r"b", ["B1", "B2"])], default="D")
        restored = ScriptedChatGenerator.from_dict(llm.to_dict())
        assert [ask(restored, p).text for p in ("a", "b", "b", "c")] == ["A", "B1", "B2", "D"]

    def test_callables_refuse_to_serialise(self):
        with pytest.raises(TypeError):
            ScriptedChatGenerator(rules=[(r".", str.upper)]).to_dict()

    def test_runs_inside_a_haystack_pipeline(self):
        pipeline = Pipeline()
        pipeline.add_component(
            "prompt", ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ question }}")])
        )
        pipeline.add_component("llm", ScriptedChatGenerator(rules=[(r"^Q: Who", "Ada")]))
        pipeline.connect("prompt.prompt", "llm.messages")
        result = pipeline.run({"prompt": {"question": "Who was first?"}})
        assert result["llm"]["replies"][0].text == "Ada"

    async def test_run_async_matches_run(self):
        llm = ScriptedChatGenerator(rules=[(r"x", ["1", "2"])])
        first = await llm.run_async(messages=[ChatMessage.from_user("x")])
        assert first["replies"][0].text == "1"
        assert ask(llm, "x").text == "2"

    def test_drives_the_structured_helpers(self):
        llm = ScriptedChatGenerator(rules=[(r"verdict", '{"answer": "No"}'), (r"json", '{"k": 1}')])
        assert generate_yes_no(llm, "verdict?") is False
        assert generate_json(llm, "json please", {"type": "object", "required": ["k"]}) == {"k": 1}
        assert "response_format" in llm.calls[0]["generation_kwargs"]
