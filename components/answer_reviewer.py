"""MSPR's corrective answer review (CAR): is the answer effective, complete and correct given the context?"""

from typing import Any

from haystack import component
from haystack.dataclasses import ChatMessage

from docqa.components.mspr_state import MSPRState, Phase
from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import reply_text, verdict_word
from docqa.llm.calls import parse_yes_no


def _reviewed(state: MSPRState, answer: str, verdict: bool | None, *, asked: bool) -> dict[str, Any]:
    """The state with the review written to it, and the review for the trace."""
    passed = verdict is True
    reason = "" if passed else ("the answer was empty" if not asked else (
        "the answer is not supported or incomplete" if verdict is False else "the review was unreadable"))
    review = {"passed": passed, "model_verdict": verdict_word(verdict) if asked else None, "reason": reason,
              "answer": answer}
    new_state = state.evolve(phase=Phase.REVIEWED, reviews=state.reviews + 1, review_passed=passed,
                             review_reason=reason)
    return {"state": new_state, "review": review}


@component
class ReviewRequest:
    """
    What the review prompt shows, read from the state: the question, the answer and the gathered context.

    Usage example:
    ```python
    ReviewRequest(max_document_chars=600).run(state=state)["context"]
    ```
    """

    def __init__(self, max_document_chars: int = 600) -> None:
        """:param max_document_chars: Each passage of the context is cut to this many characters."""
        self.max_document_chars = max_document_chars

    @component.output_types(question=str, answer=str, context=str, state=MSPRState)
    def run(self, state: MSPRState) -> dict[str, Any]:
        """
        :param state: The run so far, with its `answer`.
        :returns: the prompt's `question`, `answer` and `context`, and the `state` for the verdict.
        """
        return {"question": state.question, "answer": (state.answer or "").strip(),
                "context": state.context(self.max_document_chars) or "(nothing was retrieved)", "state": state}


@component
class ReviewVerdictParser:
    """
    Reads the review's Yes/No and writes it to the state; an unreadable verdict fails the review.

    Usage example:
    ```python
    ReviewVerdictParser().run(replies=[ChatMessage.from_assistant("No")], state=state, answer="1962")["review"]
    ```
    """

    @component.output_types(state=MSPRState, review=dict)
    def run(self, replies: list[ChatMessage], state: MSPRState, answer: str) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param state: The run so far.
        :param answer: The reviewed answer.
        :returns: `state` with the verdict (`Phase.REVIEWED`, `reviews` + 1) and the `review` for the trace.
        """
        return _reviewed(state, answer, parse_yes_no(reply_text(replies)), asked=True)


@component
class AnswerReviewer(PromptedLLM):
    """
    Reviews the state's answer against the gathered context with one constrained Yes/No: a `ReviewRequest` ->
    `ChatPromptBuilder` -> constrained call -> `ReviewVerdictParser` step. An empty answer fails without a call;
    an unreadable verdict fails too (the review then buys one more retrieval, which the controller bounds by SRT).
    The verdict is written to the state (`review_passed`, `review_reason`).

    Usage example:
    ```python
    reviewer = AnswerReviewer(chat_generator=OpenAIChatGenerator(...))
    out = reviewer.run(state=state.evolve(answer="1962"))
    out["review"]["passed"]
    ```
    """

    step_kind = "grading"

    def __init__(self, chat_generator: Any, prompt_template: str | None = None,
                 max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `grader` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `context`, `answer`); packaged `mspr_review` by default.
        :param max_document_chars: Each passage of the context is cut to this many characters.
        """
        if max_document_chars < 20:
            raise ValueError("max_document_chars must be at least 20")
        template = prompt_template or load_prompt("mspr_review")
        self.max_document_chars = max_document_chars
        PromptedLLM.__init__(
            self, chat_generator, template, ReviewVerdictParser(), variables=["question", "answer", "context"],
            outputs={"state": "state", "review": "review"}, output="yes_no", purpose="mspr_review",
            request=ReviewRequest(max_document_chars),
            init_parameters={"prompt_template": template, "max_document_chars": max_document_chars},
        )

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param state: The run so far, with its `answer`.
        :returns: `state` with the verdict (`Phase.REVIEWED`, `reviews` + 1) and the `review` for the trace.
        """
        state = kwargs["state"]
        if not (state.answer or "").strip():
            return _reviewed(state, "", None, asked=False)
        return PromptedLLM.run(self, state=state)
