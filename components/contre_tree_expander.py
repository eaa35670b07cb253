"""ConTRe's top-down half: plan sub-questions, verify them in two steps around the retrievals the graph runs for
them, and recurse to a bounded depth."""

from __future__ import annotations

import asyncio
import re
import threading
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict
from haystack.components.routers import ConditionalRouter
from haystack.core.component.types import _empty
from haystack.core.errors import PipelineRuntimeError
from haystack.core.serialization import component_to_dict
from haystack.core.super_component import SuperComponent
from haystack.tracing import Span
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.context_tree import (
    ACCEPTED,
    REJECTED_NO_RELEVANT,
    REJECTED_NOT_NEEDED,
    REJECTED_UNREADABLE,
    SKIPPED_BUDGET,
    STOP_LLM_BUDGET,
    STOP_NO_PASSAGES,
    STOP_TREE_COMPLETE,
    ContextTree,
    TreeNode,
)
from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM, expose_sockets
from docqa.components.reply_parsers import JsonObjectReplyParser
from docqa.errors import check_bounds
from docqa.llm.calls import ChatGenerator
from docqa.recording import run_concurrently
from docqa.run_control import budget_error_behind, current_run
from docqa.spans import STEP_INPUT, OpenStep, step_index

MAX_SUB_QUESTION_CHARS = 300
PLAN_ITEM_CHARS = 160
# Ceilings of the constructor's bounds, whatever a deployment configures: one question stays affordable.
MAX_DEPTH = 4
MAX_BREADTH = 10
MAX_CONCURRENCY = 32


def _plan_schema(max_items: int) -> dict[str, Any]:
    return {
        "type": "object",
        # At least one: a constrained small model otherwise settles for the empty list (the paper always plans);
        # verification (i) is where a sub-question turns out not to be needed.
        # Short items: a reply cut off by the token cap is unreadable JSON, so the schema keeps the plan within it.
        "properties": {"sub_questions": {"type": "array", "items": {"type": "string", "maxLength": PLAN_ITEM_CHARS},
                                         "minItems": 1, "maxItems": max_items}},
        "required": ["sub_questions"],
        "additionalProperties": False,
    }


VERIFY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"needed": {"type": "string", "enum": ["Yes", "No"]}, "query": {"type": "string"}},
    "required": ["needed", "query"],
    "additionalProperties": False,
}
RELEVANCE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"relevant": {"type": "array", "items": {"type": "integer"}}},
    "required": ["relevant"],
    "additionalProperties": False,
}


# The expansion's three prompted steps: their template variables and reply token caps (the plan's is configured).
CALL_VARIABLES: dict[str, tuple[str, ...]] = {
    "verify": ("question", "parent", "sub_question"),
    "relevance": ("question", "query", "passages"),
    "plan": ("question", "parent", "passages", "max_sub_questions"),
}
VERIFY_TOKENS = 128
RELEVANCE_TOKENS = 64


def call_routes() -> list[dict[str, Any]]:
    """The call router's routes: a call's variables go to the prompted step of its kind."""
    return [{"condition": "{{ kind == '" + kind + "' }}", "output": "variables", "output_name": f"{kind}_variables",
             "output_type": dict[str, Any], "output_passthrough": True} for kind in CALL_VARIABLES]


@component
class CallVariables:
    """
    Hands one expansion call's prompt variables on by name, to the template of its prompted step.

    Usage example:
    ```python
    CallVariables(["question", "query"]).run(variables={"question": "Who?", "query": "q"})  # {"question": ..., ...}
    ```
    """

    def __init__(self, names: list[str]) -> None:
        """:param names: the template's variables."""
        self.names = list(names)
        component.set_output_types(self, **dict.fromkeys(self.names, Any))

    def run(self, variables: dict[str, Any]) -> dict[str, Any]:
        """
        :param variables: the call's variables by name.
        :returns: each named variable (None when not given).
        """
        return {name: variables.get(name) for name in self.names}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, names=self.names)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CallVariables:
        return default_from_dict(cls, data)


