"""Chain-of-thought answering over retrieved documents: reasoning first, then the answer, read defensively."""

import re
from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import prompt_text, reply_text
from docqa.llm.calls import strip_prompt_echo

_ANSWER_MARK = re.compile(r"^\s*\**\s*(?:final\s+)?answer\s*\**\s*:\s*", re.IGNORECASE | re.MULTILINE)
_REFERENCE = re.compile(r"\[(\d{1,3})\]")


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, answer) from `...Answer: ...`; without the marker the whole text is the answer."""
    marks = list(_ANSWER_MARK.finditer(text))
    if not marks:
        return "", text.strip()
    last = marks[-1]
    reasoning = text[: last.start()].strip()
    reasoning = re.sub(r"^\s*reasoning\s*:\s*", "", reasoning, flags=re.IGNORECASE)
    return reasoning, text[last.end():].strip()


@component
class ReasonedAnswerParser:
    """
    Reads a `Reasoning: ... Answer: ...` reply: the reasoning for the trace, the answer without prompt echoes, and
    the documents referenced as `[n]` in either (all of them when none is referenced, since the answer was
    generated from them).

    Usage example:
    ```python
    ReasonedAnswerParser().run(replies=[ChatMessage.from_assistant("[1] says so.\\nAnswer: flu")], prompt=prompt,
                               documents=docs)["answer"]   # "flu"
    ```
    """

    @component.output_types(answer=str, reasoning=str, cited_documents=list[Document])
    def run(self, replies: list[ChatMessage], prompt: list[ChatMessage], documents: list[Document]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param prompt: the messages the reply answers.
        :param documents: the documents as numbered in the prompt.
        :returns: `answer`, `reasoning` and `cited_documents`.
        """
        reasoning, answer = split_reasoning(reply_text(replies).strip())
        answer = strip_prompt_echo(answer, prompt_text(prompt))
        cited: list[Document] = []
        for match in _REFERENCE.finditer(f"{reasoning} {answer}"):
            number = int(match.group(1))
            if 1 <= number <= len(documents) and documents[number - 1] not in cited:
                cited.append(documents[number - 1])
        return {"answer": answer, "reasoning": reasoning, "cited_documents": cited or list(documents)}


@component
class CoTAnswerGenerator(PromptedLLM):
    """
    Answers from at most `max_documents` numbered documents with step-by-step reasoning before the answer: a
    `ChatPromptBuilder` -> one text call -> `ReasonedAnswerParser` step. The reasoning is returned separately for
    the trace; `prompt_documents` are the documents the prompt showed.

    Usage example:
    ```python
    generator = CoTAnswerGenerator(chat_generator=OpenAIChatGenerator(...))
    out = generator.run(question="When was the last visit?", documents=docs)
    out["reasoning"], out["answer"], out["cited_documents"]
    ```
    """

    def __init__(self, chat_generator: Any, prompt_template: str | None = None, max_tokens: int = 384,
                 max_documents: int = 20, max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator.
        :param prompt_template: Jinja2 template (`question`, `documents`, `max_document_chars`).
        :param max_tokens: Bound on reasoning plus answer.
        :param max_documents: Documents beyond this are not shown to the model (context windows are finite).
        :param max_document_chars: Each document is cut to this many characters in the prompt.
        """
        if max_tokens < 1 or max_documents < 1 or max_document_chars < 20:
            raise ValueError("max_tokens and max_documents must be positive, max_document_chars at least 20")
        template = prompt_template or load_prompt("atrag_answer")
        self.max_documents = max_documents
        self.max_document_chars = max_document_chars
        PromptedLLM.__init__(
            self, chat_generator, template, ReasonedAnswerParser(),
            variables=["question", "documents", "max_document_chars"], required_variables=["question", "documents"],
            outputs={"answer": "answer", "reasoning": "reasoning", "cited_documents": "cited_documents"},
            max_tokens=max_tokens, purpose="cot_answer", llm_kind="generation",
            init_parameters={"prompt_template": template, "max_tokens": max_tokens, "max_documents": max_documents,
                             "max_document_chars": max_document_chars},
        )
        component.set_output_types(self, answer=str, reasoning=str, cited_documents=list[Document],
                                   prompt_documents=list[Document])

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param documents: Retrieved documents, best first.
        :returns: `answer`, `reasoning`, `cited_documents` and the `prompt_documents` actually shown.
        """
        shown = list(kwargs.get("documents") or [])[: self.max_documents]
        if not shown:
            # Nothing to answer from: the model is not asked (the grounding check says no passage matched).
            return {"answer": "", "reasoning": "", "cited_documents": [], "prompt_documents": []}
        out = PromptedLLM.run(self, question=kwargs["question"], documents=shown,
                              max_document_chars=self.max_document_chars)
        return {**out, "prompt_documents": shown}
