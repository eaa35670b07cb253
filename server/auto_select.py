"""`auto` pipeline selection: a strategy per question from its type and length, with the reason recorded.

Simple lexical rules, cheap and explainable in the trace; no LLM call is spent on routing:
- comparison or bridge questions (both/either/compare/older/first ..., or nested "of the ... of") and long
  questions need several hops -> an iterative strategy;
- summary-style questions (summarize/overview/describe/explain ...) need broad coverage -> a tree strategy;
- everything else -> single-round retrieval.

Usage:
    choice = choose_pipeline("Who directed the film that won ...?", ["standard", "resp"])
    choice.name, choice.reason   # ("resp", "multi-hop: bridge cue 'that'; ...")
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MULTI_HOP_CUES = (
    "both", "either", "neither", "compare", "compared", "same", "older", "younger", "earlier", "later",
    "first", "longer", "larger", "more", "fewer", "difference", "whose", "which",
)
SUMMARY_CUES = ("summarize", "summarise", "summary", "overview", "describe", "explain", "history", "themes")
LONG_QUESTION_WORDS = 18

# Preference order per question type; the first registered strategy wins.
PREFERENCES: dict[str, tuple[str, ...]] = {
    "multi_hop": ("resp", "atrag", "standard"),
    "summary": ("atrag", "resp", "standard"),
    "simple": ("standard",),
}


@dataclass(frozen=True)
class Choice:
    name: str
    question_type: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"mode": "auto", "pipeline": self.name, "question_type": self.question_type, "reason": self.reason}


def classify(question: str) -> tuple[str, str]:
    """(question type, why) from cue words and length."""
    words = re.findall(r"[a-z0-9']+", question.lower())
    summary = [w for w in words if w in SUMMARY_CUES]
    if summary:
        return "summary", f"summary cue {summary[0]!r}"
    hops = [w for w in words if w in MULTI_HOP_CUES]
    if hops:
        return "multi_hop", f"multi-hop cue {hops[0]!r}"
    if re.search(r"\bof the\b.+\bof\b", question.lower()):
        return "multi_hop", "nested 'of the ... of' phrase"
    if len(words) >= LONG_QUESTION_WORDS:
        return "multi_hop", f"long question ({len(words)} words)"
    return "simple", f"short question ({len(words)} words) without multi-hop or summary cues"


def choose_pipeline(question: str, available: list[str]) -> Choice:
    """The strategy for `question` among `available` names; raises ValueError when none is registered."""
    if not available:
        raise ValueError("no pipelines are registered")
    question_type, why = classify(question)
    for name in PREFERENCES[question_type]:
        if name in available:
            return Choice(name=name, question_type=question_type, reason=f"{why}; chose {name!r}")
    fallback = "standard" if "standard" in available else sorted(available)[0]
    return Choice(
        name=fallback,
        question_type=question_type,
        reason=f"{why}; preferred strategies not registered, fell back to {fallback!r}",
    )
