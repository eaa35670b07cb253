"""MSPR's preference-driven source selection (PRS): does the newest primary observation still help?"""

from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from docqa.components.mspr_state import MSPRState, Phase, SourceVerdict
from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import reply_text, verdict_word
from docqa.llm.calls import parse_yes_no


def _new_documents(state: MSPRState) -> list[Document]:
    """The newest observation's passages no earlier observation brought."""
    if not state.observations:
        raise ValueError("there is no observation to judge")
    seen = {doc.id for o in state.observations[:-1] for doc in o.documents}
    return [doc for doc in state.observations[-1].documents if doc.id not in seen]


def _judged(state: MSPRState, answer: bool | None, *, asked: bool) -> dict[str, Any]:
    """The state with the verdict appended, and the verdict for the trace."""
    newest = state.observations[-1]
    new_ids = tuple(doc.id for doc in _new_documents(state))
    if not asked:
        verdict = SourceVerdict(step=newest.step, source=newest.source, adds_information=False,
                                reason="no passage that was not already seen", new_document_ids=new_ids)
    else:
        verdict = SourceVerdict(
            step=newest.step, source=newest.source, adds_information=answer is not False,
            reason="judged to add nothing that helps" if answer is False else (
                "judged to add helpful information" if answer else "unreadable verdict: staying on the source"),
            new_document_ids=new_ids, model_verdict=verdict_word(answer))
    return {"state": state.evolve(phase=Phase.JUDGED, verdicts=(*state.verdicts, verdict)),
            "verdict": verdict.to_dict()}


@component
class PreferenceRequest:
    """
    What the preference prompt shows, read from the state: the question, what was known before the newest
    observation, and its new passages.

    Usage example:
    ```python
    PreferenceRequest(max_document_chars=600).run(state=state)["documents"]
    ```
    """

    def __init__(self, max_document_chars: int = 600) -> None:
        """:param max_document_chars: Each passage is cut to this many characters."""
        self.max_document_chars = max_document_chars

    @component.output_types(question=str, known=str, documents=list[Document], max_document_chars=int,
                            state=MSPRState)
    def run(self, state: MSPRState) -> dict[str, Any]:
        """
        :param state: The run so far; its newest observation is judged.
        :returns: the prompt's `question`, `known`, `documents` and `max_document_chars`, and the `state`.
        """
        return {"question": state.question, "known": state.context(self.max_document_chars, exclude_newest=True),
                "documents": _new_documents(state), "max_document_chars": self.max_document_chars, "state": state}


@component
class PreferenceVerdictParser:
    """
    Reads the judge's Yes/No and appends the verdict to the state; an unreadable verdict counts as "adds
    information" (leaving the organisation's own source should take a clear "no").

    Usage example:
    ```python
    PreferenceVerdictParser().run(replies=[ChatMessage.from_assistant("No")], state=state)["verdict"]
    ```
    """

    @component.output_types(state=MSPRState, verdict=dict)
    def run(self, replies: list[ChatMessage], state: MSPRState) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param state: The run so far.
        :returns: `state` with the verdict appended (`Phase.JUDGED`) and the `verdict` for the trace.
        """
        return _judged(state, parse_yes_no(reply_text(replies)), asked=True)


@component
class SourcePreferenceJudge(PromptedLLM):
    """
    Judges whether the newest observation adds information that helps answer the question beyond what was
    known before it: a `PreferenceRequest` -> `ChatPromptBuilder` -> constrained Yes/No -> `PreferenceVerdictParser`
    step. Without an LLM call the verdict is "no" when the observation brought no passage that had not been seen
    already (or none at all). The verdict is appended to `state.verdicts`; switching sources is the controller's
    decision.

    Usage example:
    ```python
    judge = SourcePreferenceJudge(chat_generator=OpenAIChatGenerator(...))
    out = judge.run(state=state)
    out["verdict"]["adds_information"]
    ```
    """

    step_kind = "grading"

    def __init__(self, chat_generator: Any, prompt_template: str | None = None,
                 max_document_chars: int = 600) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `grader` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `known`, `documents`, `max_document_chars`);
            the packaged `mspr_prefer` by default.
        :param max_document_chars: Each passage is cut to this many characters.
        """
        if max_document_chars < 20:
            raise ValueError("max_document_chars must be at least 20")
        template = prompt_template or load_prompt("mspr_prefer")
        self.max_document_chars = max_document_chars
        PromptedLLM.__init__(
            self, chat_generator, template, PreferenceVerdictParser(),
            variables=["question", "known", "documents", "max_document_chars"],
            outputs={"state": "state", "verdict": "verdict"}, output="yes_no", purpose="mspr_prefer",
            request=PreferenceRequest(max_document_chars),
            init_parameters={"prompt_template": template, "max_document_chars": max_document_chars},
        )

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param state: The run so far; its newest observation is judged.
        :returns: `state` with the verdict appended (`Phase.JUDGED`) and the `verdict` for the trace.
        :raises ValueError: the state has no observation.
        """
        state = kwargs["state"]
        if not _new_documents(state):
            return _judged(state, None, asked=False)
        return PromptedLLM.run(self, state=state)
