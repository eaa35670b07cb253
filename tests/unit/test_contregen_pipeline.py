"""ConTReGen and ConTRe with a scripted LLM and a filter-honouring keyword retriever: bounds, verdicts, budget,
bottom-up synthesis, access control in every branch, the tree in the trace, and the YAML round trip."""

from __future__ import annotations

import json
import re
import threading
import time
from typing import Any

import pytest

from docqa.access import AccessScope
from docqa.components.context_tree import (
    ACCEPTED,
    REJECTED_NO_RELEVANT,
    REJECTED_NOT_NEEDED,
    SKIPPED_BUDGET,
    STOP_LLM_BUDGET,
    STOP_NO_PASSAGES,
    STOP_TREE_COMPLETE,
)
from docqa.components.contre_tree_expander import ConTReTreeExpander
from docqa.components.contregen_synthesizer import ConTReGenSynthesizer
from docqa.pipelines.contregen import ConTReGenPipeline, ConTRePipeline
from docqa.pipelines.registry import build_pipeline
from docqa.pipelines.yaml_strategies import export_strategy, load_strategy
from docqa.run_control import RunControl
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.resp_fakes import KeywordRetriever, doc
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))
QUESTION = "What happened to the harbour town during the storm?"

PLAN = r"You plan the research"
VERIFY = r"Decide whether a sub-question is needed"
RELEVANCE = r"Which of the numbered passages"
SUMMARY = r"Summarise what the numbered passages"
ANSWER = r"Write a complete, detailed answer"

CORPUS = [
    doc("storm", "The storm hit the harbour town at night and flooded the docks.", "Storm"),
    doc("boats", "Fishing boats were wrecked when storm waves broke over the harbour wall.", "Boats"),
    doc("mayor", "The mayor opened shelters in the school after the storm flooded the town.", "Mayor"),
    doc("school", "Where did the children sleep? The children slept in the school shelters.", "School"),
    doc("recipe", "A recipe for fish soup uses cod, potatoes and cream.", "Recipe"),
    # Matches every query, but Alice may not read it, and neither may anyone outside tenant acme read the other.
    doc("secret", "Payroll: storm harbour town mayor boats shelters school fish soup wrecked.", "Payroll",
        access=("finance",)),
    doc("other", "Other tenant: storm harbour town mayor boats shelters school fish soup.", "Other",
        tenant="globex"),
]


def _field(prompt: str, label: str) -> str:
    match = re.search(rf"^{label}: (.*)$", prompt, re.MULTILINE)
    return match.group(1) if match else ""


def _passages(prompt: str) -> list[tuple[int, str]]:
    return [(int(n), text) for n, text in re.findall(r"^\[(\d+)\] (.*)$", prompt, re.MULTILINE)]


def _verify(prompt: str) -> str:
    sub_question = _field(prompt, "Sub-question")
    needed = "No" if "weather forecast" in sub_question else "Yes"
    return json.dumps({"needed": needed, "query": f"{sub_question} (after the storm)"})


def _relevance(prompt: str) -> str:
    return json.dumps({"relevant": [n for n, text in _passages(prompt) if "recipe" not in text]})


class Script:
    """A scripted LLM for the tree: plans per parent, verdicts and relevance by content, numbered summaries."""

    def __init__(self, plans: dict[str, Any] | None = None, default_plan: Any = None, delay: float = 0.0,
                 verify: str | None = None) -> None:
        self.plans = plans or {}
        self.default_plan = default_plan if default_plan is not None else {"sub_questions": []}
        self.delay = delay
        self.active = 0
        self.max_active = 0
        self._lock = threading.Lock()
        self.llm = ScriptedChatGenerator(rules=[
            (PLAN, self._plan), (VERIFY, verify or self._timed(_verify)), (RELEVANCE, _relevance),
            (SUMMARY, self._summary), (ANSWER, self._answer),
        ])

    def _timed(self, respond: Any) -> Any:
        def run(prompt: str) -> str:
            with self._lock:
                self.active += 1
                self.max_active = max(self.max_active, self.active)
            try:
                time.sleep(self.delay)
                return respond(prompt)
            finally:
                with self._lock:
                    self.active -= 1
        return run

    def _plan(self, prompt: str) -> str:
        parent = _field(prompt, "Current question") or _field(prompt, "Original question")
        for key, plan in self.plans.items():
            if key in parent:
                return plan if isinstance(plan, str) else json.dumps(plan)
        plan = self.default_plan
        return plan if isinstance(plan, str) else json.dumps(plan)

    @staticmethod
    def _summary(prompt: str) -> str:
        numbers = "".join(f"[{n}]" for n, _ in _passages(prompt))
        return f"Summary of {_field(prompt, 'Question')} {numbers}"

    @staticmethod
    def _answer(prompt: str) -> str:
        numbers = [n for n, _ in _passages(prompt)]
        return f"The storm flooded the town [{numbers[0]}].\n\nThe mayor opened shelters in the school."

    def prompts(self, pattern: str) -> list[str]:
        return [call["prompt"] for call in self.llm.calls if re.search(pattern, call["prompt"], re.DOTALL)]


