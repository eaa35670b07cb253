"""Answer a question from numbered documents and resolve the `[n]` references the model writes."""

from __future__ import annotations

import re
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.serialization import component_to_dict
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_reply, strip_prompt_echo

_REFERENCE = re.compile(r"\[(\d{1,3})\]")


@component
class CitedAnswerGenerator:
    """
    Generates an answer grounded in the given documents and returns the documents it cited.

    The prompt numbers the documents `[1]..[n]`; references the model writes are mapped back to documents.
    When the model cites nothing, the documents it was given are returned with `citation_mode="context"`,
    because the answer was generated from exactly those (small models rarely write references).

    Usage example:
    ```python
    generator = CitedAnswerGenerator(chat_generator=OpenAIChatGenerator(...))
    out = generator.run(question="Who wrote Hamlet?", documents=[Document(content="Hamlet is by Shakespeare.")])
    out["answer"], out["cited_documents"]
    ```
    """

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None,
                 max_tokens: int = 256) -> None:
        """
        :param chat_generator: Any Haystack chat generator (OpenAI-compatible in production).
        :param prompt_template: Jinja2 template with `question` and `documents`; the packaged one by default.
        :param max_tokens: Upper bound on the answer length in tokens.
        """
        if max_tokens < 1:
            raise ValueError("max_tokens must be positive")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("standard_answer")
        self.max_tokens = max_tokens

    @component.output_types(answer=str, cited_documents=list[Document], citation_mode=str, finish_reason=str | None)
    def run(self, question: str, documents: list[Document]) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param documents: Context documents, in the order they are numbered in the prompt.
        :returns: `answer` (empty when the model only repeated the prompt, or was not asked because there is no
            document), `cited_documents`, `citation_mode` ("explicit", "context" or "none") and the model's
            `finish_reason` ("length" when the token limit cut the reply).
        """
        if not documents:
            # Nothing to answer from: the model is not asked (the grounding check says no passage matched).
            return {"answer": "", "cited_documents": [], "citation_mode": "none", "finish_reason": None}
        prompt = render_prompt(self.prompt_template, question=question, documents=documents)
        raw, finish_reason = generate_reply(self.chat_generator, prompt, max_tokens=self.max_tokens,
                                            purpose="answer")
        answer = strip_prompt_echo(raw, prompt)
        cited = _referenced(answer, documents)
        if cited:
            mode = "explicit"
        elif documents and answer:
            cited, mode = list(documents), "context"
        else:
            mode = "none"
        return {"answer": answer, "cited_documents": cited, "citation_mode": mode, "finish_reason": finish_reason}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(
            self,
            chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
            prompt_template=self.prompt_template,
            max_tokens=self.max_tokens,
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CitedAnswerGenerator:
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)


def _referenced(answer: str, documents: list[Document]) -> list[Document]:
    seen: list[Document] = []
    for match in _REFERENCE.finditer(answer):
        number = int(match.group(1))
        if 1 <= number <= len(documents) and documents[number - 1] not in seen:
            seen.append(documents[number - 1])
    return seen