class CallBudget:
    """The expansion's share of the question's LLM calls: every accepted node keeps one call in reserve for its
    summary, and the root one for the final answer, so synthesis never starves (thread-safe)."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.used = 0
        self.reserved = 1  # the root's final answer
        self.exhausted = False
        self._lock = threading.Lock()

    def __deepcopy__(self, memo: dict[int, Any]) -> CallBudget:
        # Haystack copies the loop state at every hop; a lock cannot be copied, so the copy gets its own.
        with self._lock:
            copied = CallBudget(self.total)
            copied.used, copied.reserved, copied.exhausted = self.used, self.reserved, self.exhausted
            return copied

    def take(self, calls: int = 1, reserve: int = 0) -> bool:
        """Spend `calls` now and keep `reserve` for later; False (and exhausted) when that would overspend."""
        with self._lock:
            if self.used + calls + self.reserved + reserve > self.total:
                self.exhausted = True
                return False
            self.used += calls
            self.reserved += reserve
            return True

    def release(self, reserve: int) -> None:
        with self._lock:
            self.reserved -= reserve

    def stop(self) -> None:
        with self._lock:
            self.exhausted = True


@dataclass(frozen=True)
class ExpansionState:
    """What the expander carries from one of its runs to the next for one question: the tree so far and its call
    budget; the `wave` of nodes verified as needed whose queries are retrieved for, one per round, each with its
    open step, and the documents `retrieved` so far for the first of them; the nodes of the current level not
    yet verified (`frontier`) and those judged (`judged`, whose children make the next level); the steps of the
    level above (`parents`, the parents of the frontier's steps).

    Haystack copies it at every hop like any other value (the tree and the budget copy themselves; an open step
    is a handle, the same step in every copy); each run works on its own copy and hands a new state on.
    """

    tree: ContextTree
    budget: CallBudget
    wave: tuple[tuple[str, OpenStep], ...] = ()
    retrieved: tuple[tuple[Document, ...], ...] = ()
    frontier: tuple[str, ...] = ()
    judged: tuple[tuple[str, OpenStep], ...] = ()
    parents: tuple[tuple[str, OpenStep], ...] = ()

    @property
    def next_node(self) -> str | None:
        """The node whose query is retrieved for next, None when the wave's retrievals are all in."""
        return self.wave[len(self.retrieved)][0] if len(self.retrieved) < len(self.wave) else None

    def to_dict(self) -> dict[str, Any]:
        """Compact form for the trace: the nodes are in their steps, the documents in the retrievals."""
        return {"retrieving_for": self.next_node, "wave": [node_id for node_id, _ in self.wave],
                "retrieved": {node_id: [doc.id for doc in docs]
                              for (node_id, _), docs in zip(self.wave, self.retrieved, strict=False)},
                "frontier": list(self.frontier), "judged": [node_id for node_id, _ in self.judged],
                "nodes": len(self.tree.nodes), "llm_calls": self.budget.used, "budget": self.budget.total}


def _clean_sub_question(text: Any) -> str:
    if not isinstance(text, str):
        return ""
    text = re.sub(r"^\s*(?:[-*•]|\d+[.)])\s*", "", " ".join(text.split()))
    return text[:MAX_SUB_QUESTION_CHARS]


def _normalised(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _content_words(text: str) -> set[str]:
    return {word for word in re.findall(r"[a-z0-9]+", text.lower()) if len(word) >= 4}


@component
class ConTReTreeExpander(SuperComponent):
    """
    Builds ConTReGen's context tree top-down (the retrieval half, ConTRe), in a loop with a retriever node.

    The question is retrieved for; a planner reads it with those passages and proposes up to `max_breadth`
    sub-questions, one facet each. Each sub-question is verified in two steps: (i) is it needed for its parent?
    if so it is rewritten as a self-contained search query; (ii) that query is retrieved for, and only passages
    judged relevant to the original question are kept. Accepted nodes are planned again down to `max_depth`.
    Verification (ii) judges a node's passages in one call, not one call per passage. Passages already in the
    tree are not judged again: a node that brings nothing new stops there.

    The retrieval is not done here but by the graph: each run emits a `query` (with the loop `state`) for the
    retriever node, whose `documents` come back with the state. The first run asks for the question's passages;
    then, level by level and `concurrency` nodes at a time in the order they were planned, the nodes are verified
    (i) concurrently, the query of each needed one is retrieved for (one loop round each), and their passages are
    judged and planned from concurrently. The last run emits the `tree` and its `documents`. The caller's
    `filters` go to the retriever node from docqa, as to this one.

    Bounded: depth, breadth and a total LLM call budget (the smaller of `max_llm_calls` and what the run may still
    spend), one call of which is kept per accepted node for its summary. When the budget ends the expansion the
    tree so far is returned with `stop_reason="llm_budget"`. Sibling nodes' calls run concurrently on at most
    `concurrency` threads; `runs_per_question` bounds the loop's rounds. Each node is a span (`docqa.tree_node`,
    so a step of the trace) whose parent is its parent node's span, with its verdicts, kept and dropped passages;
    its model calls are spans under it. A node's span is open from its verification (i) to its plan, over the
    graph's retrieval of its query (an `OpenStep`).

    Each model call is a run of this `SuperComponent`'s graph inside the node's span: `contre_call` (a
    `ConditionalRouter` on the call's kind) -> `contre_verify`, `contre_relevance` or `contre_plan`, each a
    prompted LLM step (its `ChatPromptBuilder` with the template, one schema-constrained call, its reply read).

    Usage example (the graph is `docqa.pipelines.contregen.contre_graph`):
    ```python
    pipeline = Pipeline(max_runs_per_component=expander.runs_per_question())
    pipeline.add_component("contre_tree_expander", ConTReTreeExpander(chat_generator=OpenAIChatGenerator(...)))
    pipeline.add_component("hybrid_retriever", HybridRetriever(...))
    pipeline.add_component("expansion_state", BranchJoiner(ExpansionState))
    pipeline.connect("contre_tree_expander.query", "hybrid_retriever.query")
    pipeline.connect("hybrid_retriever.documents", "contre_tree_expander.documents")
    pipeline.connect("contre_tree_expander.state", "expansion_state.value")
    pipeline.connect("expansion_state.value", "contre_tree_expander.state")
    out = pipeline.run({"contre_tree_expander": {"query": question, "filters": filters},
                        "hybrid_retriever": {"filters": filters}})["contre_tree_expander"]
    out["tree"].to_dict()["nodes"], out["documents"]
    ```
    """

    step_kind = "tree_expansion"

    def __init__(
        self,
        chat_generator: ChatGenerator,
        *,
        max_depth: int = 2,
        max_breadth: int = 5,
        max_llm_calls: int = 64,
        concurrency: int = 4,
        max_passage_chars: int = 1200,
        plan_tokens: int = 400,
        plan_template: str | None = None,
        verify_template: str | None = None,
        relevance_template: str | None = None,
    ) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "planner" role in docqa.
        :param max_depth: Levels of sub-questions below the question (the paper uses 2).
        :param max_breadth: Sub-questions kept per plan (the paper plans 5).
        :param max_llm_calls: Calls this question may make in all, expansion and synthesis together.
        :param concurrency: Nodes whose calls run at once.
        :param max_passage_chars: Characters of each passage shown in a prompt.
        :param plan_tokens: Token cap of one plan.
        :param plan_template: Jinja2 template (`question`, `parent`, `passages`, `max_sub_questions`).
        :param verify_template: Jinja2 template (`question`, `parent`, `sub_question`).
        :param relevance_template: Jinja2 template (`question`, `query`, `passages`).
        :raises ValueError: a bound out of range.
        """
        check_bounds(max_depth=(max_depth, 1, MAX_DEPTH), max_breadth=(max_breadth, 1, MAX_BREADTH),
                     concurrency=(concurrency, 1, MAX_CONCURRENCY), max_llm_calls=(max_llm_calls, 1, None),
                     max_passage_chars=(max_passage_chars, 50, None), plan_tokens=(plan_tokens, 16, None))
        self.chat_generator = chat_generator
        self.max_depth = max_depth
        self.max_breadth = max_breadth
        self.max_llm_calls = max_llm_calls
        self.concurrency = concurrency
        self.max_passage_chars = max_passage_chars
        self.plan_tokens = plan_tokens
        self.plan_template = plan_template or load_prompt("contregen_plan")
        self.verify_template = verify_template or load_prompt("contregen_verify")
        self.relevance_template = relevance_template or load_prompt("contregen_relevance")
        calls = {
            "verify": (self.verify_template, VERIFY_SCHEMA, VERIFY_TOKENS),
            "relevance": (self.relevance_template, RELEVANCE_SCHEMA, RELEVANCE_TOKENS),
            "plan": (self.plan_template, _plan_schema(max_breadth), plan_tokens),
        }
        pipeline = Pipeline()
        pipeline.add_component("contre_call", ConditionalRouter(call_routes()))
        self.step_kinds: dict[str, str] = {"contre_call": "routing"}
        for kind, (template, schema, tokens) in calls.items():
            names = list(CALL_VARIABLES[kind])
            step = PromptedLLM(chat_generator, template, JsonObjectReplyParser(schema, check_types=False),
                               variables=names, outputs={"data": "data"}, max_tokens=tokens, output="json",
                               schema=schema, schema_name=kind, purpose=f"contre_{kind}",
                               request=CallVariables(names))
            pipeline.add_component(f"contre_{kind}", step)
            pipeline.connect(f"contre_call.{kind}_variables", f"contre_{kind}.variables")
            self.step_kinds.update({f"contre_{kind}": "tree_call", **step.step_kinds})
        SuperComponent.__init__(
            self, pipeline, input_mapping={"kind": ["contre_call.kind"], "variables": ["contre_call.variables"]},
            output_mapping={f"contre_{kind}.data": kind for kind in calls})
        # Outside, the expansion loop's sockets: its graph runs once per model call, not once per run.
        expose_sockets(self, {"query": (str, _empty), "filters": (dict[str, Any] | None, None),
                              "state": (ExpansionState | None, None), "documents": (list[Document] | None, None)},
                       {"query": str, "state": ExpansionState, "tree": ContextTree, "documents": list[Document]})

    def runs_per_question(self) -> int:
        """Runs of the expander (and of its retriever) one question needs at most, the graph's
        `max_runs_per_component`: the start, then one after each retrieval, the question's and one per node
        verified as needed, which costs a call of the budget and is a node of the bounded tree."""
        nodes = sum(self.max_breadth**depth for depth in range(1, self.max_depth + 1))
        return 2 + min(self.max_llm_calls, nodes)

    async def run_async(self, **kwargs: Any) -> dict[str, Any]:
        """`run` in a worker thread (its nodes' calls already run concurrently there)."""
        return await asyncio.to_thread(partial(self.run, **kwargs))

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param query: The question.
        :param filters: The caller's access filters (the retriever node takes them too); shown in the node steps.
        :param state: The loop state sent with the last `query`; None on the first run.
        :param documents: The retriever's documents for that `query`.
        :returns: The next `query` to retrieve for with the `state`, or, when the expansion ends, the `tree` (its
            `stop_reason` says why) and its deduplicated `documents`.
        :raises ValueError: a state without the documents of its retrieval (a mis-wired graph).
        """
        query, filters = kwargs["query"], kwargs.get("filters")
        state: ExpansionState | None = kwargs.get("state")
        documents: list[Document] | None = kwargs.get("documents")
        if state is None:
            return self._start(query, filters)
        if documents is None or state.next_node is None:
            raise ValueError("the expander got its state back without the documents retrieved for its query")
        state = replace(state, retrieved=(*state.retrieved, tuple(documents)))
        tree, budget = state.tree, state.budget
        if state.next_node is not None:  # the wave's next retrieval, one loop round each
            return {"query": tree.nodes[state.next_node].query, "state": state}
        if state.wave[0][0] == tree.root.id:
            root = state.wave[0][1]
            root.finish(self._expand_root, lambda: {"node": tree.root.to_dict()}, tree, list(state.retrieved[0]),
                        budget)
        else:
            run_concurrently(*[partial(self._judge, tree, tree.nodes[node_id], step, list(docs), budget)
                               for (node_id, step), docs in zip(state.wave, state.retrieved, strict=True)],
                             max_workers=self.concurrency)
        judged, frontier, parents = (*state.judged, *state.wave), state.frontier, state.parents
        while True:
            if not frontier:  # the level is done: its judged nodes' children are the next one
                frontier = tuple(child for node_id, _ in judged for child in tree.nodes[node_id].children)
                parents, judged = judged, ()
                if not frontier:
                    break
            # Verified `concurrency` at a time, in order, each with its retrieval and judgement before the next
            # ones: siblings take the call budget in the order they were planned.
            batch, frontier = frontier[: self.concurrency], frontier[self.concurrency:]
            spans = {node_id: step.span for node_id, step in parents}
            opened = run_concurrently(*[partial(self._verify, tree, tree.nodes[node_id], filters, budget,
                                                spans.get(tree.nodes[node_id].parent or "0")) for node_id in batch],
                                      max_workers=self.concurrency)
            wave = tuple((node_id, step) for node_id, step in zip(batch, opened, strict=True) if step is not None)
            if wave:
                return {"query": tree.nodes[wave[0][0]].query,
                        "state": ExpansionState(tree, budget, wave, (), frontier, judged, parents)}
        if not tree.documents:
            tree.stop_reason = STOP_NO_PASSAGES
        elif budget.exhausted:
            tree.stop_reason = STOP_LLM_BUDGET
        else:
            tree.stop_reason = STOP_TREE_COMPLETE
        return {"tree": tree, "documents": list(tree.documents.values())}

    def _start(self, question: str, filters: dict[str, Any] | None) -> dict[str, Any]:
        tree = ContextTree(question=question)
        budget = CallBudget(self._call_budget())
        tree.budget = budget.total
        root = tree.add_node(None, question)
        if budget.total < 1:
            budget.stop()
        # The root's step is open over the retrieval for the question, like every node's over its query's.
        step = OpenStep.open("tree_node", "contre_node 0", inputs={"query": root.query, "filters": filters})
        root.step = step_index(step.span)
        return {"query": root.query, "state": ExpansionState(tree, budget, wave=((root.id, step),))}

    # ---- budget -------------------------------------------------------------------------------------------

    def _call_budget(self) -> int:
        """This strategy's limit, or less when the run's own per-question budget has less left."""
        control = current_run()
        if control is None:
            return self.max_llm_calls
        return max(0, min(self.max_llm_calls, control.max_llm_calls - control.llm_calls))

    def _ask(self, tree: ContextTree, budget: CallBudget, kind: str, **variables: Any) -> tuple[bool,
                                                                                              dict[str, Any] | None]:
        """(called, output) of one prompted call of `kind`; `called` is False when the run's budget refused it."""
        try:
            out = self.pipeline.run({"contre_call": {"kind": kind, "variables": variables}})
        except PipelineRuntimeError as exc:
            if budget_error_behind(exc) is None:
                raise
            # The shared client has the last word (e.g. another part of the run spent calls meanwhile).
            budget.stop()
            return False, None
        tree.count_call(kind)
        return True, out[f"contre_{kind}"]["data"]

    def _passages(self, documents: list[Document]) -> list[dict[str, Any]]:
        return [{"number": number, "text": " ".join((doc.content or "").split())[: self.max_passage_chars]}
                for number, doc in enumerate(documents, start=1)]

    # ---- nodes --------------------------------------------------------------------------------------------

    def _expand_root(self, tree: ContextTree, documents: list[Document], budget: CallBudget) -> None:
        root = tree.root
        documents, _ = tree.new_documents(documents)
        # The question's own passages are kept unjudged: they were retrieved for the question itself.
        tree.keep(root, documents)
        if documents:
            self._plan(tree, root, documents, budget)

    def _verify(self, tree: ContextTree, node: TreeNode, filters: dict[str, Any] | None, budget: CallBudget,
                parent_span: Span | None) -> OpenStep | None:
        """Open the node's step and verify the node (i); its step, left open, when its query is to be retrieved
        for (the node's later work is done in it)."""
        step = OpenStep.open("tree_node", f"contre_node {node.id}", inputs={"sub_question": node.sub_question},
                             parent=parent_span)
        node.step = step_index(step.span)
        try:
            needed = step.call(self._verify_needed, tree, node, tree.nodes[node.parent or "0"], filters, budget,
                               step.span)
        except BaseException as exc:
            step.close({"node": node.to_dict()}, error=exc)
            raise
        if needed:
            return step
        step.close({"node": node.to_dict()})
        return None

    def _verify_needed(self, tree: ContextTree, node: TreeNode, parent: TreeNode, filters: dict[str, Any] | None,
                       budget: CallBudget, span: Span) -> bool:
        # Verification (i): needed for the parent? then a self-contained query.
        if not budget.take():
            node.status = SKIPPED_BUDGET
            return False
        called, verdict = self._ask(tree, budget, "verify", question=tree.question, parent=parent.sub_question,
                                    sub_question=node.sub_question)
        if not called:
            node.status = SKIPPED_BUDGET
            return False
        needed = verdict.get("needed") if verdict else None
        if needed not in ("Yes", "No"):
            node.needed, node.status = "unreadable", REJECTED_UNREADABLE
            return False
        node.needed = needed.lower()
        if needed == "No":
            node.status = REJECTED_NOT_NEEDED
            return False
        query = _clean_sub_question(verdict.get("query") if verdict else None)
        # A rewrite sharing no word with what it rewrites is an echo of the prompt's instructions (small models
        # copy them): search with the sub-question as planned instead.
        if not _content_words(query) & _content_words(f"{node.sub_question} {parent.sub_question} {tree.question}"):
            query = node.sub_question
        node.query = query
        span.set_content_tag(STEP_INPUT, {"sub_question": node.sub_question, "query": query, "filters": filters})
        return True

    def _judge(self, tree: ContextTree, node: TreeNode, step: OpenStep, documents: list[Document],
               budget: CallBudget) -> None:
        """Verification (ii) of the passages retrieved for the node's query, then its plan; closes its step."""
        step.finish(self._keep_relevant, lambda: {"node": node.to_dict()}, tree, node, documents, budget)

    def _keep_relevant(self, tree: ContextTree, node: TreeNode, documents: list[Document],
                       budget: CallBudget) -> None:
        # Verification (ii): keep what is new and judged relevant to the original question.
        new, known = tree.new_documents(documents)
        node.dropped.extend({"id": doc.id, "reason": "already in the tree"} for doc in known)
        if not new:
            node.status = REJECTED_NO_RELEVANT
            return
        if not budget.take(reserve=1):  # the relevance call now, the node's summary later
            node.status = SKIPPED_BUDGET
            node.dropped.extend({"id": doc.id, "reason": "not judged (LLM call budget)"} for doc in new)
            return
        called, judged = self._ask(tree, budget, "relevance", question=tree.question, query=node.query,
                                   passages=self._passages(new))
        numbers = judged.get("relevant") if judged else None
        chosen = {n for n in numbers if isinstance(n, int) and not isinstance(n, bool)} if isinstance(
            numbers, list) else set()
        kept = [doc for number, doc in enumerate(new, start=1) if number in chosen]
        reason = "judged irrelevant" if called and numbers is not None else (
            "unreadable relevance verdict" if called else "not judged (LLM call budget)")
        node.dropped.extend({"id": doc.id, "reason": reason} for doc in new if doc not in kept)
        if not kept:
            budget.release(1)
            node.status = SKIPPED_BUDGET if not called else REJECTED_NO_RELEVANT
            return
        tree.keep(node, kept)
        node.status = ACCEPTED
        self._plan(tree, node, kept, budget)

    def _plan(self, tree: ContextTree, node: TreeNode, documents: list[Document], budget: CallBudget) -> None:
        """Propose the node's children (not yet verified); none below `max_depth`."""
        if node.depth >= self.max_depth:
            node.plan = "max_depth"
            return
        if not budget.take():
            node.plan = "skipped_budget"
            return
        called, plan = self._ask(tree, budget, "plan", question=tree.question, parent=node.query or node.sub_question,
                                 passages=self._passages(documents), max_sub_questions=self.max_breadth)
        if not called:
            node.plan = "skipped_budget"
            return
        proposed = plan.get("sub_questions") if plan else None
        if not isinstance(proposed, list):
            node.plan = "malformed"
            return
        seen = {_normalised(tree.question), _normalised(node.sub_question)}
        added = 0
        for item in proposed:
            text = _clean_sub_question(item)
            key = _normalised(text)
            if not key or key in seen:
                continue
            seen.add(key)
            tree.add_node(node, text)
            added += 1
            if added >= self.max_breadth:
                break
        node.plan = "ok" if added else "empty"

    # ---- serialization ------------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
            max_depth=self.max_depth,
            max_breadth=self.max_breadth,
            max_llm_calls=self.max_llm_calls,
            concurrency=self.concurrency,
            max_passage_chars=self.max_passage_chars,
            plan_tokens=self.plan_tokens,
            plan_template=self.plan_template,
            verify_template=self.verify_template,
            relevance_template=self.relevance_template,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConTReTreeExpander:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
