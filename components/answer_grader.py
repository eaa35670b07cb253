"""Grades an answer for hallucination (supported by the documents?) and usefulness (answers the question?)."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from docqa.components.llm_serialization import ChatComponentSerialization
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_yes_no


@component
class AnswerGrader(ChatComponentSerialization):
    """
    Two constrained Yes/No judgements, hallucination first: an unsupported answer is not checked for
    usefulness. A verdict the model does not give clearly (`None`) fails the grade, so an unreadable judge
    makes the loop try again rather than accept. An empty answer fails without a model call.

    Usage example:
    ```python
    grader = AnswerGrader(chat_generator=OpenAIChatGenerator(...))
    out = grader.run(question="...", answer="...", documents=docs)
    out["passed"], out["grounded"], out["useful"], out["feedback"]
    ```
    """

    serialized_parameters = ("grounded_template", "useful_template", "max_documents", "max_document_chars")

    def __init__(self, chat_generator: ChatGenerator, grounded_template: str | None = None,
                 useful_template: str | None = None, max_documents: int = 20, max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `grader` role in docqa).
        :param grounded_template: Jinja2 template (`answer`, `documents`, `max_document_chars`).
        :param useful_template: Jinja2 template (`question`, `answer`).
        :param max_documents: Documents shown to the hallucination check.
        :param max_document_chars: Each document is cut to this many characters.
        """
        if max_documents < 1 or max_document_chars < 20:
            raise ValueError("max_documents must be positive and max_document_chars at least 20")
        self.chat_generator = chat_generator
        self.grounded_template = grounded_template or load_prompt("atrag_grade_grounded")
        self.useful_template = useful_template or load_prompt("atrag_grade_useful")
        self.max_documents = max_documents
        self.max_document_chars = max_document_chars

    @component.output_types(passed=bool, grounded=bool | None, useful=bool | None, feedback=str)
    def run(self, question: str, answer: str, documents: list[Document]) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param answer: The answer to grade.
        :param documents: The documents the answer was generated from.
        :returns: `passed`, the two verdicts (None when not asked or unreadable) and `feedback` for a rewrite.
        """
        if not answer.strip():
            return {"passed": False, "grounded": None, "useful": False, "feedback": "the answer was empty"}
        prompt = render_prompt(self.grounded_template, answer=answer, documents=documents[: self.max_documents],
                               max_document_chars=self.max_document_chars)
        grounded = generate_yes_no(self.chat_generator, prompt, purpose="grade_grounded")
        if grounded is not True:
            reason = "the answer is not supported by the documents" if grounded is False else (
                "the grader could not tell whether the answer is supported")
            return {"passed": False, "grounded": grounded, "useful": None, "feedback": reason}
        prompt = render_prompt(self.useful_template, question=question, answer=answer)
        useful = generate_yes_no(self.chat_generator, prompt, purpose="grade_useful")
        if useful is not True:
            reason = "the answer does not address the question" if useful is False else (
                "the grader could not tell whether the answer addresses the question")
            return {"passed": False, "grounded": True, "useful": useful, "feedback": reason}
        return {"passed": True, "grounded": True, "useful": True, "feedback": ""}