TWO_LEVELS = {
    QUESTION: {"sub_questions": ["How were the boats damaged?", "What did the mayor do?",
                                 "What was the weather forecast?"]},
    "mayor": {"sub_questions": ["Where did the children sleep in the school shelters?"]},
}


def _retriever(top_k: int = 1) -> KeywordRetriever:
    return KeywordRetriever(list(CORPUS), top_k=top_k)


def _contregen(script: Script, retriever: KeywordRetriever, *, top_k: int = 1, max_depth: int = 2,
               max_breadth: int = 5, max_llm_calls: int = 64, concurrency: int = 2) -> ConTReGenPipeline:
    retriever.top_k = top_k
    expander = ConTReTreeExpander(script.llm, max_depth=max_depth, max_breadth=max_breadth,
                                  max_llm_calls=max_llm_calls, concurrency=concurrency)
    return ConTReGenPipeline(retriever, expander, ConTReGenSynthesizer(script.llm, concurrency=concurrency),
                             top_k=top_k, max_question_chars=500)


def _nodes(result: Any) -> dict[str, dict[str, Any]]:
    """The synthesised tree from the synthesizer's step outputs, by node id."""
    step = next(s for s in result.steps if s.name == "contregen_synthesizer")
    return {node["id"]: node for node in step.outputs["tree"]["nodes"]}


