"""ReSP's two memory queues as typed data: global evidence for the question, local pathway for sub-questions.

The memories are what the reasoner judges and plans from and what the generator answers from, so they are
rendered into prompts by one function (`ReSPMemory.as_text`) and serialised into steps for the audit trail.

Usage:
    memory = ReSPMemory()
    memory = memory.with_evidence(GlobalEvidence(iteration=1, query="Who ...?", summary="...", document_ids=("a",)))
    memory = memory.with_pathway(PathwayEntry(iteration=2, sub_question="...", answered=True, answer="Paris"))
    prompt_part = memory.as_text()
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any


@dataclass(frozen=True)
class GlobalEvidence:
    """What one iteration's documents say in support of the overarching question."""

    iteration: int
    query: str
    summary: str
    document_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class PathwayEntry:
    """One sub-question, whether the retrieved documents answered it, and the answer if they did."""

    iteration: int
    sub_question: str
    answered: bool
    answer: str = ""
    document_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ReSPMemory:
    """Both queues, in the order the entries were written. Immutable: each update returns a new memory."""

    global_evidence: tuple[GlobalEvidence, ...] = field(default_factory=tuple)
    local_pathway: tuple[PathwayEntry, ...] = field(default_factory=tuple)

    def __deepcopy__(self, memo: dict[int, Any]) -> ReSPMemory:
        # Immutable all the way down: Haystack deep-copies every component input and output, a copy adds nothing.
        return self

    def with_evidence(self, evidence: GlobalEvidence) -> ReSPMemory:
        return replace(self, global_evidence=(*self.global_evidence, evidence))

    def with_pathway(self, entry: PathwayEntry) -> ReSPMemory:
        return replace(self, local_pathway=(*self.local_pathway, entry))

    @property
    def is_empty(self) -> bool:
        return not self.global_evidence and not self.local_pathway

    def as_text(self) -> str:
        """The "combined memory queues" the paper's prompts refer to."""
        lines: list[str] = []
        if self.global_evidence:
            lines.append("Global evidence:")
            lines.extend(f"- {item.summary}" for item in self.global_evidence if item.summary)
        if self.local_pathway:
            lines.append("Sub-questions already asked:")
            for entry in self.local_pathway:
                outcome = entry.answer if entry.answered and entry.answer else "not answered by the documents"
                lines.append(f"- {entry.sub_question} Answer: {outcome}")
        return "\n".join(lines) if lines else "(nothing yet)"

    def __str__(self) -> str:
        # How a prompt template's `{{ memory }}` renders the memories.
        return self.as_text()

    def word_count(self) -> int:
        return len(self.as_text().split()) if not self.is_empty else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "global_evidence": [asdict(item) for item in self.global_evidence],
            "local_pathway": [asdict(entry) for entry in self.local_pathway],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ReSPMemory:
        return cls(
            global_evidence=tuple(
                GlobalEvidence(**{**item, "document_ids": tuple(item.get("document_ids", ()))})
                for item in data.get("global_evidence", [])
            ),
            local_pathway=tuple(
                PathwayEntry(**{**entry, "document_ids": tuple(entry.get("document_ids", ()))})
                for entry in data.get("local_pathway", [])
            ),
        )
