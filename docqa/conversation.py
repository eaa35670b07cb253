"""Follow-up questions in a conversation become standalone questions, deterministically, as a recorded step.

A follow-up such as "and where is it headquartered?" loses its subject when asked alone. Each user turn is
rewritten against the standalone form of the turn before it (so a subject carries through several turns):
- a pronoun ("it", "its", "they", "their", ...) is replaced by the previous question's subject, the proper-noun
  phrase it names ("Where is Halcyon headquartered?" -> "Halcyon");
- "what about X?" asks the previous question again about X;
- any other follow-up (a leading "and"/"also", or too short to stand alone) keeps the previous question as
  context: "... (regarding: <subject or previous question>)".
No model is involved, so a weak local model cannot lose the subject, and the rewrite is reproducible from the
trace. The question service runs the strategy on the standalone question and records the rewrite
(`Rewrite.to_step()`, kind "rewrite") as the run's first step.

Usage:
    rewrite = standalone_question(["Where is Halcyon headquartered?", "and when was it founded?"])
    rewrite.question  # "When was Halcyon founded?"
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from docqa.result import Step

_SUBJECT_PRONOUNS = ("it", "they", "them", "he", "him", "she", "this", "that", "these", "those")
_POSSESSIVE_PRONOUNS = ("its", "their", "his", "her")
_PRONOUN = re.compile(r"\b(" + "|".join(_SUBJECT_PRONOUNS + _POSSESSIVE_PRONOUNS) + r")\b", re.IGNORECASE)
_LEADING = re.compile(r"^\s*(?:and|but|so|also|then|ok(?:ay)?|and also)\b[\s,]*", re.IGNORECASE)
_WHAT_ABOUT = re.compile(r"^\s*(?:and\s+)?(?:what|how)\s+about\s+(?P<other>.+?)\s*\??\s*$", re.IGNORECASE)
# Capitalised words that open questions or sentences rather than name something.
_NOT_NAMES = frozenset(re.findall(r"\w+", (
    "what which who whom whose when where why how is are was were do does did can could should would will may "
    "might must shall has have had the a an in on at of for to and or but please tell list give name i we you "
    "our my your their its it this that these those"
)))
_WORD = re.compile(r"[A-Za-z0-9][\w&'.-]*")
_MIN_STANDALONE_WORDS = 4

METHOD_FIRST = "first_question"
METHOD_UNCHANGED = "standalone"
METHOD_PRONOUN = "pronoun_replaced"
METHOD_WHAT_ABOUT = "subject_swapped"
METHOD_CONTEXT = "previous_question_as_context"


@dataclass
class Rewrite:
    """The standalone `question` for the last user turn, how it was obtained, and the turns it read."""

    question: str
    original: str
    method: str
    subject: str | None = None
    history: list[str] = field(default_factory=list)

    def to_step(self) -> Step:
        return Step(index=0, kind="rewrite", name="conversation_rewrite",
                    inputs={"question": self.original, "previous_questions": self.history},
                    outputs={"question": self.question, "method": self.method, "subject": self.subject})


def standalone_question(user_turns: Sequence[str]) -> Rewrite:
    """The last of `user_turns` as a standalone question, each turn rewritten against the one before it."""
    turns = [" ".join(turn.split()) for turn in user_turns if turn and turn.strip()]
    if not turns:
        raise ValueError("a conversation needs a user question")
    current = Rewrite(turns[0], turns[0], METHOD_FIRST, subject_of(turns[0]))
    for turn in turns[1:]:
        current = _rewrite(current, turn)
    current.history = turns[:-1]
    return current


def subject_of(question: str) -> str | None:
    """The first proper-noun phrase of a question ("Acme Corp", "Halcyon"), or None."""
    phrase: list[str] = []
    for word in _WORD.findall(question):
        name = word.rstrip(".'").removesuffix("'s")
        if name[:1].isupper() and name.lower() not in _NOT_NAMES:
            phrase.append(name)
        elif phrase:
            break
    return " ".join(phrase) or None


def _rewrite(previous: Rewrite, turn: str) -> Rewrite:
    subject = previous.subject
    about = _WHAT_ABOUT.match(turn)
    if about and subject and subject in previous.question:
        other = about.group("other").strip()
        return Rewrite(previous.question.replace(subject, other, 1), turn, METHOD_WHAT_ABOUT, subject_of(other)
                       or other)
    body = _LEADING.sub("", turn).strip()
    own_subject = subject_of(body)
    if own_subject and not _LEADING.match(turn):
        return Rewrite(turn, turn, METHOD_UNCHANGED, own_subject)
    pronoun = _PRONOUN.search(body)
    if pronoun and subject:
        word = pronoun.group(1).lower()
        replacement = f"{subject}'s" if word in _POSSESSIVE_PRONOUNS else subject
        text = body[: pronoun.start()] + replacement + body[pronoun.end():]
        return Rewrite(_capitalised(text), turn, METHOD_PRONOUN, subject)
    if pronoun or _LEADING.match(turn) or len(_WORD.findall(body)) < _MIN_STANDALONE_WORDS:
        context = subject or previous.question.rstrip("?. ")
        return Rewrite(f"{_capitalised(body).rstrip()} (regarding: {context})", turn, METHOD_CONTEXT, subject)
    return Rewrite(turn, turn, METHOD_UNCHANGED, own_subject)


def _capitalised(text: str) -> str:
    return text[:1].upper() + text[1:]