class TestTreeShape:
    def test_expands_to_max_depth_with_verified_sub_questions(self) -> None:
        script, retriever = Script(TWO_LEVELS), _retriever()
        result = _contregen(script, retriever).run(QUESTION, ALICE)

        nodes = _nodes(result)
        assert result.stop_reason == STOP_TREE_COMPLETE
        assert {node_id: node["status"] for node_id, node in nodes.items()} == {
            "0": "root", "0.1": ACCEPTED, "0.2": ACCEPTED, "0.3": REJECTED_NOT_NEEDED, "0.2.1": ACCEPTED}
        assert nodes["0.2.1"]["parent"] == "0.2" and nodes["0.2.1"]["depth"] == 2
        # Verification (i) rewrote the sub-question into a self-contained query, which was retrieved for.
        assert nodes["0.1"]["query"] == "How were the boats damaged? (after the storm)"
        assert [call["query"] for call in retriever.calls][:1] == [QUESTION]
        # Depth 2 is the limit: its node was never planned.
        assert nodes["0.2.1"]["plan"] == "max_depth"
        assert len(script.prompts(PLAN)) == 3  # the root, 0.1 and 0.2

    def test_depth_one_never_plans_below_the_first_level(self) -> None:
        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever(), max_depth=1).run(QUESTION, ALICE)

        nodes = _nodes(result)
        assert max(node["depth"] for node in nodes.values()) == 1
        assert len(script.prompts(PLAN)) == 1

    def test_breadth_keeps_the_first_sub_questions_of_a_plan(self) -> None:
        plan = {QUESTION: {"sub_questions": [f"What happened to the boats, part {i}?" for i in range(6)]}}
        script = Script(plan)
        result = _contregen(script, _retriever(), max_depth=1, max_breadth=2).run(QUESTION, ALICE)

        nodes = _nodes(result)
        assert nodes["0"]["children"] == ["0.1", "0.2"]
        assert len(script.prompts(VERIFY)) == 2

    def test_a_sub_question_judged_unnecessary_is_neither_retrieved_for_nor_expanded(self) -> None:
        script, retriever = Script(TWO_LEVELS | {"forecast": {"sub_questions": ["Was it windy?"]}}), _retriever()
        result = _contregen(script, retriever).run(QUESTION, ALICE)

        forecast = _nodes(result)["0.3"]
        assert forecast["status"] == REJECTED_NOT_NEEDED and forecast["needed"] == "no"
        assert forecast["children"] == [] and forecast["passage_ids"] == []
        assert not any("forecast" in call["query"] for call in retriever.calls)
        assert not any("forecast" in _field(p, "Current question") for p in script.prompts(PLAN))
        assert not any("forecast" in p for p in script.prompts(SUMMARY))

    def test_irrelevant_passages_are_dropped_and_never_cited(self) -> None:
        plan = {QUESTION: {"sub_questions": ["Was fish soup with cod and potatoes served?"]}}
        script = Script(plan)
        result = _contregen(script, _retriever(top_k=1), max_depth=1).run(QUESTION, ALICE)

        soup = _nodes(result)["0.1"]
        assert soup["status"] == REJECTED_NO_RELEVANT
        assert {"id": "recipe", "reason": "judged irrelevant"} in soup["dropped"]
        assert "recipe" not in [c.document_id for c in result.citations]
        assert not any("recipe" in p for p in script.prompts(SUMMARY) + script.prompts(ANSWER))

    def test_a_rewrite_that_echoes_the_prompt_falls_back_to_the_sub_question(self) -> None:
        script = Script({QUESTION: {"sub_questions": ["How were the boats damaged?"]}},
                        verify='{"needed": "Yes", "query": "the rewritten search query, or empty"}')
        retriever = _retriever()
        result = _contregen(script, retriever, max_depth=1).run(QUESTION, ALICE)

        assert _nodes(result)["0.1"]["query"] == "How were the boats damaged?"
        assert [call["query"] for call in retriever.calls] == [QUESTION, "How were the boats damaged?"]

    def test_passages_already_in_the_tree_are_not_judged_again(self) -> None:
        plan = {QUESTION: {"sub_questions": ["What did the storm do to the harbour town docks?"]}}
        script = Script(plan)
        result = _contregen(script, _retriever(top_k=1), max_depth=1).run(QUESTION, ALICE)

        node = _nodes(result)["0.1"]
        assert node["status"] == REJECTED_NO_RELEVANT
        assert node["dropped"] == [{"id": "storm", "reason": "already in the tree"}]
        assert script.prompts(RELEVANCE) == []


class TestMalformedPlans:
    @pytest.mark.parametrize("plan", ["not json at all", '{"questions": ["x?"]}', '{"sub_questions": "one?"}'])
    def test_an_unreadable_plan_stops_that_branch_and_still_answers(self, plan: str) -> None:
        script = Script(default_plan=plan)
        result = _contregen(script, _retriever()).run(QUESTION, ALICE)

        nodes = _nodes(result)
        assert list(nodes) == ["0"] and nodes["0"]["plan"] == "malformed"
        assert result.stop_reason == STOP_TREE_COMPLETE
        assert result.answer.startswith("The storm flooded the town")

    def test_junk_items_repeats_and_the_question_itself_are_skipped(self) -> None:
        plan = {"sub_questions": [1, None, "   ", QUESTION, "2. How were the boats damaged?",
                                  "how were the boats damaged", "x" * 1000]}
        script = Script({QUESTION: plan})
        result = _contregen(script, _retriever(), max_depth=1).run(QUESTION, ALICE)

        children = [node for node in _nodes(result).values() if node["parent"] == "0"]
        assert [node["sub_question"] for node in children] == ["How were the boats damaged?", "x" * 300]


