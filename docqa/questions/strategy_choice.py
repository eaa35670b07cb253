"""`auto` pipeline selection: a strategy per question from its type and length, with the reason recorded.

Simple lexical rules, cheap and explainable in the trace; no LLM call is spent on routing:
- comparison or bridge questions (both/either/compare/older/first ..., or nested "of the ... of") and long
  questions need several hops -> an iterative strategy;
- summary-style questions (summarize/overview/describe/explain ...) need broad coverage -> a tree strategy;
- everything else -> single-round retrieval.

When the deployment configured several sources for `mspr` (DOCQA_MSPR_SOURCES set, two or more sources),
multi-hop questions go to `mspr`, which searches the primary source first and moves on when it stops helping;
so do simple questions when one source is the web (`web` or `web:PROVIDER`), which no single-round retrieval
reaches. The built-in default (main, then archive) does not count: every store-backed strategy already searches
both collections at once.

How a strategy was selected is data of the run: `selection(...)` returns it as recorded in the trace's config
(`{"mode": "explicit", "pipeline": ...}` or `{"mode": "auto", "pipeline", "question_type", "reason"}`).

Usage:
    choice = choose_pipeline("Who directed the film that won ...?", ["standard", "resp"])
    choice.name, choice.reason   # ("resp", "multi-hop: bridge cue 'that'; ...")
    name, how = select_strategy("Who directed ...?", "auto", ["standard", "resp"], settings)
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from docqa.components.multi_source_retriever import parse_sources
from docqa.errors import UnknownPipelineError

AUTO = "auto"
MSPR = "mspr"
WEB_SOURCE = "web"
WEB_PROVIDER_PREFIX = "web:"

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


def multi_sources(settings: Any) -> tuple[str, ...]:
    """The sources the deployment configured for mspr (DOCQA_MSPR_SOURCES), or () when it kept the default.

    An invalid value also gives (): `mspr` would refuse to run, so `auto` must not pick it.
    """
    if "mspr_sources" not in getattr(settings, "model_fields_set", ()):
        return ()
    try:
        return parse_sources(settings.mspr_sources)
    except ValueError:
        return ()


def is_web_source(source: str) -> bool:
    """`web` (SearXNG) or `web:PROVIDER` (Haystack's web search components)."""
    return source == WEB_SOURCE or source.startswith(WEB_PROVIDER_PREFIX)


def _prefers_mspr(question_type: str, sources: Sequence[str]) -> str | None:
    """Why `mspr` comes first for this question type and these sources, or None."""
    if len(sources) < 2:
        return None
    listed = f"{len(sources)} sources configured ({', '.join(sources)})"
    if question_type == "multi_hop":
        return listed
    if question_type == "simple" and any(is_web_source(source) for source in sources):
        return f"{listed}, the web among them"
    return None


def choose_pipeline(question: str, available: list[str], sources: Sequence[str] = ()) -> Choice:
    """The strategy for `question` among `available` names; raises ValueError when none is registered.

    :param sources: the sources configured for mspr (`multi_sources(settings)`); two or more make `mspr` the
        first choice for multi-hop questions (and simple ones when the web is a source).
    """
    if not available:
        raise ValueError("no pipelines are registered")
    question_type, why = classify(question)
    sources_reason = _prefers_mspr(question_type, sources)
    if sources_reason and MSPR in available:
        return Choice(name=MSPR, question_type=question_type, reason=f"{why}; {sources_reason}; chose {MSPR!r}")
    for name in PREFERENCES[question_type]:
        if name in available:
            return Choice(name=name, question_type=question_type, reason=f"{why}; chose {name!r}")
    fallback = "standard" if "standard" in available else sorted(available)[0]
    return Choice(
        name=fallback,
        question_type=question_type,
        reason=f"{why}; preferred strategies not registered, fell back to {fallback!r}",
    )


def select_strategy(question: str, requested: str, available: list[str],
                    settings: Any) -> tuple[str, dict[str, Any]]:
    """The strategy to run and how it was selected (recorded in the run's config as `selection`).

    :param requested: a registered strategy name, or `auto` to choose one from the question.
    :raises UnknownPipelineError: a name that is neither `auto` nor registered.
    """
    if requested == AUTO:
        choice = choose_pipeline(question, available, sources=multi_sources(settings))
        return choice.name, choice.to_dict()
    if requested not in available:
        raise UnknownPipelineError(f"unknown pipeline {requested!r}; available: {', '.join([AUTO, *available])}")
    return requested, {"mode": "explicit", "pipeline": requested}
