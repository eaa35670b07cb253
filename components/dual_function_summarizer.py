"""ReSP's summarizer: one pass over retrieved documents serves the question and the current sub-question.

Two prompted LLM steps (`ChatPromptBuilder` -> model call -> typed parser) in one graph, so each summary, its
prompt and its model call are steps and spans of their own:

    summary_request --question, documents--------------> resp_global_evidence --summary--> memory_update
    summary_request --sub_question, documents, memory---> resp_local_pathway --answer-----> memory_update
    summary_request --document_ids-----------------------------------------------------------> memory_update

`summary_request` sends the global evidence step its inputs whenever there are documents, and the local pathway
step its inputs when there is a sub-question too; a step it sends nothing does not run (no model call).
`memory_update` writes the iteration's entries to the memories. When both summaries are asked, the graph runs on
Haystack's async scheduler, so the two independent model calls run at once (each step in a worker thread, in a copy
of the caller's context, so its steps and calls stay in the caller's run); otherwise it runs as any graph does.
"""

import asyncio
import contextvars
import re
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.core.super_component import SuperComponent
from haystack.core.super_component.utils import _delegate_default
from haystack.dataclasses import ChatMessage
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PROMPT_KIND, PromptedLLM
from docqa.components.reply_parsers import reply_text
from docqa.components.resp_memory import GlobalEvidence, PathwayEntry, ReSPMemory

_DONE_MARKER = re.compile(r"\[\s*done\s*\]", re.IGNORECASE)
_LEADING_LABEL = re.compile(r"^\s*(passage|response|summary|answer)\s*:\s*", re.IGNORECASE)
_LEADING_YES = re.compile(r"^\W*yes\b[\s,.:;!-]*", re.IGNORECASE)
MAX_ANSWER_WORDS = 60
MEMORY_KIND = "memory"


@component
class SummaryRequest:
    """
    What the iteration's two summaries are asked: the global evidence whenever there are documents, the local
    pathway when there is a sub-question too. An output left out starts nothing downstream.

    Usage example:
    ```python
    SummaryRequest().run(question="Q?", documents=docs, memory=None, sub_question="S?")["sub_question"]  # "S?"
    ```
    """

    @component.output_types(document_ids=tuple[str, ...], question=str, global_documents=list[Document],
                            sub_question=str, local_documents=list[Document], memory=ReSPMemory)
    def run(self, question: str, documents: list[Document], memory: ReSPMemory | None = None,
            sub_question: str | None = None) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param documents: This iteration's documents.
        :param memory: The memories before this iteration (the local prompt shows them).
        :param sub_question: The current sub-question; None when only global evidence is written.
        :returns: the `document_ids` the memory entries keep; the global step's `question` and `global_documents`,
            and the local step's `sub_question`, `local_documents` and `memory`, each only when that step is to run.
        """
        out: dict[str, Any] = {"document_ids": tuple(doc.id for doc in documents)}
        if not documents:
            return out
        out.update(question=question, global_documents=documents)
        if sub_question is not None:
            out.update(sub_question=sub_question, local_documents=documents, memory=memory or ReSPMemory())
        return out


@component
class EvidenceSummaryParser:
    """
    Reads a global evidence summary: cut at the `[DONE]` marker, without a leading "Passage:"-like label, bounded
    in words whatever the model writes.

    Usage example:
    ```python
    EvidenceSummaryParser(150).run(replies=[ChatMessage.from_assistant("Passage: X. [DONE] Y")])  # {"summary": "X."}
    ```
    """

    def __init__(self, max_summary_words: int = 150) -> None:
        """:param max_summary_words: Words kept of a summary."""
        self.max_summary_words = max_summary_words

    @component.output_types(summary=str)
    def run(self, replies: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :returns: `summary` ('' when the model said nothing usable).
        """
        text = _DONE_MARKER.split(reply_text(replies).strip(), maxsplit=1)[0]
        text = _LEADING_LABEL.sub("", text.strip())
        return {"summary": " ".join(text.split()[: self.max_summary_words])}


