"""MSPR's observation refinement (ORS): older observations summarised, the newest kept whole."""

from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from docqa.components.mspr_state import MSPRState, Observation, Phase
from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import prompt_text, reply_text
from docqa.llm.calls import strip_prompt_echo


def _observed(state: MSPRState, documents: list[Document], source: str, error: str | None,
              summary: str | None) -> dict[str, Any]:
    """The state with the newest observation until now summarised (when `summary` is given) and the retrieval's
    passages appended whole, and the refinement for the trace."""
    observations = list(state.observations)
    refinement: dict[str, Any] = {"summarised_step": None}
    if summary is not None:
        previous = observations[-1]
        observations[-1] = Observation(**{**previous.__dict__, "summary": summary})
        refinement = {"summarised_step": previous.step, "words_before": previous.words,
                      "words_after": len(summary.split()), "summary": summary}
    observations.append(Observation(step=state.steps, source=source, query=state.pending_query or state.question,
                                    documents=tuple(documents), error=error,
                                    supplementary=state.pending_supplementary))
    new_state = state.evolve(phase=Phase.OBSERVED, observations=tuple(observations), pending_source=None,
                             pending_query=None, pending_supplementary=False)
    return {"state": new_state, "refinement": refinement}


@component
class RefineRequest:
    """
    What the refinement prompt shows, read from the state: the observation to summarise (its query and
    passages), the question and the current query; the retrieval's own passages pass on to the parser.

    Usage example:
    ```python
    RefineRequest(max_document_chars=600).run(state=state, documents=docs, source="collection:main")["query"]
    ```
    """

    def __init__(self, max_document_chars: int = 600) -> None:
        """:param max_document_chars: Each passage shown to the summariser is cut to this many characters."""
        self.max_document_chars = max_document_chars

    @component.output_types(question=str, query=str, current_query=str, documents=list[Document],
                            max_document_chars=int, state=MSPRState, observed=list[Document], source=str,
                            error=str | None)
    def run(self, state: MSPRState, documents: list[Document], source: str, error: str | None = None) -> dict[str, Any]:
        """
        :param state: The run so far; its newest observation is the one to summarise.
        :param documents: The retrieval's passages (the new observation).
        :param source: The source they came from.
        :param error: Why the source returned nothing, if it failed.
        :returns: the prompt's parts, and the `state`, the new passages (`observed`), `source` and `error`.
        """
        previous = state.observations[-1]
        return {"question": state.question, "query": previous.query,
                "current_query": state.pending_query or state.question, "documents": list(previous.documents),
                "max_document_chars": self.max_document_chars, "state": state, "observed": documents,
                "source": source, "error": error}


@component
class RefinedObservationParser:
    """
    Reads a summary and records the retrieval: a summary is never longer than what it replaces; an empty or
    longer one falls back to the observation's first `fallback_words` words.

    Usage example:
    ```python
    RefinedObservationParser().run(replies=replies, prompt=prompt, state=state, observed=docs, source="web")
    ```
    """

    def __init__(self, fallback_words: int = 60) -> None:
        """:param fallback_words: Words kept when the model's summary is unusable."""
        self.fallback_words = fallback_words

    @component.output_types(state=MSPRState, refinement=dict)
    def run(self, replies: list[ChatMessage], prompt: list[ChatMessage], state: MSPRState,
            observed: list[Document], source: str, error: str | None = None) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param prompt: the messages the reply answers.
        :param state: The run so far.
        :param observed: The retrieval's passages.
        :param source: The source they came from.
        :param error: Why the source returned nothing, if it failed.
        :returns: `state` with the new observation (`Phase.OBSERVED`) and `refinement` (words before/after).
        """
        previous = state.observations[-1]
        summary = " ".join(strip_prompt_echo(reply_text(replies).strip(), prompt_text(prompt)).split())
        # A summary exists to shorten the context; one that does not is replaced by the observation's start.
        if not summary or len(summary.split()) >= previous.words:
            summary = " ".join(" ".join(d.content or "" for d in previous.documents).split()[: self.fallback_words])
        return _observed(state, observed, source, error, summary)


@component
class ObservationRefiner(PromptedLLM):
    """
    Appends a retrieval's passages to the state as the newest observation (whole), and summarises the
    observation that was newest until now with respect to the question and the current query (one LLM call
    per step; older ones were summarised on earlier steps): a `RefineRequest` -> `ChatPromptBuilder` -> one text
    call -> `RefinedObservationParser` step. With `enabled=False` nothing is summarised (every observation stays
    whole), to measure what ORS saves; an observation without passages is "summarised" as its text, without a call.

    Usage example:
    ```python
    refiner = ObservationRefiner(chat_generator=OpenAIChatGenerator(...))
    out = refiner.run(state=state, documents=docs, source="collection:main")
    out["state"].observations[-1].documents == tuple(docs)
    ```
    """

    step_kind = "summary"

    def __init__(self, chat_generator: Any, prompt_template: str | None = None, max_tokens: int = 96,
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
        template = prompt_template or load_prompt("mspr_refine")
        self.max_document_chars = max_document_chars
        self.fallback_words = fallback_words
        self.enabled = enabled
        PromptedLLM.__init__(
            self, chat_generator, template, RefinedObservationParser(fallback_words),
            variables=["question", "query", "current_query", "documents", "max_document_chars"],
            outputs={"state": "state", "refinement": "refinement"}, max_tokens=max_tokens, purpose="mspr_refine",
            request=RefineRequest(max_document_chars),
            init_parameters={"prompt_template": template, "max_tokens": max_tokens,
                             "max_document_chars": max_document_chars, "fallback_words": fallback_words,
                             "enabled": enabled},
        )

    def run(self, **kwargs: Any) -> dict[str, Any]:
        """
        :param state: The run so far; `pending_query` is the query the documents were retrieved for.
        :param documents: The retrieval's passages (the new observation).
        :param source: The source they came from.
        :param error: Why the source returned nothing, if it failed.
        :returns: `state` with the new observation (`Phase.OBSERVED`) and `refinement` (words before/after).
        """
        state, documents, source = kwargs["state"], kwargs["documents"], kwargs["source"]
        error = kwargs.get("error")
        error = error if isinstance(error, str) else None
        previous = state.observations[-1] if state.observations else None
        if not self.enabled or previous is None or previous.summary is not None:
            return _observed(state, documents, source, error, None)
        if not previous.documents:
            return _observed(state, documents, source, error, previous.text(self.max_document_chars))
        return PromptedLLM.run(self, state=state, documents=documents, source=source, error=error)
