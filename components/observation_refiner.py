"""MSPR's observation refinement (ORS): older observations summarised, the newest kept whole."""

from __future__ import annotations

from typing import Any

from haystack import Document, component

from docqa.components.llm_serialization import ChatComponentSerialization
from docqa.components.mspr_state import MSPRState, Observation, Phase
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_text, strip_prompt_echo


@component
class ObservationRefiner(ChatComponentSerialization):
    """
    Appends a retrieval's passages to the state as the newest observation (whole), and summarises the
    observation that was newest until now with respect to the question and the current query (one LLM call
    per step; older ones were summarised on earlier steps). A summary is never longer than what it replaces:
    an empty or longer reply falls back to the observation's first `fallback_words` words. With
    `enabled=False` nothing is summarised (every observation stays whole), to measure what ORS saves.

    Usage example:
    ```python
    refiner = ObservationRefiner(chat_generator=OpenAIChatGenerator(...))
    out = refiner.run(state=state, documents=docs, source="collection:main")
    out["state"].observations[-1].documents == tuple(docs)
    ```
    """

    serialized_parameters = ("prompt_template", "max_tokens", "max_document_chars", "fallback_words", "enabled")

    step_kind = "summary"

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None, max_tokens: int = 96,
                 max_document_chars: int = 600, fallback_words: int = 60, enabled: bool = True) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `summarizer` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `query`, `current_query`, `documents`,
            `max_document_chars`); the packaged `mspr_refine` by default.
        :param max_tokens: Token cap of one summary.
        :param max_document_chars: Each passage shown to the summariser is cut to this many characters.
        :param fallback_words: Words kept when the model's summary is unusable.
        :param enabled: False keeps every observation whole (no LLM call).
        """
        if max_tokens < 8 or max_document_chars < 20 or fallback_words < 5:
            raise ValueError("max_tokens >= 8, max_document_chars >= 20 and fallback_words >= 5 are required")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("mspr_refine")
        self.max_tokens = max_tokens
        self.max_document_chars = max_document_chars
        self.fallback_words = fallback_words
        self.enabled = enabled

    @component.output_types(state=MSPRState, refinement=dict)
    def run(self, state: MSPRState, documents: list[Document], source: str, error: str | None = None) -> dict[str, Any]:
        """
        :param state: The run so far; `pending_query` is the query the documents were retrieved for.
        :param documents: The retrieval's passages (the new observation).
        :param source: The source they came from.
        :param error: Why the source returned nothing, if it failed.
        :returns: `state` with the new observation (`Phase.OBSERVED`) and `refinement` (words before/after).
        """
        query = state.pending_query or state.question
        observations = list(state.observations)
        refinement: dict[str, Any] = {"summarised_step": None}
        if self.enabled and observations and observations[-1].summary is None:
            previous = observations[-1]
            summary = self._summarise(state.question, query, previous)
            observations[-1] = Observation(**{**previous.__dict__, "summary": summary})
            refinement = {"summarised_step": previous.step, "words_before": previous.words,
                          "words_after": len(summary.split()), "summary": summary}
        observations.append(Observation(step=state.steps, source=source, query=query, documents=tuple(documents),
                                        error=error, supplementary=state.pending_supplementary))
        new_state = state.evolve(phase=Phase.OBSERVED, observations=tuple(observations), pending_source=None,
                                 pending_query=None, pending_supplementary=False)
        return {"state": new_state, "refinement": refinement}

    def _summarise(self, question: str, current_query: str, observation: Observation) -> str:
        fallback = " ".join(" ".join(d.content or "" for d in observation.documents).split()[: self.fallback_words])
        if not observation.documents:
            return observation.text(self.max_document_chars)
        prompt = render_prompt(self.prompt_template, question=question, query=observation.query,
                               current_query=current_query, documents=list(observation.documents),
                               max_document_chars=self.max_document_chars)
        summary = " ".join(strip_prompt_echo(generate_text(self.chat_generator, prompt, max_tokens=self.max_tokens,
                                                           purpose="mspr_refine"), prompt).split())
        # A summary exists to shorten the context; one that does not is replaced by the observation's start.
        if not summary or len(summary.split()) >= observation.words:
            return fallback
        return summary