class TestSynthesis:
    def test_leaves_are_summarised_before_their_parents_and_the_root_answers_last(self) -> None:
        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever()).run(QUESTION, ALICE)

        summaries = [s for s in result.steps if s.kind == "summary"]
        order = [s.outputs["node"] for s in summaries]
        assert order.index("0.2.1") < order.index("0.2")
        assert set(order) == {"0.1", "0.2", "0.2.1"}
        synth = next(s for s in result.steps if s.name == "contregen_synthesizer")
        node_summaries = next(s for s in result.steps if s.name == "contregen_summaries")
        assert node_summaries.parent == synth.index and all(s.parent == node_summaries.index for s in summaries)
        # The root's answer is a prompted step of the graph: its prompt, model call and reply are steps of their own.
        answer_steps = {s.name: s for s in result.steps if s.name.startswith("contregen_answer")}
        assert set(answer_steps) == {"contregen_answer", "contregen_answer_request", "contregen_answer_prompt",
                                     "contregen_answer_llm", "contregen_answer_parser"}
        assert answer_steps["contregen_answer_llm"].kind == "generation"
        assert answer_steps["contregen_answer"].parent == synth.index
        calls = [c["prompt"] for c in script.llm.calls]
        answer_at = next(i for i, p in enumerate(calls) if re.search(ANSWER, p))
        assert answer_at == len(calls) - 1
        # The parent merged its child's summary (with the child's citations) into its own.
        mayor_prompt = next(p for p in script.prompts(SUMMARY) if "What did the mayor do?" in _field(p, "Question"))
        assert "Findings on \"Where did the children sleep" in mayor_prompt

    def test_each_node_summary_is_a_prompted_step_of_the_graph_with_the_templates_prompt(self) -> None:
        from haystack.components.builders import ChatPromptBuilder
        from haystack.dataclasses import ChatMessage

        from docqa.components.prompt_templates import load_prompt, render_prompt

        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever()).run(QUESTION, ALICE)
        by_index = {s.index: s for s in result.steps}
        summaries = [s for s in result.steps if s.kind == "summary"]
        assert len(summaries) == len(script.prompts(SUMMARY)) == 3
        for summary in summaries:
            [writer] = [s for s in result.steps if s.parent == summary.index]
            inner = [s for s in result.steps if s.parent == writer.index]
            assert writer.name == "node_summary" and [s.name for s in inner] == [
                "contregen_summary_prompt", "contregen_summary_llm", "contregen_summary_parser"]
            assert [s.llm.calls for s in inner] == [0, 1, 0] and by_index[summary.parent].name == "contregen_summaries"
        # The graph's ChatPromptBuilder renders the template as docqa's own rendering did: the same prompt.
        template = load_prompt("contregen_summarize")
        context = {"question": "Where?", "passages": [{"number": 1, "text": "They slept in the barn."}],
                   "children": [{"sub_question": "Who?", "summary": "The mayor [1]."}]}
        built = ChatPromptBuilder(template=[ChatMessage.from_user(template)], variables=list(context))
        assert built.run(**context)["prompt"][0].text == render_prompt(template, **context)

    def test_every_paragraph_cites_and_citations_map_to_tree_passages(self) -> None:
        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever()).run(QUESTION, ALICE)

        paragraphs = result.answer.split("\n\n")
        assert len(paragraphs) == 2 and all(re.search(r"\[\d+\]\.?$", p) for p in paragraphs)
        synth = next(s for s in result.steps if s.name == "contregen_synthesizer")
        assert [p["mode"] for p in synth.outputs["paragraphs"]] == ["model", "overlap"]
        passages = synth.outputs["tree"]["passages"]
        cited_numbers = [n for p in synth.outputs["paragraphs"] for n in p["citations"]]
        assert [c.document_id for c in result.citations] == [passages[n - 1]["id"] for n in cited_numbers]
        # The overlap citation of the mayor's paragraph is the mayor's passage.
        assert passages[cited_numbers[1] - 1]["id"] == "mayor"

    def test_no_readable_passage_answers_nothing_without_calling_the_llm(self) -> None:
        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever()).run("Quantum chromodynamics lattice?", ALICE)

        assert result.stop_reason == STOP_NO_PASSAGES
        assert result.answer == "No passage that alice or everyone may read matches the question."
        assert result.answer_source == "none" and result.citations == []
        assert script.llm.calls == []


