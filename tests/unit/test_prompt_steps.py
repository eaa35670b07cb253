"""Prompted LLM steps: the reply parsers, the constrained generation node and the prompt -> llm -> parser graph."""

from __future__ import annotations

import pytest
from haystack import Document, Pipeline
from haystack.dataclasses import ChatMessage

from docqa.access import AccessScope
from docqa.components.answer_generator import AnswerGenerator
from docqa.components.answer_reviewer import AnswerReviewer
from docqa.components.cited_answer_generator import CitedAnswerGenerator
from docqa.components.cot_answer_generator import CoTAnswerGenerator
from docqa.components.llm_generation import ConstrainedGeneration
from docqa.components.memory_answer_generator import MemoryAnswerGenerator
from docqa.components.mspr_state import MSPRState, Observation, Phase, SourceVerdict
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.query_rewriter import QueryRewriter
from docqa.components.reply_parsers import (
    CitedReplyParser,
    JsonObjectReplyParser,
    TextReplyParser,
    YesNoReplyParser,
)
from docqa.components.resp_memory import GlobalEvidence, ReSPMemory
from docqa.components.resp_reasoner import ReSPJudge, ReSPPlanner, SubQuestionPlanParser
from docqa.components.source_preference_judge import SourcePreferenceJudge
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.baselines import NoRetrievalPipeline
from docqa.pipelines.yaml_strategies import ALLOWED_MODULES, load_strategy
from docqa.run_control import LLMBudgetExceededError, RunControl
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))
DOCS = [Document(content="Hamlet is by Shakespeare."), Document(content="Macbeth is set in Scotland.")]
MEMORY = ReSPMemory().with_evidence(GlobalEvidence(iteration=1, query="q", summary="Jaws was directed by Spielberg."))
# Replies a model may send instead of what was asked.
MALFORMED = ["", "   ", "{", '{"answer": 3}', "[1, 2]", "null", '{"answer": "Maybe"}', "\x00\x01", "Yes" * 5000]


def _replies(text: str | None) -> list[ChatMessage]:
    return [] if text is None else [ChatMessage.from_assistant(text, meta={"finish_reason": "length"})]


def _prompt(text: str) -> list[ChatMessage]:
    return [ChatMessage.from_user(text)]


class TestParsersNeverRaise:
    @pytest.mark.parametrize("text", [*MALFORMED, None])
    def test_every_parser_returns_a_value_for_a_malformed_reply(self, text):
        replies = _replies(text)
        assert YesNoReplyParser().run(replies=replies)["verdict"] in ("yes", "no", "unreadable")
        schema = {"type": "object", "properties": {"keep": {"type": "boolean"}}, "required": ["keep"]}
        assert JsonObjectReplyParser(schema).run(replies=replies)["data"] is None
        assert isinstance(TextReplyParser(first_line=True).run(replies=replies, prompt=_prompt("Q?"))["answer"], str)
        out = CitedReplyParser().run(replies=replies, prompt=_prompt("Q?"), documents=DOCS)
        assert out["citation_mode"] in ("explicit", "context", "none")
        out = SubQuestionPlanParser().run(replies=replies, question="Q?")
        assert out["candidate"] is None or isinstance(out["candidate"], str)

    @pytest.mark.parametrize(
        ("text", "verdict"),
        [
            ('{"answer": "Yes"}', "yes"),
            ('"No"', "no"),
            ("No, it does not.", "no"),
            ('{"answer": "Maybe"}', "unreadable"),
            ('{"verdict": "Yes"}', "unreadable"),
        ],
    )
    def test_yes_no_verdicts(self, text, verdict):
        out = YesNoReplyParser().run(replies=_replies(text))
        assert out == {"yes": verdict == "yes", "verdict": verdict}

    def test_a_json_object_must_have_the_schema_s_keys_and_types(self):
        schema = {
            "type": "object",
            "properties": {"keep": {"type": "boolean"}, "n": {"type": "integer"}},
            "required": ["keep"],
        }
        parser = JsonObjectReplyParser(schema)
        assert parser.run(replies=_replies('```json\n{"keep": true, "n": 2}\n```'))["data"] == {"keep": True, "n": 2}
        assert parser.run(replies=_replies('{"keep": "yes"}'))["data"] is None
        assert parser.run(replies=_replies('{"keep": true, "n": true}'))["data"] is None
        assert parser.run(replies=_replies('{"n": 2}'))["data"] is None

    def test_the_text_parser_strips_echoes_and_keeps_a_first_line(self):
        prompt = _prompt("Answer the question as briefly as possible.\nQuestion: Who wrote Hamlet?\nAnswer:")
        reply = _replies("Answer the question as briefly as possible.\nAnswer: Shakespeare\nQuestion: and Macbeth?")
        assert TextReplyParser().run(replies=reply, prompt=prompt) == {
            "answer": "Shakespeare",
            "finish_reason": "length",
        }
        two_lines = _replies("Shakespeare\nHe also wrote Macbeth")
        assert TextReplyParser(first_line=True).run(replies=two_lines, prompt=prompt) == {
            "answer": "Shakespeare",
            "finish_reason": "stop",
        }  # the limit cut the second line, not the answer

    def test_cited_documents_follow_the_references_or_the_context(self):
        parser = CitedReplyParser()
        out = parser.run(replies=_replies("Scotland [2] [9]"), prompt=_prompt("x"), documents=DOCS)
        assert out["cited_documents"] == [DOCS[1]] and out["citation_mode"] == "explicit"
        out = parser.run(replies=_replies("Shakespeare"), prompt=_prompt("x"), documents=DOCS)
        assert out["cited_documents"] == DOCS and out["citation_mode"] == "context"


