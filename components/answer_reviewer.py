"""MSPR's corrective answer review (CAR): is the answer effective, complete and correct given the context?"""

from __future__ import annotations

from typing import Any

from haystack import component

from docqa.components.llm_serialization import ChatComponentSerialization
from docqa.components.mspr_state import MSPRState, Phase
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.reply_parsers import verdict_word
from docqa.llm.calls import ChatGenerator, generate_yes_no


@component
class AnswerReviewer(ChatComponentSerialization):
    """
    Reviews the state's answer against the gathered context with one constrained Yes/No. An empty answer
    fails without a call; an unreadable verdict fails too (the review then buys one more retrieval, which the
    controller bounds by SRT). The verdict is written to the state (`review_passed`, `review_reason`).

    Usage example:
    ```python
    reviewer = AnswerReviewer(chat_generator=OpenAIChatGenerator(...))
    out = reviewer.run(state=state.evolve(answer="1962"))
    out["review"]["passed"]
    ```
    """

    serialized_parameters = ("prompt_template", "max_document_chars")

    step_kind = "grading"

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None,
                 max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `grader` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `context`, `answer`); packaged `mspr_review` by default.
        :param max_document_chars: Each passage of the context is cut to this many characters.
        """
        if max_document_chars < 20:
            raise ValueError("max_document_chars must be at least 20")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("mspr_review")
        self.max_document_chars = max_document_chars

    @component.output_types(state=MSPRState, review=dict)
    def run(self, state: MSPRState) -> dict[str, Any]:
        """
        :param state: The run so far, with its `answer`.
        :returns: `state` with the verdict (`Phase.REVIEWED`, `reviews` + 1) and the `review` for the trace.
        """
        answer = (state.answer or "").strip()
        if not answer:
            passed, model_verdict, reason = False, None, "the answer was empty"
        else:
            prompt = render_prompt(self.prompt_template, question=state.question, answer=answer,
                                   context=state.context(self.max_document_chars) or "(nothing was retrieved)")
            verdict = generate_yes_no(self.chat_generator, prompt, purpose="mspr_review")
            passed = verdict is True
            model_verdict = verdict_word(verdict)
            reason = "" if passed else (
                "the answer is not supported or incomplete" if verdict is False else "the review was unreadable")
        review = {"passed": passed, "model_verdict": model_verdict, "reason": reason, "answer": answer}
        new_state = state.evolve(phase=Phase.REVIEWED, reviews=state.reviews + 1, review_passed=passed,
                                 review_reason=reason)
        return {"state": new_state, "review": review}
