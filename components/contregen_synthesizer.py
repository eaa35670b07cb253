"""ConTReGen's bottom-up half: leaves summarise their passages, parents merge, the root writes the answer."""

from __future__ import annotations

import copy
import re
from functools import partial
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.context_tree import STOP_LLM_BUDGET, ContextTree, TreeNode
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_text, strip_prompt_echo
from docqa.recording import run_concurrently
from docqa.run_control import LLMBudgetExceededError
from docqa.spans import STEP_OUTPUT, step_span

_REFERENCE = re.compile(r"\[(\d{1,4})\]")
_LEADING_LABEL = re.compile(r"^\s*(summary|answer|findings)\s*:\s*", re.IGNORECASE)
_WORD = re.compile(r"[a-z0-9]{4,}")
# A paragraph the model left uncited is attributed to the passage it shares most words with, from this many on.
MIN_SHARED_WORDS = 4
EXTRACTIVE_WORDS = 40


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


@component
class ConTReGenSynthesizer:
    """
    Writes the long-form answer from a context tree, bottom-up.

    Deepest level first (nodes of one level concurrently, at most `concurrency` at once): a leaf summarises its
    passages for its sub-question; a parent merges its accepted children's summaries with its own passages;
    the root writes the final answer in paragraphs. Passages carry their tree-wide number `[n]` in every
    prompt, so citations survive the merges. Each paragraph of the answer cites the passages it used: the
    model's `[n]` markers where it wrote valid ones, else the passage sharing the most words with the paragraph
    (recorded as `"overlap"`). When the LLM call budget refuses a summary, the node falls back to an extractive
    summary (the start of each passage, cited) and the stop reason becomes `llm_budget`. Each summary is a span
    (`docqa.summary`, so a step of the trace) under this component's span, its model call a span under it; the
    synthesised tree is an output.

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

    @component.output_types(answer=str, cited_documents=list[Document], stop_reason=str, tree=ContextTree,
                            paragraphs=list[dict], documents=list[Document])
    def run(self, question: str, tree: ContextTree) -> dict[str, Any]:
        """
        :param question: The question (the tree's root).
        :param tree: The expanded context tree; it is copied, not changed.
        :returns: `answer`, `cited_documents` (in order of first citation), `stop_reason` (the expansion's, or
            `llm_budget` when synthesis itself ran out), the summarised `tree`, per-paragraph `paragraphs` and
            `documents`, every passage of the tree in the `[n]` numbering of the prompts.
        """
        tree = copy.deepcopy(tree)
        nodes = [node for node in tree.accepted_nodes() if node.parent is not None]
        for depth in sorted({node.depth for node in nodes}, reverse=True):
            level = [node for node in nodes if node.depth == depth]
            run_concurrently(*[partial(self._summarize, tree, node) for node in level],
                             max_workers=self.concurrency)
        if any(node.summary_mode == "extractive" for node in nodes):
            tree.stop_reason = STOP_LLM_BUDGET
        answer, paragraphs = self._answer(question, tree)
        cited_ids: list[str] = []
        for paragraph in paragraphs:
            for number in paragraph["citations"]:
                doc_id = list(tree.documents)[number - 1]
                if doc_id not in cited_ids:
                    cited_ids.append(doc_id)
        return {"answer": answer, "cited_documents": [tree.documents[i] for i in cited_ids],
                "stop_reason": tree.stop_reason, "tree": tree, "paragraphs": paragraphs,
                "documents": list(tree.documents.values())}

    # ---- prompts ------------------------------------------------------------------------------------------

    def _context(self, tree: ContextTree, node: TreeNode) -> dict[str, Any]:
        passages = [{"number": number, "text": " ".join((doc.content or "").split())[: self.max_passage_chars]}
                    for number, doc in tree.numbered(node.passage_ids)]
        children = [{"sub_question": child.query or child.sub_question, "summary": child.summary}
                    for child in tree.accepted_children(node) if child.summary]
        return {"passages": passages, "children": children}

    def _extractive(self, tree: ContextTree, node: TreeNode) -> str:
        parts = [" ".join((doc.content or "").split()[:EXTRACTIVE_WORDS]) + f" [{number}]"
                 for number, doc in tree.numbered(node.passage_ids)]
        parts += [child.summary for child in tree.accepted_children(node) if child.summary]
        return " ".join(parts)

    def _summarize(self, tree: ContextTree, node: TreeNode) -> None:
        context = self._context(tree, node)
        with step_span("summary", f"contregen_summary {node.id}",
                       inputs={"node": node.id, "sub_question": node.query or node.sub_question,
                               "children": [c["sub_question"] for c in context["children"]]}) as span:
            prompt = render_prompt(self.summary_template, question=node.query or node.sub_question, **context)
            try:
                raw = generate_text(self.chat_generator, prompt, max_tokens=self.summary_tokens,
                                    purpose=f"contregen_summary[{node.id}]")
                node.summary = _LEADING_LABEL.sub("", strip_prompt_echo(raw, prompt)).strip()
                node.summary_mode = "llm"
            except LLMBudgetExceededError:
                node.summary, node.summary_mode = self._extractive(tree, node), "extractive"
            if not node.summary:
                node.summary, node.summary_mode = self._extractive(tree, node), "extractive_empty_reply"
            span.set_content_tag(STEP_OUTPUT, {"node": node.id, "summary": node.summary, "mode": node.summary_mode})

    def _answer(self, question: str, tree: ContextTree) -> tuple[str, list[dict[str, Any]]]:
        if "0" not in tree.nodes or not tree.documents:
            return "", []
        root = tree.root
        context = self._context(tree, root)
        prompt = render_prompt(self.answer_template, question=question, **context)
        try:
            raw = generate_text(self.chat_generator, prompt, max_tokens=self.answer_tokens, purpose="contregen_answer")
            text = _LEADING_LABEL.sub("", strip_prompt_echo(raw, prompt)).strip()
            root.summary_mode = "llm"
        except LLMBudgetExceededError:
            text, root.summary_mode = "", "extractive"
            tree.stop_reason = STOP_LLM_BUDGET
        if not text:
            # No answer from the model: the gathered findings, cited, rather than nothing.
            text = "\n\n".join(c["summary"] for c in context["children"]) or self._extractive(tree, root)
            root.summary_mode = root.summary_mode if root.summary_mode == "extractive" else "extractive_empty_reply"
        root.summary = text
        return self._cite_paragraphs(text, tree)

    def _cite_paragraphs(self, text: str, tree: ContextTree) -> tuple[str, list[dict[str, Any]]]:
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