class TestConstrainedGeneration:
    def test_a_yes_no_call_is_schema_constrained_and_capped(self):
        llm = ScriptedChatGenerator(default='{"answer": "Yes"}')
        out = ConstrainedGeneration(llm, output="yes_no", purpose="judge").run(prompt=_prompt("Enough?"))
        assert out["replies"][0].text == '{"answer": "Yes"}'
        kwargs = llm.calls[0]["generation_kwargs"]
        assert kwargs["max_tokens"] == 16 and kwargs["response_format"]["type"] == "json_schema"

    def test_a_json_call_sends_its_schema(self):
        schema = {"type": "object", "properties": {"keep": {"type": "boolean"}}, "required": ["keep"]}
        llm = ScriptedChatGenerator(default='{"keep": false}')
        ConstrainedGeneration(llm, output="json", schema=schema, schema_name="keep").run(prompt=_prompt("Keep?"))
        sent = llm.calls[0]["generation_kwargs"]["response_format"]["json_schema"]
        assert sent["name"] == "keep" and sent["schema"] == schema

    def test_calls_count_against_the_run_s_budget(self):
        llm = ScriptedChatGenerator(default="ok")
        generation = ConstrainedGeneration(llm, max_tokens=8)
        with RunControl(max_llm_calls=1, max_completion_tokens=4, max_prompt_chars=1000).active():
            generation.run(prompt=_prompt("one"))
            with pytest.raises(LLMBudgetExceededError):
                generation.run(prompt=_prompt("two"))
        assert [call["generation_kwargs"]["max_tokens"] for call in llm.calls] == [4]

    def test_a_role_generator_behind_it_counts_the_call_once(self):
        llm = ScriptedChatGenerator(default="ok")
        generation = ConstrainedGeneration(RoleChatGenerator("generator", llm), max_tokens=8)
        with RunControl(max_llm_calls=1, max_completion_tokens=100, max_prompt_chars=1000).active():
            assert generation.run(prompt=_prompt("one"))["replies"][0].text == "ok"
        assert len(llm.calls) == 1

    @pytest.mark.parametrize("kwargs", [{"max_tokens": 0}, {"output": "xml"}, {"output": "json"}])
    def test_bad_settings_are_refused(self, kwargs):
        with pytest.raises(ValueError):
            ConstrainedGeneration(ScriptedChatGenerator(), **kwargs)


