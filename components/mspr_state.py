"""The state an MSPR run carries around its loop: one value passed from component to component.

Components never keep per-question state on themselves (one pipeline serves concurrent questions), so the
agent's steps, the observations and the counters travel in an `MSPRState`. Each component returns a new state
(`evolve`), never mutating the one it was given, so a traced input stays what it was.

Usage:
    state = MSPRState(question="Who founded Acme?", sources=["collection:main", "web"])
    state.primary_source, state.secondary_source   # "collection:main", "web"
    state = state.evolve(phase="decided", decision=AgentDecision(thought="...", action="answer", action_input="x"))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from haystack import Document

ACTION_SEARCH_PRIMARY = "search_primary"
ACTION_SEARCH_SECONDARY = "search_secondary"
ACTION_ANSWER = "answer"
ACTIONS = (ACTION_SEARCH_PRIMARY, ACTION_SEARCH_SECONDARY, ACTION_ANSWER)


@dataclass(frozen=True)
class AgentDecision:
    """One agent step: its thought, action and action input; `malformed` (with the `problem`) when the output
    was unusable. `query_from` is "question" when a search's input was unusable and the question is searched
    instead (the `problem` says what was wrong with it), else "model"."""

    thought: str = ""
    action: str = ""
    action_input: str = ""
    malformed: bool = False
    forced_answer: bool = False
    problem: str = ""
    query_from: str = "model"


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
    phase: str = "start"
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
    switches: tuple[dict[str, Any], ...] = ()
    verdicts: tuple[dict[str, Any], ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.sources:
            raise ValueError("an MSPR state needs at least one source")

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
            "phase": self.phase,
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
            "switches": list(self.switches),
            "verdicts": list(self.verdicts),
        }
