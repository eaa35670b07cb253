"""ConTReGen's bottom-up half: leaves summarise their passages, parents merge, the root writes the answer (a prompted
LLM step in the graph), and each paragraph cites the passages it used."""

from __future__ import annotations

import asyncio
import copy
import re
from functools import partial
from typing import Any

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict
from haystack.core.component.types import _empty
from haystack.core.errors import PipelineRuntimeError
from haystack.core.serialization import component_to_dict
from haystack.core.super_component import SuperComponent
from haystack.dataclasses import ChatMessage
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.context_tree import STOP_LLM_BUDGET, ContextTree, TreeNode
from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM, expose_sockets
from docqa.components.reply_parsers import prompt_text, reply_text
from docqa.llm.calls import ChatGenerator, strip_prompt_echo
from docqa.recording import run_concurrently
from docqa.run_control import budget_error_behind
from docqa.spans import STEP_OUTPUT, step_span

_REFERENCE = re.compile(r"\[(\d{1,4})\]")
SUMMARY_NODE = "node_summary"
SUMMARY_VARIABLES = ("question", "passages", "children")
_LEADING_LABEL = re.compile(r"^\s*(summary|answer|findings)\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]{4,}")
# A paragraph the model left uncited is attributed to the passage it shares most words with, from this many on.
MIN_SHARED_WORDS = 4
EXTRACTIVE_WORDS = 40


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