class TestBudget:
    def test_the_budget_stops_expansion_and_still_synthesises(self) -> None:
        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever(), max_llm_calls=6, concurrency=1).run(QUESTION, ALICE)

        assert result.stop_reason == STOP_LLM_BUDGET
        assert result.totals.llm_calls == len(script.llm.calls) <= 6
        statuses = {node["status"] for node in _nodes(result).values()}
        assert SKIPPED_BUDGET in statuses
        assert re.search(ANSWER, script.llm.calls[-1]["prompt"])
        assert result.answer.startswith("The storm flooded the town")
        expansion = [s for s in result.steps if s.name == "contre_tree_expander"][-1]  # the loop's last round
        assert expansion.outputs["tree"]["budget"] == 6
        assert expansion.outputs["tree"]["stop_reason"] == STOP_LLM_BUDGET

    def test_siblings_take_the_budget_in_plan_order_each_finished_before_the_next(self) -> None:
        script, retriever = Script(TWO_LEVELS), _retriever()
        result = _contregen(script, retriever, max_llm_calls=6, concurrency=1).run(QUESTION, ALICE)

        # One node at a time: verified, retrieved for, judged and planned before its sibling is verified.
        kinds = {PLAN: "plan", VERIFY: "verify", RELEVANCE: "relevance", SUMMARY: "summary", ANSWER: "answer"}
        assert [next(k for p, k in kinds.items() if re.search(p, c["prompt"])) for c in script.llm.calls] == [
            "plan", "verify", "relevance", "plan", "summary", "answer"]
        assert [call["query"] for call in retriever.calls] == [
            QUESTION, "How were the boats damaged? (after the storm)"]
        assert {i: node["status"] for i, node in _nodes(result).items()} == {
            "0": "root", "0.1": ACCEPTED, "0.2": SKIPPED_BUDGET, "0.3": SKIPPED_BUDGET}

    def test_the_runs_own_call_limit_bounds_the_tree_without_an_error(self) -> None:
        script = Script(TWO_LEVELS)
        control = RunControl(max_llm_calls=5, max_completion_tokens=1024, max_prompt_chars=100_000)
        with control.active():
            result = _contregen(script, _retriever(), max_llm_calls=64).run(QUESTION, ALICE)

        assert result.stop_reason == STOP_LLM_BUDGET
        assert control.llm_calls == len(script.llm.calls) <= 5
        assert result.answer

    def test_a_budget_of_one_call_answers_from_the_questions_passages(self) -> None:
        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever(), max_llm_calls=1).run(QUESTION, ALICE)

        assert len(script.llm.calls) == 1 and re.search(ANSWER, script.llm.calls[0]["prompt"])
        assert result.stop_reason == STOP_LLM_BUDGET and result.answer


class TestAccessAndTrace:
    def test_every_branch_retrieves_with_the_callers_filters_only(self) -> None:
        script, retriever = Script(TWO_LEVELS), _retriever(top_k=3)
        result = _contregen(script, retriever, top_k=3).run(QUESTION, ALICE)

        assert len(retriever.calls) == 3  # the question and the two needed sub-questions
        # Each retrieval is a run of the graph's retriever node, so a step of its own.
        assert [s.inputs["query"] for s in result.steps if s.name == "hybrid_retriever"] == [
            call["query"] for call in retriever.calls]
        assert all(call["filters"] == ALICE.to_filters() for call in retriever.calls)
        everything = json.dumps([s.to_dict() for s in result.steps]) + json.dumps(script.llm.calls)
        assert "Payroll" not in everything and "Other tenant" not in everything
        assert {c.document_id for c in result.citations} <= {"storm", "boats", "mayor", "school"}

    def test_the_tree_is_drawn_by_the_steps_parent_links(self) -> None:
        script = Script(TWO_LEVELS)
        result = _contregen(script, _retriever()).run(QUESTION, ALICE)

        by_name = {s.name: s for s in result.steps}
        expander = by_name["contre_tree_expander"]  # the loop's last round, which emits the tree
        first = next(s for s in result.steps if s.name == "contre_tree_expander")
        assert by_name["contre_node 0"].parent == first.index
        assert by_name["contre_node 0.2"].parent == by_name["contre_node 0"].index
        assert by_name["contre_node 0.2.1"].parent == by_name["contre_node 0.2"].index
        rejected = by_name["contre_node 0.3"]
        assert rejected.outputs["node"]["status"] == REJECTED_NOT_NEEDED
        # Each node's model calls are prompted steps of the expander's graph under the node's step: the call router,
        # then the prompted step (its variables, prompt, model call and reply read); the totals count each call once.
        children = [s for s in result.steps if s.parent == rejected.index]
        assert [s.name for s in children] == ["contre_call", "contre_verify"]
        assert children[1].outputs["data"]["needed"] == "No"
        inner = [s for s in result.steps if s.parent == children[1].index]
        assert [s.name for s in inner] == ["contre_verify_request", "contre_verify_prompt", "contre_verify_llm",
                                           "contre_verify_parser"]
        assert [c["purpose"] for c in inner[2].outputs["llm_calls"]] == ["contre_verify"]
        assert result.totals.llm_calls == len(script.llm.calls)
        assert {n["id"] for n in expander.outputs["tree"]["nodes"]} == {"0", "0.1", "0.2", "0.3", "0.2.1"}

    def test_branches_run_concurrently_within_the_bound(self) -> None:
        plan = {QUESTION: {"sub_questions": [f"What happened to the boats, part {i}?" for i in range(5)]}}
        script = Script(plan, delay=0.05)
        _contregen(script, _retriever(), max_depth=1, concurrency=3).run(QUESTION, ALICE)

        assert script.max_active == 3


