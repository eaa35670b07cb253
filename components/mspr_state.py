"""The state an MSPR run carries around its loop: one value passed from component to component.

Components never keep per-question state on themselves (one pipeline serves concurrent questions), so the
agent's steps, the observations and the counters travel in an `MSPRState`. Each component returns a new state
(`evolve`), never mutating the one it was given, so a traced input stays what it was.

Usage:
    state = MSPRState(question="Who founded Acme?", sources=["collection:main", "web"])
    state.primary_source, state.secondary_source   # "collection:main", "web"
    state = state.evolve(phase=Phase.DECIDED, decisions=(AgentDecision(thought="...", action=Action.ANSWER,
                                                                       action_input="x"),))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Literal

from haystack import Document


class Action(StrEnum):
    """What an agent step may do."""

    SEARCH_PRIMARY = "search_primary"
    SEARCH_SECONDARY = "search_secondary"
    ANSWER = "answer"


ACTIONS = tuple(Action)


class Phase(StrEnum):
    """What happened last in an MSPR run (the controller routes on it), and who sets it."""

    START = "start"              # a new state (the controller's first run)
    DECIDE = "decide"            # controller -> agent: take a step
    ANSWER_NOW = "answer_now"    # controller -> agent: the step budget is spent, answer
    RETRY = "retry"              # controller -> agent: the last step was malformed, try again
    DECIDED = "decided"          # agent: a decision was appended
    OBSERVED = "observed"        # refiner: an observation was appended
    JUDGED = "judged"            # judge (PRS): a verdict was appended
    REVIEWED = "reviewed"        # reviewer (CAR): the answer was reviewed


@dataclass(frozen=True)
class SourceVerdict:
    """The PRS judge's verdict on the newest observation of the preferred source: did it add information?"""

    step: int
    source: str
    adds_information: bool
    reason: str
    new_document_ids: tuple[str, ...] = ()
    model_verdict: Literal["yes", "no", "unreadable"] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SourceVerdict:
        return cls(step=int(data["step"]), source=str(data["source"]),
                   adds_information=bool(data["adds_information"]), reason=str(data.get("reason") or ""),
                   new_document_ids=tuple(data.get("new_document_ids") or ()),
                   model_verdict=data.get("model_verdict"))

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "source": self.source, "new_document_ids": list(self.new_document_ids),
                "adds_information": self.adds_information, "reason": self.reason,
                "model_verdict": self.model_verdict}


@dataclass(frozen=True)
class SourceSwitch:
    """A move of the preference from one source to the next, after the verdict of `step`."""

    step: int
    from_source: str
    to_source: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "from": self.from_source, "to": self.to_source, "reason": self.reason}


@dataclass(frozen=True)
class AgentDecision:
    """One agent step: its thought, action and action input; `malformed` (with the `problem`) when the output
    was unusable. `query_from` is "question" when a search's input was unusable and the question is searched
    instead (the `problem` says what was wrong with it), else "model"."""

    thought: str = ""
    action: str = ""  # an `Action` when usable; what the model wrote (or "") when malformed
    action_input: str = ""
    malformed: bool = False
    forced_answer: bool = False
    problem: str = ""
    query_from: Literal["model", "question"] = "model"


@dataclass(frozen=True)
class Observation:
    """The passages one retrieval returned, and (once older than the newest) their refined summary."""

    step: int
    source: str
    query: str
    documents: tuple[Document, ...] = ()
    error: str | None = None
    summary: str | None = None
    supplementary: bool = False

    @property
    def words(self) -> int:
        return sum(len((doc.content or "").split()) for doc in self.documents)

    def text(self, max_document_chars: int) -> str:
        """The whole observation as the agent sees it: numbered passages, each cut to `max_document_chars`."""
        if not self.documents:
            return f"(no passages{': ' + self.error if self.error else ''})"
        return "\n".join(f"- {(doc.content or '')[:max_document_chars]}" for doc in self.documents)


@dataclass(frozen=True)
class MSPRState:
    """Everything an MSPR run knows; `phase` says what happened last, for the controller to route on."""

    question: str
    sources: tuple[str, ...]
    phase: Phase = Phase.START
    preferred: int = 0
    steps: int = 0
    action_retries: int = 0
    decisions: tuple[AgentDecision, ...] = ()
    observations: tuple[Observation, ...] = ()
    pending_source: str | None = None
    pending_query: str | None = None
    pending_supplementary: bool = False
    answer: str | None = None
    reviews: int = 0
    review_passed: bool | None = None
    review_reason: str = ""
    switches: tuple[SourceSwitch, ...] = ()
    verdicts: tuple[SourceVerdict, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("an MSPR state needs at least one source")
        # Checked at every change: an unknown phase fails here, where it is set, not at the controller. A verdict
        # given as its mapping (as the judge writes it for the trace) becomes a SourceVerdict.
        object.__setattr__(self, "phase", Phase(self.phase))
        object.__setattr__(self, "verdicts", tuple(
            v if isinstance(v, SourceVerdict) else SourceVerdict.from_dict(v) for v in self.verdicts))

    def evolve(self, **changes: Any) -> MSPRState:
        return dataclasses.replace(self, **changes)

    @property
    def primary_source(self) -> str:
        """The source the agent's `search_primary` goes to: the preferred one (it moves on when exhausted)."""
        return self.sources[min(self.preferred, len(self.sources) - 1)]

    @property
    def secondary_source(self) -> str:
        """The next source after the preferred one (the preferred itself when it is the last)."""
        return self.sources[min(self.preferred + 1, len(self.sources) - 1)]

    @property
    def last_decision(self) -> AgentDecision | None:
        return self.decisions[-1] if self.decisions else None

    def documents(self) -> list[Document]:
        """Every passage observed, first occurrence first (the answer's citations)."""
        seen: dict[str, Document] = {}
        for observation in self.observations:
            for doc in observation.documents:
                seen.setdefault(doc.id, doc)
        return list(seen.values())

    def context(self, max_document_chars: int, *, exclude_newest: bool = False) -> str:
        """The observations as prompts show them: refined summaries for older ones (where written), the newest
        whole. `exclude_newest` leaves the newest out (what was known before it)."""
        observations = self.observations[:-1] if exclude_newest else self.observations
        blocks = []
        for index, observation in enumerate(observations):
            newest = index == len(self.observations) - 1
            header = f"[{observation.source}] search: {observation.query}"
            if observation.summary is not None and not newest:
                blocks.append(f"{header}\nsummary: {observation.summary}")
            else:
                blocks.append(f"{header}\n{observation.text(max_document_chars)}")
        return "\n".join(blocks)

    def to_dict(self) -> dict[str, Any]:
        """A compact view for traces: ids instead of passages, summaries and verdicts in full."""
        return {
            "question": self.question,
            "sources": list(self.sources),
            "phase": self.phase.value,
            "primary_source": self.primary_source,
            "steps": self.steps,
            "action_retries": self.action_retries,
            "decisions": [dataclasses.asdict(d) for d in self.decisions],
            "observations": [
                {"step": o.step, "source": o.source, "query": o.query, "document_ids": [d.id for d in o.documents],
                 "error": o.error, "summary": o.summary, "supplementary": o.supplementary, "words": o.words}
                for o in self.observations
            ],
            "answer": self.answer,
            "reviews": self.reviews,
            "review_passed": self.review_passed,
            "switches": [s.to_dict() for s in self.switches],
            "verdicts": [v.to_dict() for v in self.verdicts],
        }