class TestPromptedSteps:
    @pytest.mark.parametrize(
        ("step", "name", "inputs"),
        [
            (AnswerGenerator, "no_retrieval_answer", {"question": "Who wrote Hamlet?"}),
            (CitedAnswerGenerator, "standard_answer", {"question": "Who wrote Hamlet?", "documents": DOCS}),
            (MemoryAnswerGenerator, "resp_generate", {"question": "Where?", "memory": MEMORY}),
            (ReSPJudge, "resp_judge", {"question": "Where?", "memory": MEMORY}),
            (
                ReSPPlanner,
                "resp_plan",
                {"question": "Where?", "memory": MEMORY, "asked": ["Where?"], "rejected": "Who?"},
            ),
            (QueryRewriter, "atrag_rewrite", {"question": "Q?", "previous_queries": ["Q?"], "feedback": "unsupported"}),
        ],
    )
    def test_the_prompt_sent_is_the_template_rendered_as_before(self, step, name, inputs):
        llm = ScriptedChatGenerator(default="Spielberg")
        step(llm).run(**inputs)
        rendered = {k: (v.as_text() if isinstance(v, ReSPMemory) else v) for k, v in inputs.items()}
        assert llm.calls[0]["prompt"] == render_prompt(load_prompt(name), **rendered)

    def test_the_cot_prompt_shows_at_most_its_documents_each_cut(self):
        llm = ScriptedChatGenerator(default="Reasoning: [2] says so.\nAnswer: Scotland [2]")
        out = CoTAnswerGenerator(llm, max_documents=2, max_document_chars=20).run(question="Where?", documents=DOCS * 2)
        assert llm.calls[0]["prompt"] == render_prompt(
            load_prompt("atrag_answer"), question="Where?", documents=DOCS, max_document_chars=20
        )
        assert out == {
            "answer": "Scotland [2]",
            "reasoning": "[2] says so.",
            "cited_documents": [DOCS[1]],
            "prompt_documents": DOCS,
        }
        assert CoTAnswerGenerator(llm).run(question="Where?", documents=[])["answer"] == "" and len(llm.calls) == 1

    def test_a_deployer_template_is_read_at_build_and_written_to_the_yaml(self, tmp_path):
        (tmp_path / "no_retrieval_answer.txt").write_text("Reply in French. {{ question }}\n", encoding="utf-8")
        runtime = Runtime(
            Settings(data_dir=tmp_path, prompts_dir=tmp_path),
            chat_generator_factory=lambda role: ScriptedChatGenerator(default="Paris"),
        )
        from docqa.pipelines.registry import build_pipeline

        strategy = build_pipeline("no_retrieval", runtime)
        assert "Reply in French. {{ question }}" in strategy.dumps()
        llm = ScriptedChatGenerator(default="Paris")
        edited = strategy.dumps().replace("Reply in French.", "Reply in German.")
        loaded = load_strategy(
            edited,
            name="edited",
            source="edited.yaml",
            runtime=Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: llm),
        )
        assert loaded.run("Capital of France?", ALICE).answer == "Paris"
        assert llm.calls[0]["prompt"] == "Reply in German. Capital of France?"

    def test_a_step_round_trips_with_its_settings(self):
        pipeline = Pipeline()
        pipeline.add_component(
            "planner", ReSPPlanner(RoleChatGenerator("reasoner"), plan_template="P {{ question }}", max_plan_tokens=7)
        )
        pipeline.add_component("judge", ReSPJudge(RoleChatGenerator("reasoner"), judge_template="J {{ question }}"))
        restored = Pipeline.loads(pipeline.dumps(), allowed_modules=list(ALLOWED_MODULES))
        again = restored.get_component("planner")
        assert (again.plan_template, again.max_plan_tokens, again.chat_generator.role) == (
            "P {{ question }}",
            7,
            "reasoner",
        )
        assert restored.get_component("judge").judge_template == "J {{ question }}"
        assert restored.to_dict() == pipeline.to_dict()

    def test_its_inner_runs_are_child_steps_with_the_call_on_the_llm_step(self):
        strategy = NoRetrievalPipeline(
            ScriptedChatGenerator(default="Paris"),
            prompt_template="Q: {{ question }}",
            max_tokens=8,
            max_question_chars=100,
            model="scripted",
        )
        result = strategy.run("Capital of France?", ALICE)
        steps = {s.name: s for s in result.steps}
        assert {steps[n].parent for n in ("answer_prompt", "answer_llm", "answer_parser")} == {steps["generator"].index}
        assert steps["answer_llm"].outputs["llm_calls"][0]["prompt"] == "Q: Capital of France?"
        assert steps["answer_parser"].outputs["answer"] == "Paris" == steps["generator"].outputs["answer"]
        assert result.totals.llm_calls == 1