class TestConTRe:
    def test_returns_the_tree_and_its_passages_without_generating(self) -> None:
        script, retriever = Script(TWO_LEVELS), _retriever()
        retriever.top_k = 2
        strategy = ConTRePipeline(retriever, ConTReTreeExpander(script.llm), top_k=2, max_question_chars=500)
        result = strategy.run(QUESTION, ALICE)

        assert script.prompts(SUMMARY) == [] and script.prompts(ANSWER) == []
        assert result.stop_reason == STOP_TREE_COMPLETE
        lines = result.answer.splitlines()
        assert lines[0].startswith(f"- {QUESTION} [1][2]")
        assert any("(rejected_not_needed)" in line for line in lines)
        ids = [c.document_id for c in result.citations]
        assert len(ids) == len(set(ids)) and {"storm", "boats", "mayor"} <= set(ids)


class TestRegistryAndYaml:
    def test_options_are_bounded_by_the_server_ceilings(self, tmp_path) -> None:
        from docqa.errors import InvalidOptionsError

        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: ScriptedChatGenerator())
        with pytest.raises(InvalidOptionsError, match="max_depth must be at most 3"):
            build_pipeline("contregen", runtime, max_depth=9)
        with pytest.raises(InvalidOptionsError, match="max_llm_calls must be at most 64"):
            build_pipeline("contre", runtime, max_llm_calls=65)
        with pytest.raises(InvalidOptionsError, match="answer_tokens"):
            build_pipeline("contre", runtime, answer_tokens=100)

    @pytest.mark.parametrize("name", ["contregen", "contre"])
    def test_the_export_loads_back_with_the_docqa_allow_list(self, tmp_path, name: str) -> None:
        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: ScriptedChatGenerator())
        built = build_pipeline(name, runtime, top_k=3, max_depth=1, max_breadth=4, max_llm_calls=20)
        text = export_strategy(name, runtime, top_k=3, max_depth=1, max_breadth=4, max_llm_calls=20)
        assert "api_key" not in text
        assert str(tmp_path) not in text
        loaded = load_strategy(text, name="copy", source="copy.yaml", runtime=runtime).pipeline
        # Bound to the same deployment, the copy is the built graph (a file strategy adds the grounding check
        # that `contre`, generating nothing, goes without).
        copy, original = loaded.to_dict()["components"], built.pipeline.to_dict()["components"]
        assert {name: copy[name] for name in original} == original
        assert set(copy) - set(original) <= {"grounding"}
        expander, retriever = loaded.get_component("contre_tree_expander"), loaded.get_component("hybrid_retriever")
        assert (expander.max_depth, expander.max_breadth, expander.max_llm_calls, retriever.top_k) == (1, 4, 20, 3)
        # The retrieval is a node of the graph, not a part of the expander.
        assert "retriever" not in copy["contre_tree_expander"]["init_parameters"]
        assert {"sender": "contre_tree_expander.query", "receiver": "hybrid_retriever.query"} in (
            loaded.to_dict()["connections"])

    def test_the_export_loads_as_a_file_strategy_bound_to_the_runtime(self, tmp_path) -> None:
        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: ScriptedChatGenerator())
        text = export_strategy("contregen", runtime, top_k=2)
        strategy = load_strategy(text, name="copy", source="copy.yaml", runtime=runtime)
        retriever = strategy.pipeline.get_component("hybrid_retriever")
        assert retriever.bm25_retriever.document_store is runtime.document_store
        assert set(strategy._outputs) == {"answer", "stop_reason", "cited_documents"}
