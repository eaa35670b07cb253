"""AT-RAG's grade of an answer: supported by the documents (hallucination)? Answers the question (usefulness)?

Two prompted Yes/No steps (`ChatPromptBuilder` -> constrained call -> `GradeVerdictParser`) in one graph, so each
judgement, its prompt and its model call are steps and spans of their own:

    grade_grounded --grounded--> grade_router --question, answer--> grade_useful --useful--> grade_verdict
    grade_grounded --grounded-------------------------------------------------------------> grade_verdict

`grade_router` asks about usefulness only when the answer was judged grounded; `grade_verdict` turns the two
verdicts into the grade and the feedback for a rewrite.
"""

from typing import Any

from haystack import Document, Pipeline, component, default_from_dict, default_to_dict
from haystack.components.routers import ConditionalRouter
from haystack.core.serialization import component_to_dict
from haystack.core.super_component import SuperComponent
from haystack.dataclasses import ChatMessage
from haystack.utils import deserialize_chatgenerator_inplace

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import reply_text
from docqa.llm.calls import parse_yes_no

GRADE_KIND = "grading"
CHECK_KIND = "grade_check"
VERDICT_KIND = "grade_verdict"
# Usefulness is asked only of a grounded answer. An unsupported or unreadable one takes the second route, which
# nothing listens to (a router needs a route for every input): the verdict has the grounded verdict already.
GRADE_ROUTES = [
    {"condition": "{{ grounded is true }}", "output": ["question", "answer"], "output_name": ["question", "answer"],
     "output_type": [str, str], "output_passthrough": True},
    {"condition": "{{ grounded is not true }}", "output": "grounded", "output_name": "ungrounded",
     "output_type": bool | None, "output_passthrough": True},
]


@component
class GradeVerdictParser:
    """
    Reads a grade's Yes/No: True, False, or None when the model did not say clearly (which fails the grade).

    Usage example:
    ```python
    GradeVerdictParser().run(replies=[ChatMessage.from_assistant('{"answer": "No"}')])  # {"verdict": False}
    ```
    """

    @component.output_types(verdict=bool | None)
    def run(self, replies: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :returns: `verdict`: True, False or None (unreadable).
        """
        return {"verdict": parse_yes_no(reply_text(replies))}


@component
class GradeVerdict:
    """
    The grade from the two judgements: passed only when grounded and useful, with the reason of a failure.

    Usage example:
    ```python
    GradeVerdict().run(grounded=False)["feedback"]  # "the answer is not supported by the documents"
    ```
    """

    step_kind = VERDICT_KIND

    @component.output_types(passed=bool, grounded=bool | None, useful=bool | None, feedback=str)
    def run(self, grounded: bool | None, useful: bool | None = None) -> dict[str, Any]:
        """
        :param grounded: The hallucination verdict (None when unreadable).
        :param useful: The usefulness verdict; None when not asked (the answer was not grounded) or unreadable.
        :returns: `passed`, the two verdicts and `feedback` for a rewrite ('' when passed).
        """
        if grounded is not True:
            reason = "the answer is not supported by the documents" if grounded is False else (
                "the grader could not tell whether the answer is supported")
            return {"passed": False, "grounded": grounded, "useful": None, "feedback": reason}
        if useful is not True:
            reason = "the answer does not address the question" if useful is False else (
                "the grader could not tell whether the answer addresses the question")
            return {"passed": False, "grounded": True, "useful": useful, "feedback": reason}
        return {"passed": True, "grounded": True, "useful": True, "feedback": ""}


@component
class AnswerGrader(SuperComponent):
    """
    Two constrained Yes/No judgements, hallucination first: an unsupported answer is not checked for
    usefulness. A verdict the model does not give clearly fails the grade, so an unreadable judge makes the loop
    try again rather than accept. An empty answer fails without a model call.

    Usage example:
    ```python
    grader = AnswerGrader(chat_generator=OpenAIChatGenerator(...))
    out = grader.run(question="...", answer="...", documents=docs)
    out["passed"], out["grounded"], out["useful"], out["feedback"]
    ```
    """

    step_kind = GRADE_KIND

    def __init__(self, chat_generator: Any, grounded_template: str | None = None,
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
        grounded = PromptedLLM(
            chat_generator, self.grounded_template, GradeVerdictParser(),
            variables=["answer", "documents", "max_document_chars"], required_variables=["answer", "documents"],
            outputs={"verdict": "grounded"}, output="yes_no", purpose="grade_grounded",
        )
        useful = PromptedLLM(
            chat_generator, self.useful_template, GradeVerdictParser(), variables=["question", "answer"],
            outputs={"verdict": "useful"}, output="yes_no", purpose="grade_useful",
        )
        pipeline = Pipeline()
        pipeline.add_component("grade_grounded", grounded)
        pipeline.add_component("grade_router", ConditionalRouter(GRADE_ROUTES))
        pipeline.add_component("grade_useful", useful)
        pipeline.add_component("grade_verdict", GradeVerdict())
        for sender, receiver in (
            ("grade_grounded.grounded", "grade_router.grounded"),
            ("grade_grounded.grounded", "grade_verdict.grounded"),
            ("grade_router.question", "grade_useful.question"),
            ("grade_router.answer", "grade_useful.answer"),
            ("grade_useful.useful", "grade_verdict.useful"),
        ):
            pipeline.connect(sender, receiver)
        self.step_kinds = {"grade_grounded": CHECK_KIND, **grounded.step_kinds, "grade_router": "routing",
                           "grade_useful": CHECK_KIND, **useful.step_kinds, "grade_verdict": VERDICT_KIND}
        SuperComponent.__init__(
            self,
            pipeline,
            input_mapping={
                "question": ["grade_router.question"],
                "answer": ["grade_grounded.answer", "grade_router.answer"],
                "documents": ["grade_grounded.documents"],
                "max_document_chars": ["grade_grounded.max_document_chars"],
            },
            output_mapping={f"grade_verdict.{name}": name for name in ("passed", "grounded", "useful", "feedback")},
        )

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param question: The user's question.
        :param answer: The answer to grade.
        :param documents: The documents the answer was generated from.
        :returns: `passed`, the two verdicts (None when not asked or unreadable) and `feedback` for a rewrite.
        """
        answer = kwargs["answer"]
        if not answer.strip():
            return {"passed": False, "grounded": None, "useful": False, "feedback": "the answer was empty"}
        documents: list[Document] = list(kwargs["documents"])[: self.max_documents]
        return SuperComponent.run(self, question=kwargs["question"], answer=answer, documents=documents,
                                  max_document_chars=self.max_document_chars)

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, chat_generator=component_to_dict(self.chat_generator, "chat_generator"),
                               grounded_template=self.grounded_template, useful_template=self.useful_template,
                               max_documents=self.max_documents, max_document_chars=self.max_document_chars)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "AnswerGrader":
        deserialize_chatgenerator_inplace(data["init_parameters"], key="chat_generator")
        return default_from_dict(cls, data)
