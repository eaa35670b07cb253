"""ReSP's summarizer: one pass over retrieved documents serves the question and the current sub-question."""

from __future__ import annotations

import re
from typing import Any

from haystack import Document, component

from docqa.components.llm_serialization import ChatComponentSerialization
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.resp_memory import GlobalEvidence, PathwayEntry, ReSPMemory
from docqa.llm.calls import ChatGenerator, generate_text
from docqa.recording import run_concurrently

_DONE_MARKER = re.compile(r"\[\s*done\s*\]", re.IGNORECASE)
_LEADING_LABEL = re.compile(r"^\s*(passage|response|summary|answer)\s*:\s*", re.IGNORECASE)
_LEADING_YES = re.compile(r"^\W*yes\b[\s,.:;!-]*", re.IGNORECASE)


@component
class DualFunctionSummarizer(ChatComponentSerialization):
    """
    Writes ReSP's two memories from one iteration's documents.

    Global evidence: a passage supporting the overarching question. Local pathway: whether the documents answer
    the current sub-question, and the answer. The two summaries are independent LLM calls and run concurrently.
    Model output is untrusted: the summary is cut at the `[DONE]` marker and bounded in words; a local answer
    counts only when the reply starts with "Yes" and says something after it.

    Usage example:
    ```python
    summarizer = DualFunctionSummarizer(chat_generator=OpenAIChatGenerator(...))
    out = summarizer.run(question="Where was the director of Jaws born?", documents=docs,
                         sub_question="Who directed Jaws?", iteration=2)
    out["memory"].as_text()
    ```
    """

    serialized_parameters = ("global_template", "local_template", "max_summary_tokens", "max_answer_tokens",
                             "max_summary_words")

    def __init__(
        self,
        chat_generator: ChatGenerator,
        global_template: str | None = None,
        local_template: str | None = None,
        max_summary_tokens: int = 160,
        max_answer_tokens: int = 64,
        max_summary_words: int = 150,
    ) -> None:
        """
        :param chat_generator: Any Haystack chat generator; the "summarizer" role in docqa.
        :param global_template: Jinja2 template with `question` and `documents`; the packaged one by default.
        :param local_template: Jinja2 template with `sub_question`, `documents` and `memory`.
        :param max_summary_tokens: Token cap of a global evidence summary.
        :param max_answer_tokens: Token cap of a sub-question answer.
        :param max_summary_words: Words kept of a summary whatever the model writes.
        """
        for name, value in (("max_summary_tokens", max_summary_tokens), ("max_answer_tokens", max_answer_tokens),
                            ("max_summary_words", max_summary_words)):
            if value < 1:
                raise ValueError(f"{name} must be positive")
        self.chat_generator = chat_generator
        self.global_template = global_template or load_prompt("resp_global_evidence")
        self.local_template = local_template or load_prompt("resp_local_pathway")
        self.max_summary_tokens = max_summary_tokens
        self.max_answer_tokens = max_answer_tokens
        self.max_summary_words = max_summary_words

    def _summarize_global(self, question: str, documents: list[Document], iteration: int) -> GlobalEvidence:
        """
        :param question: The overarching question.
        :param documents: This iteration's documents.
        :param iteration: 1-based iteration number, kept in the memory entry.
        :returns: The evidence entry; its summary is empty when there were no documents (no LLM call then).
        """
        ids = tuple(doc.id for doc in documents)
        if not documents:
            return GlobalEvidence(iteration=iteration, query=question, summary="", document_ids=ids)
        prompt = render_prompt(self.global_template, question=question, documents=documents)
        raw = generate_text(self.chat_generator, prompt, max_tokens=self.max_summary_tokens,
                            purpose="resp_global_evidence")
        return GlobalEvidence(iteration=iteration, query=question, summary=self._clean_summary(raw),
                              document_ids=ids)

    def _answer_sub_question(
        self, sub_question: str, documents: list[Document], memory: ReSPMemory, iteration: int
    ) -> PathwayEntry:
        """
        :param sub_question: The sub-question the documents were retrieved for.
        :param documents: This iteration's documents.
        :param memory: The memories before this iteration (earlier hops often carry the bridge entity).
        :param iteration: 1-based iteration number.
        :returns: The pathway entry; `answered` is False unless the model replied "Yes" with an answer.
        """
        ids = tuple(doc.id for doc in documents)
        if not documents:
            return PathwayEntry(iteration=iteration, sub_question=sub_question, answered=False, document_ids=ids)
        prompt = render_prompt(self.local_template, sub_question=sub_question, documents=documents,
                               memory=memory.as_text())
        raw = generate_text(self.chat_generator, prompt, max_tokens=self.max_answer_tokens,
                            purpose="resp_local_pathway")
        answer = _answer_after_yes(raw)
        return PathwayEntry(iteration=iteration, sub_question=sub_question, answered=bool(answer),
                            answer=answer, document_ids=ids)

    @component.output_types(memory=ReSPMemory, global_evidence=GlobalEvidence, pathway_entry=PathwayEntry | None)
    def run(
        self,
        question: str,
        documents: list[Document],
        memory: ReSPMemory | None = None,
        sub_question: str | None = None,
        iteration: int = 1,
    ) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param documents: This iteration's documents.
        :param memory: The memories so far; empty by default.
        :param sub_question: The current sub-question; None in the first iteration, which retrieves for the
            question itself and so writes global evidence only.
        :param iteration: 1-based iteration number.
        :returns: The updated `memory`, the new `global_evidence` entry and the new `pathway_entry` (or None).
        """
        if iteration < 1:
            raise ValueError("iteration is 1-based")
        memory = memory or ReSPMemory()
        if sub_question is None:
            evidence = self._summarize_global(question, documents, iteration)
            return {"memory": memory.with_evidence(evidence), "global_evidence": evidence, "pathway_entry": None}
        # Concurrency lives here rather than in two graph branches: both calls need the same inputs and rejoin at
        # once, and a branch-and-join inside ReSP's loop would need `Pipeline.run_async` (an event loop per
        # question in sync callers) plus a join whose optional input waits on Haystack's deferred scheduling.
        evidence, entry = run_concurrently(
            lambda: self._summarize_global(question, documents, iteration),
            lambda: self._answer_sub_question(sub_question, documents, memory, iteration),
        )
        updated = memory.with_evidence(evidence).with_pathway(entry)
        return {"memory": updated, "global_evidence": evidence, "pathway_entry": entry}

    def _clean_summary(self, raw: str) -> str:
        text = _DONE_MARKER.split(raw, maxsplit=1)[0]
        text = _LEADING_LABEL.sub("", text.strip())
        words = text.split()
        return " ".join(words[: self.max_summary_words])


def _answer_after_yes(raw: str) -> str:
    """The answer following a leading "Yes"; '' for "No", for unreadable replies and for a bare "Yes"."""
    text = raw.strip()
    if not _LEADING_YES.match(text):
        return ""
    answer = _LEADING_YES.sub("", text, count=1)
    return " ".join(answer.split()[:60])
