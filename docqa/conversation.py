"""Follow-up questions made standalone, for callers holding only the user's questions.

The rewrite is `docqa.followups`, which reads the whole exchange (the answers too: "Where did that person work
before?" after "Dana Whitlock leads it."); every entry point goes through the question service, which passes the
answers. `standalone_question` rewrites from the questions alone, as before.

Usage:
    rewrite = standalone_question(["Where is Halcyon headquartered?", "and when was it founded?"])
    rewrite.question  # "When was Halcyon founded?"
    rewrite.to_step() # the run's first step (kind "rewrite"), recorded by the question service
"""

from __future__ import annotations

from collections.abc import Sequence

from docqa.followups import (
    METHOD_CONTEXT,
    METHOD_FIRST,
    METHOD_REFERENT,
    METHOD_SWAPPED,
    METHOD_UNCHANGED,
    Rewrite,
    rewrite_followup,
    subject_of,
)

__all__ = ["METHOD_CONTEXT", "METHOD_FIRST", "METHOD_REFERENT", "METHOD_SWAPPED", "METHOD_UNCHANGED", "Rewrite",
           "standalone_question", "subject_of"]


def standalone_question(user_turns: Sequence[str]) -> Rewrite:
    """The last of `user_turns` as a standalone question, each turn rewritten against the ones before it."""
    return rewrite_followup([{"role": "user", "content": turn} for turn in user_turns])
