"""Chain-of-thought answering over retrieved documents: reasoning first, then the answer, read defensively."""

from __future__ import annotations

import re
from typing import Any

from haystack import Document, component

from docqa.components.llm_serialization import ChatComponentSerialization
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_text, strip_prompt_echo

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
class CoTAnswerGenerator(ChatComponentSerialization):
    """
    Answers from at most `max_documents` numbered documents with step-by-step reasoning before the answer.
    The reasoning is returned separately for the trace; `cited_documents` are the documents referenced as
    `[n]` (all prompt documents when the model cites none, since the answer was generated from them).

    Usage example:
    ```python
    generator = CoTAnswerGenerator(chat_generator=OpenAIChatGenerator(...))
    out = generator.run(question="When was the last visit?", documents=docs)
    out["reasoning"], out["answer"], out["cited_documents"]
    ```
    """

    serialized_parameters = ("prompt_template", "max_tokens", "max_documents", "max_document_chars")

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None, max_tokens: int = 384,
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
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("atrag_answer")
        self.max_tokens = max_tokens
        self.max_documents = max_documents
        self.max_document_chars = max_document_chars

    @component.output_types(answer=str, reasoning=str, cited_documents=list[Document],
                            prompt_documents=list[Document])
    def run(self, question: str, documents: list[Document]) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param documents: Retrieved documents, best first.
        :returns: `answer`, `reasoning`, `cited_documents` and the `prompt_documents` actually shown.
        """
        shown = documents[: self.max_documents]
        if not shown:
            # Nothing to answer from: the model is not asked (the grounding check says no passage matched).
            return {"answer": "", "reasoning": "", "cited_documents": [], "prompt_documents": []}
        prompt = render_prompt(self.prompt_template, question=question, documents=shown,
                               max_document_chars=self.max_document_chars)
        text = generate_text(self.chat_generator, prompt, max_tokens=self.max_tokens, purpose="cot_answer")
        reasoning, answer = split_reasoning(text)
        answer = strip_prompt_echo(answer, prompt)
        cited = []
        for match in _REFERENCE.finditer(f"{reasoning} {answer}"):
            number = int(match.group(1))
            if 1 <= number <= len(shown) and shown[number - 1] not in cited:
                cited.append(shown[number - 1])
        return {"answer": answer, "reasoning": reasoning, "cited_documents": cited or list(shown),
                "prompt_documents": shown}