@component
class NodeSummaryParser:
    """
    Reads a node summary: the reply without lines echoing the prompt and without a leading "Summary:" label.

    Usage example:
    ```python
    NodeSummaryParser().run(replies=replies, prompt=prompt)["summary"]
    ```
    """

    @component.output_types(summary=str)
    def run(self, replies: list[ChatMessage], prompt: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param prompt: the messages the reply answers.
        :returns: the `summary` ('' when the model only repeated the prompt).
        """
        text = strip_prompt_echo(reply_text(replies).strip(), prompt_text(prompt))
        return {"summary": _LEADING_LABEL.sub("", text).strip()}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeSummaryParser:
        return default_from_dict(cls, data)


@component
class NodeSummaries(SuperComponent):
    """
    Writes the summaries of a context tree's nodes below the root, bottom-up: deepest level first (nodes of one
    level concurrently, at most `concurrency` at once); a leaf summarises its passages for its sub-question, a
    parent merges its accepted children's summaries with its own passages. Passages carry their tree-wide number
    `[n]`, so citations survive the merges.

    A `SuperComponent` whose graph is one prompted LLM step, `node_summary` (`contregen_summary_prompt`, a
    `ChatPromptBuilder` with the summary template -> `contregen_summary_llm`, one model call ->
    `contregen_summary_parser`), run once per node inside the node's `docqa.summary` span (a step of the trace).
    When the LLM call budget refuses a summary, the node falls back to an extractive summary (the start of each
    passage, cited) and the stop reason becomes `llm_budget`.

    Usage example:
    ```python
    tree = NodeSummaries(chat_generator=OpenAIChatGenerator(...)).run(tree=expander_output["tree"])["tree"]
    ```
    """

    def __init__(self, chat_generator: ChatGenerator, *, summary_tokens: int = 200, concurrency: int = 4,
                 max_passage_chars: int = 1200, summary_template: str | None = None) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "summarizer" role in docqa.
        :param summary_tokens: Token cap of a node summary.
        :param concurrency: Summaries written at once.
        :param max_passage_chars: Characters of each passage shown in a prompt.
        :param summary_template: Jinja2 template (`question`, `passages`, `children`).
        """
        self.chat_generator = chat_generator
        self.summary_tokens = summary_tokens
        self.concurrency = concurrency
        self.max_passage_chars = max_passage_chars
        self.summary_template = summary_template or load_prompt("contregen_summarize")
        step = PromptedLLM(chat_generator, self.summary_template, NodeSummaryParser(),
                           variables=list(SUMMARY_VARIABLES), outputs={"summary": "summary"},
                           max_tokens=summary_tokens, purpose="contregen_summary")
        pipeline = Pipeline()
        pipeline.add_component(SUMMARY_NODE, step)
        self.step_kinds = {SUMMARY_NODE: "summary_writer", **step.step_kinds}
        SuperComponent.__init__(
            self, pipeline, input_mapping={name: [f"{SUMMARY_NODE}.{name}"] for name in SUMMARY_VARIABLES},
            output_mapping={f"{SUMMARY_NODE}.summary": "summary"})
        # Outside, a tree in and the tree out: the inner step runs once per node, not once per run.
        expose_sockets(self, {"tree": (ContextTree, _empty)}, {"tree": ContextTree})

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param tree: The expanded context tree; it is copied, not changed.
        :returns: the `tree` with every accepted node below the root summarised.
        """
        tree: ContextTree = copy.deepcopy(kwargs["tree"])
        nodes = [node for node in tree.accepted_nodes() if node.parent is not None]
        for depth in sorted({node.depth for node in nodes}, reverse=True):
            level = [node for node in nodes if node.depth == depth]
            run_concurrently(*[partial(self._summarize, tree, node) for node in level],
                             max_workers=self.concurrency)
        if any(node.summary_mode == "extractive" for node in nodes):
            tree.stop_reason = STOP_LLM_BUDGET
        return {"tree": tree}

    async def run_async(self, **kwargs: Any) -> dict[str, Any]:
        """`run` in a worker thread (the summaries of a level already run concurrently there)."""
        return await asyncio.to_thread(partial(self.run, **kwargs))

    def _summarize(self, tree: ContextTree, node: TreeNode) -> None:
        context = tree_context(tree, node, self.max_passage_chars)
        with step_span("summary", f"contregen_summary {node.id}",
                       inputs={"node": node.id, "sub_question": node.query or node.sub_question,
                               "children": [c["sub_question"] for c in context["children"]]}) as span:
            try:
                out = self.pipeline.run({SUMMARY_NODE: {"question": node.query or node.sub_question, **context}})
                node.summary, node.summary_mode = out[SUMMARY_NODE]["summary"], "llm"
            except PipelineRuntimeError as exc:
                if budget_error_behind(exc) is None:
                    raise
                node.summary, node.summary_mode = extractive_summary(tree, node), "extractive"
            if not node.summary:
                node.summary, node.summary_mode = extractive_summary(tree, node), "extractive_empty_reply"
            span.set_content_tag(STEP_OUTPUT, {"node": node.id, "summary": node.summary, "mode": node.summary_mode})

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
                               summary_tokens=self.summary_tokens, concurrency=self.concurrency,
                               max_passage_chars=self.max_passage_chars, summary_template=self.summary_template)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NodeSummaries:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)


@component
class RootAnswerRequest:
    """
    What the root's answer is asked: the question, the root's numbered passages and its children's summaries;
    nothing (no model call) when the tree has no root or no passage.

    Usage example:
    ```python
    RootAnswerRequest().run(question="What happens?", tree=tree)  # {"question": ..., "passages": [...], ...}
    ```
    """

    def __init__(self, max_passage_chars: int = 1200) -> None:
        """:param max_passage_chars: Characters of each passage shown in the prompt."""
        self.max_passage_chars = max_passage_chars

    @component.output_types(question=str, passages=list[dict], children=list[dict])
    def run(self, question: str, tree: ContextTree) -> dict[str, Any]:
        """
        :param question: The question (the tree's root).
        :param tree: The summarised tree.
        :returns: the answer prompt's `question`, `passages` and `children`; nothing without passages.
        """
        if "0" not in tree.nodes or not tree.documents:
            return {}
        return {"question": question, **tree_context(tree, tree.root, self.max_passage_chars)}


@component
class RootAnswerParser:
    """
    Reads the root's answer: without lines echoing the prompt and without a leading "Answer:"-like label.

    Usage example:
    ```python
    RootAnswerParser().run(replies=[ChatMessage.from_assistant("Answer: Retief leads [1].")], prompt=prompt)
    ```
    """

    @component.output_types(text=str)
    def run(self, replies: list[ChatMessage], prompt: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param prompt: the messages the reply answers.
        :returns: `text` ('' when the model only repeated the prompt).
        """
        raw = reply_text(replies).strip()
        return {"text": _LEADING_LABEL.sub("", strip_prompt_echo(raw, prompt_text(prompt))).strip()}


@component
class CitedParagraphs:
    """
    The answer in paragraphs, each citing the passages it used: the model's valid `[n]` markers where it wrote
    them, else the passage sharing the most words with the paragraph (recorded as `"overlap"`). Without a reply
    from the model the root's children's summaries (or the start of its passages) are the answer, cited.

    Usage example:
    ```python
    out = CitedParagraphs().run(tree=tree, text="Retief leads the team [1].")
    out["answer"], out["cited_documents"], out["paragraphs"], out["stop_reason"]
    ```
    """

    step_kind = "synthesis"

    @component.output_types(answer=str, cited_documents=list[Document], stop_reason=str, tree=ContextTree,
                            paragraphs=list[dict], documents=list[Document])
    def run(self, tree: ContextTree, text: str | None = None) -> dict[str, Any]:
        """
        :param tree: The summarised tree; it is copied, not changed.
        :param text: The root's answer as the model wrote it; None when it was not asked (no passages).
        :returns: `answer`, `cited_documents` (in order of first citation), `stop_reason` (the expansion's, or
            `llm_budget` when a summary ran out), the `tree` with the root's answer, per-paragraph `paragraphs`
            and `documents`, every passage of the tree in the `[n]` numbering of the prompts.
        """
        tree = copy.deepcopy(tree)
        answer, paragraphs = "", []
        if "0" in tree.nodes and tree.documents:
            root = tree.root
            root.summary_mode = "llm"
            if not text:
                # No answer from the model: the gathered findings, cited, rather than nothing.
                summaries = [child.summary for child in tree.accepted_children(root) if child.summary]
                text = "\n\n".join(summaries) or extractive_summary(tree, root)
                root.summary_mode = "extractive_empty_reply"
            root.summary = text
            answer, paragraphs = cite_paragraphs(text, tree)
        cited_ids: list[str] = []
        for paragraph in paragraphs:
            for number in paragraph["citations"]:
                doc_id = list(tree.documents)[number - 1]
                if doc_id not in cited_ids:
                    cited_ids.append(doc_id)
        return {"answer": answer, "cited_documents": [tree.documents[i] for i in cited_ids],
                "stop_reason": tree.stop_reason, "tree": tree, "paragraphs": paragraphs,
                "documents": list(tree.documents.values())}


@component
class ConTReGenSynthesizer(SuperComponent):
    """
    Writes the long-form answer from a context tree, bottom-up: `contregen_summaries` (`NodeSummaries`: the
    nodes below the root, deepest level first) -> `contregen_answer` (a prompted LLM step: the root's prompt from
    the question, its passages and its children's summaries, one model call, the reply read) ->
    `contregen_citations` (`CitedParagraphs`: each paragraph cites the passages it used). The answer's prompt is a
    `ChatPromptBuilder` in the graph (its template in the exported YAML); its model call is the strategy's
    generation step.

    Usage example:
    ```python
    synthesizer = ConTReGenSynthesizer(chat_generator=OpenAIChatGenerator(...))
    out = synthesizer.run(question="How does Noork's view of the war change?", tree=expander_output["tree"])
    out["answer"], out["cited_documents"], out["stop_reason"]
    ```
    """

    step_kind = "synthesis"

    def __init__(
        self,
        chat_generator: ChatGenerator,
        *,
        summary_tokens: int = 200,
        answer_tokens: int = 512,
        concurrency: int = 4,
        max_passage_chars: int = 1200,
        summary_template: str | None = None,
        answer_template: str | None = None,
    ) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "summarizer" role in docqa (the root's answer
            uses the same generator).
        :param summary_tokens: Token cap of a node summary.
        :param answer_tokens: Token cap of the final answer.
        :param concurrency: Summaries written at once.
        :param max_passage_chars: Characters of each passage shown in a prompt.
        :param summary_template: Jinja2 template (`question`, `passages`, `children`).
        :param answer_template: Jinja2 template (`question`, `passages`, `children`).
        """
        if summary_tokens < 1 or answer_tokens < 1 or concurrency < 1 or max_passage_chars < 50:
            raise ValueError("summary_tokens, answer_tokens, concurrency and max_passage_chars must be positive")
        self.chat_generator = chat_generator
        self.summary_tokens = summary_tokens
        self.answer_tokens = answer_tokens
        self.concurrency = concurrency
        self.max_passage_chars = max_passage_chars
        self.summary_template = summary_template or load_prompt("contregen_summarize")
        self.answer_template = answer_template or load_prompt("contregen_answer")
        answer_step = PromptedLLM(
            chat_generator, self.answer_template, RootAnswerParser(), variables=["question", "passages", "children"],
            outputs={"text": "text"}, max_tokens=answer_tokens, purpose="contregen_answer",
            llm_kind="generation", request=RootAnswerRequest(max_passage_chars),
        )
        summaries = NodeSummaries(chat_generator, summary_tokens=summary_tokens, concurrency=concurrency,
                                  max_passage_chars=max_passage_chars, summary_template=self.summary_template)
        pipeline = Pipeline()
        pipeline.add_component("contregen_summaries", summaries)
        pipeline.add_component("contregen_answer", answer_step)
        pipeline.add_component("contregen_citations", CitedParagraphs())
        pipeline.connect("contregen_summaries.tree", "contregen_answer.tree")
        pipeline.connect("contregen_summaries.tree", "contregen_citations.tree")
        pipeline.connect("contregen_answer.text", "contregen_citations.text")
        self.step_kinds = {"contregen_summaries": "synthesis", **summaries.step_kinds, "contregen_answer": "generation",
                           **answer_step.step_kinds, "contregen_citations": "synthesis"}
        SuperComponent.__init__(
            self,
            pipeline,
            input_mapping={"question": ["contregen_answer.question"], "tree": ["contregen_summaries.tree"]},
            output_mapping={f"contregen_citations.{name}": name for name in
                            ("answer", "cited_documents", "stop_reason", "tree", "paragraphs", "documents")},
        )

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
            summary_tokens=self.summary_tokens,
            answer_tokens=self.answer_tokens,
            concurrency=self.concurrency,
            max_passage_chars=self.max_passage_chars,
            summary_template=self.summary_template,
            answer_template=self.answer_template,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ConTReGenSynthesizer:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)

def tree_context(tree: ContextTree, node: TreeNode, max_passage_chars: int) -> dict[str, Any]:
    """A node's prompt parts: its passages with their tree-wide numbers, and its accepted children's summaries."""
    passages = [{"number": number, "text": " ".join((doc.content or "").split())[:max_passage_chars]}
                for number, doc in tree.numbered(node.passage_ids)]
    children = [{"sub_question": child.query or child.sub_question, "summary": child.summary}
                for child in tree.accepted_children(node) if child.summary]
    return {"passages": passages, "children": children}


def extractive_summary(tree: ContextTree, node: TreeNode) -> str:
    """The start of each of a node's passages, cited, and its children's summaries: a summary without a model."""
    parts = [" ".join((doc.content or "").split()[:EXTRACTIVE_WORDS]) + f" [{number}]"
             for number, doc in tree.numbered(node.passage_ids)]
    parts += [child.summary for child in tree.accepted_children(node) if child.summary]
    return " ".join(parts)


def cite_paragraphs(text: str, tree: ContextTree) -> tuple[str, list[dict[str, Any]]]:
    """Each paragraph with its citations: the model's valid `[n]`, else the best word-overlap passage."""
    count = len(tree.documents)
    documents = list(tree.documents.values())
    out_paragraphs, report = [], []
    for paragraph in [p.strip() for p in re.split(r"\n\s*\n|\n(?=\S)", text) if p.strip()]:
        numbers = [int(m) for m in _REFERENCE.findall(paragraph) if 1 <= int(m) <= count]
        numbers = list(dict.fromkeys(numbers))
        mode = "model"
        if not numbers:
            words = _words(paragraph)
            shared = [len(words & _words(doc.content or "")) for doc in documents]
            best = max(range(count), key=lambda i: shared[i]) if count else None
            if best is not None and shared[best] >= MIN_SHARED_WORDS:
                numbers, mode = [best + 1], "overlap"
                paragraph = f"{paragraph} [{best + 1}]"
            else:
                mode = "none"
        out_paragraphs.append(paragraph)
        report.append({"citations": numbers, "mode": mode, "chars": len(paragraph)})
    return "\n\n".join(out_paragraphs), report
