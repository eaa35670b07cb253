"""MSPR's preference-driven source selection (PRS): does the newest primary observation still help?"""

from __future__ import annotations

from typing import Any

from haystack import component

from docqa.components.llm_serialization import ChatComponentSerialization
from docqa.components.mspr_state import MSPRState, Phase
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.components.reply_parsers import verdict_word
from docqa.llm.calls import ChatGenerator, generate_yes_no


@component
class SourcePreferenceJudge(ChatComponentSerialization):
    """
    Judges whether the newest observation adds information that helps answer the question beyond what was
    known before it. Without an LLM call the verdict is "no" when the observation brought no passage that
    had not been seen already (or none at all). An unreadable verdict counts as "adds information": the
    preferred source is the organisation's own, and leaving it should take a clear "no". The verdict is
    appended to `state.verdicts`; switching sources is the controller's decision.

    Usage example:
    ```python
    judge = SourcePreferenceJudge(chat_generator=OpenAIChatGenerator(...))
    out = judge.run(state=state)
    out["verdict"]["adds_information"]
    ```
    """

    serialized_parameters = ("prompt_template", "max_document_chars")

    step_kind = "grading"

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None,
                 max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `grader` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `known`, `documents`, `max_document_chars`);
            the packaged `mspr_prefer` by default.
        :param max_document_chars: Each passage is cut to this many characters.
        """
        if max_document_chars < 20:
            raise ValueError("max_document_chars must be at least 20")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("mspr_prefer")
        self.max_document_chars = max_document_chars

    @component.output_types(state=MSPRState, verdict=dict)
    def run(self, state: MSPRState) -> dict[str, Any]:
        """
        :param state: The run so far; its newest observation is judged.
        :returns: `state` with the verdict appended (`Phase.JUDGED`) and the `verdict` for the trace.
        """
        if not state.observations:
            raise ValueError("there is no observation to judge")
        newest = state.observations[-1]
        seen = {doc.id for o in state.observations[:-1] for doc in o.documents}
        new_ids = [doc.id for doc in newest.documents if doc.id not in seen]
        verdict: dict[str, Any] = {"step": newest.step, "source": newest.source, "new_document_ids": new_ids}
        if not new_ids:
            verdict |= {"adds_information": False, "reason": "no passage that was not already seen",
                        "model_verdict": None}
        else:
            prompt = render_prompt(self.prompt_template, question=state.question,
                                   known=state.context(self.max_document_chars, exclude_newest=True),
                                   documents=[d for d in newest.documents if d.id in new_ids],
                                   max_document_chars=self.max_document_chars)
            answer = generate_yes_no(self.chat_generator, prompt, purpose="mspr_prefer")
            verdict |= {
                "adds_information": answer is not False,
                "model_verdict": verdict_word(answer),
                "reason": "judged to add nothing that helps" if answer is False else (
                    "judged to add helpful information" if answer else "unreadable verdict: staying on the source"),
            }
        return {"state": state.evolve(phase=Phase.JUDGED, verdicts=(*state.verdicts, verdict)), "verdict": verdict}
