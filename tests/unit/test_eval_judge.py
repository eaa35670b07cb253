"""LLM-as-judge scores in `docqa eval`: constrained, bounded JSON from a separate judge model, unusable replies
recorded as missing, means in the summary, comparable between runs (scripted LLMs)."""

from __future__ import annotations

import json

import pytest
from haystack.core.serialization import allow_deserialization_module

from docqa.access import AccessScope
from docqa.evaluation.compare import compare_runs, regressions
from docqa.evaluation.datasets import EvalQuestion
from docqa.evaluation.judge import JUDGE_ROLE, JUDGE_SCHEMA, AnswerJudge, checked_scores
from docqa.evaluation.report import write_reports
from docqa.evaluation.runner import RUN_FILE, run_evaluation
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.scripted_chat import ScriptedChatGenerator

SCOPE = AccessScope("acme", frozenset({"alice"}))
QUESTIONS = [
    EvalQuestion("q1", "Who painted The Night Watch?", ("Rembrandt",)),
    EvalQuestion("q2", "Where is the Rijksmuseum?", ("Amsterdam",)),
    EvalQuestion("q3", "Who wrote Hamlet?", ("Shakespeare",)),
]
ANSWERS = {"Night Watch": "Rembrandt [1]", "Rijksmuseum": "In Amsterdam.", "Hamlet": "Marlowe"}


def _answer(prompt: str) -> str:
    return next((a for topic, a in ANSWERS.items() if topic in prompt), "I do not know.")


def _verdict(prompt: str) -> str:
    # Judged by the answer it is shown: a good one, a malformed reply, and a score beyond the bound.
    if "Answer to grade: Rembrandt" in prompt:
        return '{"correctness": 9, "completeness": 8, "relevance": 10}'
    if "Answer to grade: In Amsterdam." in prompt:
        return "Correctness: 9/10, looks fine"
    return '{"correctness": 11, "completeness": 2, "relevance": 5}'


class TestAnswerJudge:
    def test_scores_come_from_a_bounded_json_schema(self):
        llm = ScriptedChatGenerator(rules=[(r".", '{"correctness": 7, "completeness": 6, "relevance": 10}')])
        judge = AnswerJudge(chat_generator=llm)
        out = judge.run(question="Who painted it?", answer="Rembrandt", references=["Rembrandt", "R. van Rijn"])
        assert out["scores"] == {"correctness": 7, "completeness": 6, "relevance": 10}
        kwargs = llm.calls[0]["generation_kwargs"]
        assert kwargs["max_tokens"] == 64
        schema = kwargs["response_format"]["json_schema"]["schema"]
        assert schema == JUDGE_SCHEMA and schema["properties"]["relevance"]["maximum"] == 10
        assert "R. van Rijn" in llm.calls[0]["prompt"] and "Answer to grade: Rembrandt" in llm.calls[0]["prompt"]

    @pytest.mark.parametrize("reply", [
        "not JSON at all", '{"correctness": 7, "completeness": 6}', '{"correctness": -1, "completeness": 6, '
        '"relevance": 1}', '{"correctness": 7.5, "completeness": 6, "relevance": 1}',
        '{"correctness": true, "completeness": 6, "relevance": 1}', '{"correctness": "7", "completeness": 6, '
        '"relevance": 1}', '["7", "6", "1"]', "",
    ])
    def test_an_unusable_reply_gives_no_scores(self, reply):
        judge = AnswerJudge(chat_generator=ScriptedChatGenerator(default=reply))
        assert judge.run(question="q", answer="a", references=["a"])["scores"] is None

    def test_whole_floats_are_scores(self):
        assert checked_scores({"correctness": 7.0, "completeness": 0, "relevance": 10}) == {
            "correctness": 7, "completeness": 0, "relevance": 10}

    def test_long_texts_and_many_references_are_clipped(self):
        llm = ScriptedChatGenerator(default='{"correctness": 1, "completeness": 1, "relevance": 1}')
        AnswerJudge(chat_generator=llm).run(question="q", answer="x" * 50_000,
                                            references=[f"reference {i}" for i in range(10)])
        prompt = llm.calls[0]["prompt"]
        assert len(prompt) < 6000 and "reference 3" in prompt and "reference 4" not in prompt

    def test_round_trips_through_to_dict(self):
        allow_deserialization_module("tests.support.*")
        judge = AnswerJudge(chat_generator=ScriptedChatGenerator(default="{}"), max_tokens=32)
        again = AnswerJudge.from_dict(judge.to_dict())
        assert again.max_tokens == 32 and again.prompt_template == judge.prompt_template


def _run(tmp_path, name, judge_llm):
    answer_llm = ScriptedChatGenerator(rules=[(r".", _answer)])
    runtime = Runtime(Settings(data_dir=tmp_path / "data"),
                      chat_generator_factory=lambda role: judge_llm if role == JUDGE_ROLE else answer_llm)
    judge = AnswerJudge(chat_generator=runtime.chat_generator(JUDGE_ROLE))
    records = run_evaluation(runtime, QUESTIONS, ["no_retrieval"], tmp_path / name, scope=SCOPE, progress=False,
                             judge=judge)
    return records, answer_llm


def test_the_judge_model_scores_each_answer_and_malformed_verdicts_are_missing(tmp_path):
    judge_llm = ScriptedChatGenerator(rules=[(r".", _verdict)])
    records, answer_llm = _run(tmp_path, "run", judge_llm)
    by_id = {r.question_id: r for r in records}

    assert (by_id["q1"].judge_correctness, by_id["q1"].judge_completeness, by_id["q1"].judge_relevance) == (9, 8, 10)
    for missing in ("q2", "q3"):
        assert by_id[missing].judge_correctness is None and by_id[missing].judge_relevance is None
        assert by_id[missing].judge_error == "malformed judge reply"
        assert by_id[missing].error is None  # the answer itself still counts
    assert len(judge_llm.calls) == 3 and all("You grade an answer" not in c["prompt"] for c in answer_llm.calls)
    assert "Rembrandt [1]" not in judge_llm.calls[0]["prompt"]  # judged without its citation markers
    assert by_id["q1"].llm_calls == 1  # the judge's call is not the strategy's cost

    rows = write_reports(tmp_path / "run", records)
    assert rows[0]["judge_correctness"] == 9 and rows[0]["judge_relevance"] == 10  # means over judged answers
    assert "judge_correctness" in (tmp_path / "run" / "summary.csv").read_text().splitlines()[0]
    assert json.loads((tmp_path / "run" / RUN_FILE).read_text())["judge_model"] == "local"


def test_compare_gates_on_a_judge_score(tmp_path):
    good = ScriptedChatGenerator(default='{"correctness": 9, "completeness": 9, "relevance": 9}')
    worse = ScriptedChatGenerator(default='{"correctness": 4, "completeness": 9, "relevance": 9}')
    _run(tmp_path, "old", good)
    _run(tmp_path, "new", worse)
    deltas = compare_runs(tmp_path / "old", tmp_path / "new")
    failed = regressions(deltas, "judge_correctness", 1.0)
    assert [(d.metric, d.delta) for d in failed] == [("judge_correctness", -5.0)]
    assert regressions(deltas, "judge_completeness", 1.0) == []