@component
class PathwayAnswerParser:
    """
    Reads a sub-question's answer: what follows a leading "Yes"; '' for "No", for an unreadable reply and for a
    bare "Yes" (the answer then does not count).

    Usage example:
    ```python
    PathwayAnswerParser().run(replies=[ChatMessage.from_assistant("Yes, Spielberg.")])  # {"answer": "Spielberg."}
    ```
    """

    @component.output_types(answer=str)
    def run(self, replies: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :returns: `answer`, at most `MAX_ANSWER_WORDS` words ('' when the documents did not answer).
        """
        text = reply_text(replies).strip()
        if not _LEADING_YES.match(text):
            return {"answer": ""}
        return {"answer": " ".join(_LEADING_YES.sub("", text, count=1).split()[:MAX_ANSWER_WORDS])}


@component
class MemoryUpdate:
    """
    Writes one iteration's entries to the memories: the global evidence always (empty without documents), the
    pathway entry when there was a sub-question (answered only with an answer after "Yes").

    Usage example:
    ```python
    out = MemoryUpdate().run(question="Q?", document_ids=("d1",), iteration=1, summary="Spielberg directed Jaws.")
    out["memory"], out["global_evidence"], out["pathway_entry"]  # ..., ..., None
    ```
    """

    step_kind = MEMORY_KIND

    @component.output_types(memory=ReSPMemory, global_evidence=GlobalEvidence, pathway_entry=PathwayEntry | None)
    def run(self, question: str, document_ids: tuple[str, ...], memory: ReSPMemory | None = None,
            sub_question: str | None = None, iteration: int = 1, summary: str | None = None,
            answer: str | None = None) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param document_ids: The ids of this iteration's documents (the documents themselves are not copied here).
        :param memory: The memories so far; empty by default.
        :param sub_question: The current sub-question (None: no pathway entry).
        :param iteration: 1-based iteration number, kept in the entries.
        :param summary: The global evidence summary; None when it was not asked (no documents).
        :param answer: The sub-question's answer; None when it was not asked.
        :returns: The updated `memory`, the new `global_evidence` entry and the new `pathway_entry` (or None).
        """
        ids = tuple(document_ids)
        memory = memory or ReSPMemory()
        evidence = GlobalEvidence(iteration=iteration, query=question, summary=summary or "", document_ids=ids)
        updated = memory.with_evidence(evidence)
        entry = None
        if sub_question is not None:
            entry = PathwayEntry(iteration=iteration, sub_question=sub_question, answered=bool(answer),
                                 answer=answer or "", document_ids=ids)
            updated = updated.with_pathway(entry)
        return {"memory": updated, "global_evidence": evidence, "pathway_entry": entry}


@component
class DualFunctionSummarizer(SuperComponent):
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

    step_kind = "summary"

    def __init__(
        self,
        chat_generator: Any,
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
        global_step = PromptedLLM(
            chat_generator, self.global_template, EvidenceSummaryParser(max_summary_words),
            variables=["question", "documents"], outputs={"summary": "summary"}, max_tokens=max_summary_tokens,
            purpose="resp_global_evidence",
        )
        local_step = PromptedLLM(
            chat_generator, self.local_template, PathwayAnswerParser(),
            variables=["sub_question", "documents", "memory"], outputs={"answer": "answer"},
            max_tokens=max_answer_tokens, purpose="resp_local_pathway",
        )
        pipeline = Pipeline()
        pipeline.add_component("summary_request", SummaryRequest())
        pipeline.add_component("resp_global_evidence", global_step)
        pipeline.add_component("resp_local_pathway", local_step)
        pipeline.add_component("memory_update", MemoryUpdate())
        for sender, receiver in (
            ("summary_request.question", "resp_global_evidence.question"),
            ("summary_request.global_documents", "resp_global_evidence.documents"),
            ("summary_request.sub_question", "resp_local_pathway.sub_question"),
            ("summary_request.local_documents", "resp_local_pathway.documents"),
            ("summary_request.memory", "resp_local_pathway.memory"),
            ("summary_request.document_ids", "memory_update.document_ids"),
            ("resp_global_evidence.summary", "memory_update.summary"),
            ("resp_local_pathway.answer", "memory_update.answer"),
        ):
            pipeline.connect(sender, receiver)
        self.step_kinds = {"summary_request": PROMPT_KIND, "resp_global_evidence": "global_evidence",
                           **global_step.step_kinds, "resp_local_pathway": "local_pathway", **local_step.step_kinds,
                           "memory_update": MEMORY_KIND}
        SuperComponent.__init__(
            self,
            pipeline,
            input_mapping={
                "question": ["summary_request.question", "memory_update.question"],
                "documents": ["summary_request.documents"],
                "memory": ["summary_request.memory", "memory_update.memory"],
                "sub_question": ["summary_request.sub_question", "memory_update.sub_question"],
                "iteration": ["memory_update.iteration"],
            },
            output_mapping={f"memory_update.{name}": name for name in ("memory", "global_evidence", "pathway_entry")},
        )

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param question: The overarching question.
        :param documents: This iteration's documents.
        :param memory: The memories so far; empty by default.
        :param sub_question: The current sub-question; None in the first iteration, which retrieves for the
            question itself and so writes global evidence only.
        :param iteration: 1-based iteration number.
        :returns: The updated `memory`, the new `global_evidence` entry and the new `pathway_entry` (or None).
        """
        # An input the graph did not feed arrives as the SuperComponent's "use the inner default" marker.
        given = {name: value for name, value in kwargs.items() if value is not _delegate_default}
        iteration = given.get("iteration", 1)
        if not isinstance(iteration, int) or iteration < 1:
            raise ValueError("iteration is 1-based")
        inputs = {"question": given["question"], "documents": list(given["documents"]), "iteration": iteration,
                  "memory": given.get("memory"), "sub_question": given.get("sub_question")}
        if inputs["sub_question"] is None or not inputs["documents"]:
            return SuperComponent.run(self, **inputs)  # one summary at most: the graph runs as any other
        # Both summaries: the same graph on Haystack's async scheduler, which runs the two independent steps at once.
        data = self._map_explicit_inputs(input_mapping=self.input_mapping, inputs=inputs)
        outputs = _run_to_completion(self.pipeline.run_async(
            data, include_outputs_from=self._get_include_outputs_from(), concurrency_limit=2))
        return self._map_explicit_outputs(outputs, self.output_mapping)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
                               global_template=self.global_template, local_template=self.local_template,
                               max_summary_tokens=self.max_summary_tokens, max_answer_tokens=self.max_answer_tokens,
                               max_summary_words=self.max_summary_words)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "DualFunctionSummarizer":
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)


def _run_to_completion(coroutine: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    """The coroutine's result, run on an event loop of its own (on a helper thread when this thread runs one)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _on_new_loop(coroutine)
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(contextvars.copy_context().run, _on_new_loop, coroutine).result()


def _on_new_loop(coroutine: Coroutine[Any, Any, dict[str, Any]]) -> dict[str, Any]:
    # What `asyncio.run` does, minus its debug and signal handling: the task runs in a copy of this context, and
    # the worker threads of the steps have finished before the loop closes.
    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(coroutine)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()