class TestAnswerReview:
    def test_the_review_reads_the_state_asks_once_and_writes_its_verdict(self):
        llm = ScriptedChatGenerator(default='{"answer": "No"}')
        state = MSPRState(question="When was X born?", sources=("collection:main",)).evolve(answer="1962")
        out = AnswerReviewer(llm).run(state=state)
        assert llm.calls[0]["prompt"] == render_prompt(
            load_prompt("mspr_review"), question="When was X born?", answer="1962", context="(nothing was retrieved)"
        )
        assert llm.calls[0]["generation_kwargs"]["response_format"]["type"] == "json_schema"
        assert out["review"] == {
            "passed": False,
            "model_verdict": "no",
            "reason": "the answer is not supported or incomplete",
            "answer": "1962",
        }
        assert (out["state"].phase, out["state"].reviews, out["state"].review_passed) == (Phase.REVIEWED, 1, False)

    @pytest.mark.parametrize(
        ("answer", "reply", "passed", "verdict"),
        [("  ", "Yes", False, None), ("1962", "Yes", True, "yes"), ("1962", "{", False, "unreadable")],
    )
    def test_an_empty_answer_is_not_asked_about_and_an_unreadable_verdict_fails(self, answer, reply, passed, verdict):
        llm = ScriptedChatGenerator(default=reply)
        state = MSPRState(question="Q?", sources=("collection:main",)).evolve(answer=answer)
        out = AnswerReviewer(llm).run(state=state)
        assert (out["review"]["passed"], out["review"]["model_verdict"]) == (passed, verdict)
        assert len(llm.calls) == (0 if verdict is None else 1)


class TestSourcePreference:
    def _state(self, *observed: tuple[Document, ...]) -> MSPRState:
        observations = tuple(
            Observation(step=i, source="collection:main", query="q", documents=docs) for i, docs in enumerate(observed)
        )
        return MSPRState(question="Where?", sources=("collection:main",), observations=observations)

    def test_new_passages_are_judged_once_and_the_verdict_is_typed_in_the_state(self):
        llm = ScriptedChatGenerator(default='{"answer": "No"}')
        out = SourcePreferenceJudge(llm).run(state=self._state((DOCS[0],), (DOCS[0], DOCS[1])))
        assert llm.calls[0]["prompt"].split("New passages:\n")[1].startswith("- Macbeth is set in Scotland.\n\n")
        verdict = out["state"].verdicts[-1]
        assert isinstance(verdict, SourceVerdict) and out["verdict"] == verdict.to_dict()
        assert (verdict.adds_information, verdict.model_verdict, verdict.new_document_ids) == (
            False,
            "no",
            (DOCS[1].id,),
        )
        assert out["state"].phase == Phase.JUDGED

    def test_nothing_new_is_no_without_a_call_and_an_unreadable_verdict_stays(self):
        llm = ScriptedChatGenerator(default="hmm")
        out = SourcePreferenceJudge(llm).run(state=self._state((DOCS[0],), (DOCS[0],)))
        assert llm.calls == [] and out["verdict"]["adds_information"] is False
        out = SourcePreferenceJudge(llm).run(state=self._state((DOCS[0],), (DOCS[1],)))
        assert out["verdict"]["adds_information"] is True and out["verdict"]["model_verdict"] == "unreadable"
