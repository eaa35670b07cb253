"""The decisions of an MSPR run, in one component: what runs next, given what just happened."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.mspr_state import Action, MSPRState, Phase, SourceSwitch
from docqa.components.multi_source_retriever import parse_sources


class StopReason(StrEnum):
    """Why an MSPR run ended (the result's `stop_reason`)."""

    REVIEW_PASSED = "review_passed"
    ANSWERED = "answered"
    ANSWERED_AFTER_REVIEW = "answered_after_review"
    MAX_STEPS = "max_steps"
    MALFORMED_ACTION = "malformed_action"


@component
class MSPRController:
    """
    Routes an MSPR run by the state's `phase` (the graph's only decision point):
    - start: a new state on the first source -> agent;
    - decided (agent): a malformed step is retried `max_action_retries` times; then, when nothing was searched
      yet, the preferred source is searched with the question (what PRS starts with), else the run stops
      (`malformed_action`); a search goes to the retriever (`search_primary` -> the preferred source,
      `search_secondary` -> the next one) and the refiner; an answer goes to the reviewer while supplementary
      retrievals remain (`reviews < max_reviews`), else it is final;
    - observed (refiner): a non-supplementary observation from the preferred source goes to the PRS judge
      when there is a later source to switch to, else back to the agent;
    - judged: "adds nothing" moves the preference to the next source (recorded with its reason) -> agent;
    - reviewed: passed -> final; failed -> a supplementary retrieval from the secondary source with the
      original question, then the agent continues (one more step per supplementary retrieval).
    The agent gets at most `max_steps` steps (plus one per supplementary retrieval); the last one may only
    answer. So retrievals <= max_steps - 1 + max_reviews and agent calls <= (steps) x (1 + retries).

    Usage example:
    ```python
    controller = MSPRController(sources=["collection:main", "web"], max_steps=5, max_reviews=1)
    controller.run(question="Who founded Acme?")["agent"]   # the initial state, for the agent
    ```
    """

    step_kind = "control"

    def __init__(self, sources: list[str], max_steps: int = 5, max_reviews: int = 1,
                 max_action_retries: int = 1) -> None:
        """
        :param sources: The sources in order of preference (the first is the primary).
        :param max_steps: AWI: agent steps at most (the last one answers).
        :param max_reviews: SRT: answer reviews, each failure buying one supplementary retrieval.
        :param max_action_retries: Retries of a malformed agent step before the fallback or the stop.
        """
        self.sources = list(parse_sources(sources))
        if max_steps < 1 or max_reviews < 0 or max_action_retries < 0:
            raise ValueError("max_steps must be at least 1, max_reviews and max_action_retries at least 0")
        self.max_steps = max_steps
        self.max_reviews = max_reviews
        self.max_action_retries = max_action_retries

    @component.output_types(agent=MSPRState, query=str, source=str, retrieval=MSPRState, judge=MSPRState,
                            review=MSPRState, answer=str, cited_documents=list[Document], stop_reason=str,
                            documents=list[Document], route=dict)
    def run(self, question: str, state: MSPRState | None = None) -> dict[str, Any]:
        """
        :param question: The user's question (starts the run).
        :param state: The state coming back round the loop (None on the first run).
        :returns: exactly one of: `agent`; `query` + `source` + `retrieval`; `judge`; `review`; or the final
            `answer` + `cited_documents` + `stop_reason` + `documents` (every passage observed, for the grounding
            check). Always `route` (what was decided and why).
        """
        if state is None:
            return self._to_agent(MSPRState(question=question, sources=tuple(self.sources)), Phase.START.value)
        if state.phase == Phase.DECIDED:
            return self._after_decision(state)
        if state.phase == Phase.OBSERVED:
            return self._after_observation(state)
        if state.phase == Phase.JUDGED:
            return self._after_judgement(state)
        if state.phase == Phase.REVIEWED:
            return self._after_review(state)
        raise ValueError(f"unexpected MSPR phase {state.phase!r}")

    # ---- transitions -----------------------------------------------------------------------------------------

    def _after_decision(self, state: MSPRState) -> dict[str, Any]:
        decision = state.last_decision
        assert decision is not None  # phase "decided" is only set with a decision
        if decision.malformed:
            if state.action_retries < self.max_action_retries:
                retry = state.evolve(action_retries=state.action_retries + 1,
                                     phase=Phase.ANSWER_NOW if decision.forced_answer else Phase.RETRY)
                return {"agent": retry, "route": {"next": "agent", "why": "malformed step: retrying",
                                                  "retry": retry.action_retries, "problem": decision.problem}}
            if not state.observations:
                # Nothing gathered yet, and every run starts on the preferred source anyway (PRS): search it with
                # the question itself rather than end with nothing for a model that cannot write a step.
                state = state.evolve(steps=state.steps + 1, action_retries=0)
                routed = self._to_retrieval(state, state.question, state.primary_source, supplementary=False)
                routed["route"].update(why="malformed first step: the preferred source is searched with the question",
                                       problem=decision.problem)
                return routed
            stopped = self._finish(state, "", StopReason.MALFORMED_ACTION, cite=False)
            stopped["route"]["problem"] = decision.problem
            return stopped
        state = state.evolve(steps=state.steps + 1, action_retries=0)
        if decision.action == Action.ANSWER:
            state = state.evolve(answer=decision.action_input)
            if state.reviews < self.max_reviews:
                return {"review": state, "route": {"next": "review", "why": "answer to review"}}
            if state.reviews:
                return self._finish(state, decision.action_input, StopReason.ANSWERED_AFTER_REVIEW)
            reason = StopReason.MAX_STEPS if decision.forced_answer else StopReason.ANSWERED
            return self._finish(state, decision.action_input, reason)
        source = state.primary_source if decision.action == Action.SEARCH_PRIMARY else state.secondary_source
        return self._to_retrieval(state, decision.action_input, source, supplementary=False)

    def _after_observation(self, state: MSPRState) -> dict[str, Any]:
        newest = state.observations[-1]
        can_switch = state.preferred < len(self.sources) - 1
        if not newest.supplementary and newest.source == state.primary_source and can_switch:
            return {"judge": state, "route": {"next": "judge", "why": f"judge what {newest.source} added"}}
        return self._to_agent(state, "observation recorded")

    def _after_judgement(self, state: MSPRState) -> dict[str, Any]:
        verdict = state.verdicts[-1]
        if not verdict.adds_information and state.preferred < len(self.sources) - 1:
            switch = SourceSwitch(step=verdict.step, from_source=state.primary_source,
                                  to_source=self.sources[state.preferred + 1], reason=verdict.reason)
            state = state.evolve(preferred=state.preferred + 1, switches=(*state.switches, switch))
            return self._to_agent(state, f"switched source: {switch.from_source} -> {switch.to_source}")
        return self._to_agent(state, f"staying on {state.primary_source}")

    def _after_review(self, state: MSPRState) -> dict[str, Any]:
        if state.review_passed:
            return self._finish(state, state.answer or "", StopReason.REVIEW_PASSED)
        # The reviewer only runs while a supplementary retrieval remains (see _after_decision).
        return self._to_retrieval(state, state.question, state.secondary_source, supplementary=True)

    # ---- outputs ---------------------------------------------------------------------------------------------

    def _step_budget(self, state: MSPRState) -> int:
        return self.max_steps + sum(1 for o in state.observations if o.supplementary)

    def _to_agent(self, state: MSPRState, why: str) -> dict[str, Any]:
        forced = state.steps + 1 >= self._step_budget(state)
        state = state.evolve(phase=Phase.ANSWER_NOW if forced else Phase.DECIDE)
        return {"agent": state, "route": {"next": "agent", "why": why, "must_answer": forced,
                                          "primary_source": state.primary_source}}

    def _to_retrieval(self, state: MSPRState, query: str, source: str, *, supplementary: bool) -> dict[str, Any]:
        state = state.evolve(pending_query=query, pending_source=source, pending_supplementary=supplementary)
        why = "supplementary retrieval after a failed review" if supplementary else "agent searches"
        return {"query": query, "source": source, "retrieval": state,
                "route": {"next": "retrieval", "why": why, "source": source, "query": query}}

    def _finish(self, state: MSPRState, answer: str, stop_reason: StopReason, *,
                cite: bool = True) -> dict[str, Any]:
        used: dict[str, int] = {}
        for observation in state.observations:
            used[observation.source] = used.get(observation.source, 0) + 1
        return {
            "answer": answer,
            "cited_documents": state.documents() if cite and answer.strip() else [],
            "documents": state.documents(),
            "stop_reason": stop_reason.value,
            "route": {"next": "end", "why": stop_reason.value, "steps": state.steps, "retrievals_by_source": used,
                      "switches": [s.to_dict() for s in state.switches], "reviews": state.reviews},
        }

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, sources=self.sources, max_steps=self.max_steps, max_reviews=self.max_reviews,
                               max_action_retries=self.max_action_retries)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MSPRController:
        return default_from_dict(cls, data)
