"""The last node of every generating strategy: what is shown as the answer is backed by the passages it cites."""


import re
from dataclasses import dataclass, field
from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.core.component.types import Variadic

from docqa import extractive_fallback as fallback
from docqa.checkable_facts import EXPECTED, Fact, FactIndex, abstains, gives_kind, question_kind, sentence_facts
from docqa.components.instruction_echo import copied_share, recites_instructions

ANSWER_SOURCE_RECORD_TABLE = "record_table"
REASON_NO_PASSAGE = "no_readable_passage"
REASON_UNKNOWN_CITATION = "unknown_citation"
REASON_WRONG_CITATION = "wrong_citation"
REASON_TRUNCATED = "truncated"
REASON_NOT_AN_ANSWER = "not_an_answer"
REASON_REPEATS_QUESTION = "repeats_question"
REASON_UNSUPPORTED_ANSWER = "unsupported_answer"
# An answer this short is one claim: when none of its words is in the passages (or the question), nothing backs it.
SHORT_ANSWER_WORDS = 6
REASON_UNSUPPORTED = {"number": "unsupported_number", "date": "unsupported_date", "name": "unsupported_name"}
_REASON_TEXT = {
    REASON_UNKNOWN_CITATION: "it cited a passage it was not given",
    REASON_WRONG_CITATION: "it cited a fact to a passage that does not state it",
    REASON_TRUNCATED: "its reply was cut off by the token limit",
    REASON_REPEATS_QUESTION: "it asked the question back instead of answering it",
    REASON_UNSUPPORTED_ANSWER: "its short answer has no word in common with the passages",
    "unsupported_number": "a number in its answer is not in the passages",
    "unsupported_date": "a date in its answer is not in the passages",
    "unsupported_name": "a name in its answer is not in the passages",
}
_NOT_AN_ANSWER_TEXT = "the model's text does not give the kind of answer the question asks for"

_MARKERS = re.compile(r"\s?\[(\d{1,4}(?:\s*,\s*\d{1,4})*)\]")
# A sentence ends at . ! ? (with closing quotes or brackets and the citation markers after it) before a space and
# a capital, digit, quote or bracket, or at a line break.
_END = re.compile(r"[.!?][\"'”’)]*(?:\s?\[\d{1,4}(?:\s*,\s*\d{1,4})*\])*(?=\s+[\"'“(\[A-Z0-9]|\s*$)|\n+")
_TERMINAL = re.compile(r"(?:[.!?][\"'”’)]*|\])\s*$")
_ABBREVIATION = re.compile(
    r"(?:\b(?:e\.g|i\.e|etc|vs|mr|mrs|ms|dr|prof|st|no|art|sec|approx|incl)|\b[A-Z])\.$", re.IGNORECASE
)
_LEADING_MARKER = re.compile(r"^\[\d{1,4}\]\s*")
# Near word for word: a small model's copy drops or repeats a word here and there ("Scott Andrew Buchholz Scott
# Andrew Buchholz" for the title "Scott Buchholz"), which breaks a few runs of words only.
COPIED_SHARE = 0.8
_LIST_MARK = re.compile(r"^\s*(?:[-*•]|\d{1,2}[.)])\s+")
_LIST_NUMBER = re.compile(r"^\s*\d{1,2}\.$")
_WORD = re.compile(r"[a-z0-9]{3,}")
_ALL_WORDS = re.compile(r"[a-z0-9]+")
_COMMON = frozenset(
    (
        "the",
        "and",
        "for",
        "was",
        "were",
        "are",
        "has",
        "had",
        "have",
        "its",
        "his",
        "her",
        "with",
        "from",
        "that",
        "this",
        "which",
        "who",
        "what",
        "when",
        "where",
        "not",
        "but",
        "they",
        "their",
        "answer",
        "yes",
    )
)
_STATED_META = (
    "title",
    "source",
    "name",
    "display",
    "code",
    "value",
    "unit",
    "reference_range",
    "flag",
    "effective_start_utc",
)
# Questions and answers are bounded upstream; this bounds the work of a pathological reply.
MAX_SENTENCES = 200


@dataclass
class _Sentence:
    text: str
    separator: str
    numbers: list[int] = field(default_factory=list)
    unknown: list[int] = field(default_factory=list)
    kept: bool = True
    reason: str | None = None
    unsupported: list[str] = field(default_factory=list)
    support: list[int] = field(default_factory=list)

    def verdict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "sentence": self.text.strip(),
            "verdict": "kept" if self.kept else "dropped",
            "reason": self.reason,
            "cites": sorted(set(self.numbers)),
        }
        if self.unsupported:
            out["unsupported"] = self.unsupported
        if self.unknown:
            out["removed_markers"] = self.unknown
        return out


@component
class GroundingChecker:
    """
    Checks a generated answer against the passages it was given, without a model, and returns what may be shown.

    - Citation markers `[n]` must name a given passage (numbered 1..n in `documents` order); others are removed.
    - Each sentence's numbers, amounts, percentages, dates and proper names must occur in a passage it cites (or
      any given passage when it cites none) or in the question, up to ordinary formatting (`docqa.checkable_facts`);
      a sentence that fails is dropped, with its reason (`unsupported_number`, `unsupported_name`,
      `wrong_citation` when only another passage states it, ...).
    - The text must give the kind of answer the question asks for (`docqa.checkable_facts.question_kind`): a
      yes/no question a yes or no in the first sentence, a Who question a name, a When question a date or year, a
      How many/much question a number, each not already in the question. Otherwise the answer is replaced
      (`not_an_answer`), since the facts of a copied passage are supported without answering anything.
    - A reply cut by the token limit (`finish_reason="length"`, or a last fragment without an ending after
      complete sentences) is cut at its last complete sentence.
    - When nothing is left, or the first sentence failed, the answer is the extracted one (the passages' best
      sentences; `answer_source="extracted"`, or "none" when nothing matches) with a note naming the reason. An
      empty, echoed or looping reply is treated the same way.
    - Without any passage the answer is that no passage the principals may read matches (`answer_source="none"`),
      unless `require_passages` is off (an answer from the model alone: markers and truncation are still checked).
    - `cited_documents` are exactly the passages the shown text cites, its markers renumbered `[1]..[k]` in that
      order; a text without markers cites the passages in which its support was found.
    Every sentence's verdict is in `verdicts` (the `grounding` step of the trace), and, when the question asks for a
    kind of answer, one more for the shown text as a whole (`answers`: the kind, `expected`: what it needed).

    Usage example:
    ```python
    checker = GroundingChecker()
    out = checker.run(question="Hotel limit?", answer="EUR 20,000 [1].", documents=[Document(content="... EUR 5,000")])
    out["answer"], out["answer_source"], out["answer_note"], out["reason"], out["verdicts"], out["cited_documents"]
    ```
    """

    step_kind = "grounding"

    def __init__(self, require_passages: bool = True) -> None:
        """
        :param require_passages: Whether an answer needs passages at all; off for a model answering alone.
        """
        self.require_passages = require_passages

    @component.output_types(
        answer=str,
        cited_documents=list[Document],
        answer_source=str,
        answer_note=str | None,
        reason=str | None,
        verdicts=list[dict],
    )
    def run(
        self,
        question: str,
        answer: str,
        documents: list[Document] | None = None,
        cited_documents: list[Document] | None = None,
        finish_reason: str | None = None,
        principals: list[str] | None = None,
        answer_source: str | None = None,
        fallback_answer: str | None = None,
        retrieved: Variadic[list[Document]] = None,  # type: ignore[assignment]
        grounded: bool | None = None,
    ) -> dict[str, Any]:
        """
        :param question: The question (its numbers and names are always allowed).
        :param answer: The generated text.
        :param documents: The passages the answer was given, in the order the prompt numbered them.
        :param cited_documents: The generator's own citations; they are the passages when `documents` is not given.
        :param finish_reason: The model's finish reason when known ("length" means cut by the token limit).
        :param principals: Who asked; named in the answer when there is no passage.
        :param answer_source: How the upstream answer was made; anything but "model" passes through unchecked.
        :param fallback_answer: A ready answer to show instead of the extracted one (a record table's description);
            with it, the shown text keeps no markers, since the result cites the table's records.
        :param retrieved: Every passage the run retrieved (each retrieval's `candidates`, every round of a loop):
            an extracted answer quotes them all, since the passages of the last generation may not hold the answer.
        :param grounded: A grader's verdict on this answer; False replaces it (`ungrounded`) unless a record table's
            description stands in for it.
        :returns: `answer`, `cited_documents`, `answer_source` ("model", "extracted", "none", "record_table"),
            `answer_note` (None when the model's text is shown whole), `reason` (why text was dropped or replaced)
            and `verdicts` (one per sentence: kept or dropped and why; then the answer-kind verdict, if any).
        """
        passages = list(documents) if documents is not None else list(cited_documents or [])
        earlier = [group for group in (retrieved or []) if group]
        if answer_source and answer_source != fallback.ANSWER_SOURCE_MODEL:
            return _out(
                answer,
                list(cited_documents or []),
                answer_source,
                None,
                None,
                [{"sentence": answer, "verdict": "kept", "reason": f"answer_source_{answer_source}"}],
            )
        if not passages and self.require_passages:
            text = no_passage_answer(principals or [])
            return _out(
                text,
                [],
                fallback.ANSWER_SOURCE_NONE,
                text,
                REASON_NO_PASSAGE,
                [{"sentence": answer, "verdict": "dropped", "reason": REASON_NO_PASSAGE}] if answer else [],
            )
        unusable = fallback.unusable_reason(question, answer, [])
        if unusable is None and not _ALL_WORDS.search(_MARKERS.sub(" ", answer).lower()):
            unusable = fallback.REASON_EMPTY  # citation markers and punctuation only ("[1]")
        if unusable is None and (recites_instructions(answer)
                                 or _copies_passage_list(answer, passages)):
            # The rest of such a reply is the same continuation of a prompt ("You are a computer programmer."), so
            # none of it is shown.
            unusable = fallback.REASON_ECHO
        if unusable is not None:
            verdicts = [{"sentence": answer, "verdict": "dropped", "reason": unusable}]
            return self._fallback(question, passages, earlier, unusable, verdicts, fallback_answer)
        sentences = split_answer(answer)
        _mark_truncated(sentences, finish_reason)
        self._check(question, sentences, passages)
        verdicts = [s.verdict() for s in sentences]
        kept = [s for s in sentences if s.kept]
        first = sentences[0]
        if not kept or not first.kept:
            return self._fallback(question, passages, earlier, first.reason or REASON_TRUNCATED, verdicts,
                                  fallback_answer)
        kind = question_kind(question) if passages else None
        if kind is not None:
            # Without passages (a model answering alone) there is nothing better to show, so no kind is required.
            answered = gives_kind(kind, question, [_LIST_MARK.sub("", s.text) for s in kept])
            verdicts.append(
                {
                    "sentence": " ".join(s.text for s in kept),
                    "verdict": "kept" if answered else "dropped",
                    "reason": None if answered else REASON_NOT_AN_ANSWER,
                    "answers": kind,
                    "expected": EXPECTED[kind],
                }
            )
            if not answered:
                return self._fallback(question, passages, earlier, REASON_NOT_AN_ANSWER, verdicts, fallback_answer)
        # An answer without markers cites the passages its support was found in; a short one may have none.
        if passages and not any(s.numbers for s in kept) and _unbacked_short_answer(
                " ".join(s.text for s in kept), question, passages):
            verdicts.append({"sentence": " ".join(s.text for s in kept), "verdict": "dropped",
                             "reason": REASON_UNSUPPORTED_ANSWER})
            return self._fallback(question, passages, earlier, REASON_UNSUPPORTED_ANSWER, verdicts, fallback_answer)
        if grounded is False and fallback_answer is None:
            verdicts.append({"sentence": " ".join(s.text for s in kept), "verdict": "dropped",
                             "reason": fallback.REASON_UNGROUNDED})
            return self._fallback(question, passages, earlier, fallback.REASON_UNGROUNDED, verdicts, None)
        text, cited = _shown(kept, passages)
        if fallback_answer is not None:
            # A record answer cites the table's records (in table order), not the prompt's numbered passages.
            text, cited = _MARKERS.sub("", text).strip(), []
        dropped = [s.reason for s in sentences if not s.kept]
        removed = any(s.unknown for s in sentences)
        reason = dropped[0] if dropped else (REASON_UNKNOWN_CITATION if removed else None)
        note = None
        if dropped:
            note = (
                f"Parts of the model's answer were removed ({', '.join(dict.fromkeys(r for r in dropped if r))}): "
                "only sentences supported by the passages are shown."
            )
        return _out(text, cited, fallback.ANSWER_SOURCE_MODEL, note, reason, verdicts)

    def _check(self, question: str, sentences: list[_Sentence], passages: list[Document]) -> None:
        asked = FactIndex.of(question)
        indexes = [FactIndex.of(_searchable(doc)) for doc in passages]
        everywhere = FactIndex()
        for index in indexes:
            everywhere.values |= index.values
            everywhere.words |= index.words
        for sentence in sentences:
            numbers = sentence.numbers
            sentence.unknown = [n for n in numbers if not 1 <= n <= len(passages)]
            sentence.numbers = [n for n in numbers if 1 <= n <= len(passages)]
            if not sentence.kept:
                continue
            if _restates_question(sentence.text, question):
                sentence.kept, sentence.reason = False, REASON_REPEATS_QUESTION
                continue
            scope = [n - 1 for n in sentence.numbers] or list(range(len(passages)))
            facts = [f for f in sentence_facts(_LIST_MARK.sub("", sentence.text)) if not asked.supports(f)]
            if passages or self.require_passages:
                for fact in facts:
                    if any(indexes[i].supports(fact) for i in scope):
                        continue
                    sentence.kept = False
                    sentence.unsupported.append(fact.text)
                    if sentence.reason is None:
                        wrong = sentence.numbers and everywhere.supports(fact)
                        sentence.reason = REASON_WRONG_CITATION if wrong else REASON_UNSUPPORTED[fact.kind]
            if sentence.kept:
                sentence.support = _support(sentence.text, facts, scope, indexes, passages)
            if sentence.unknown and sentence.kept and sentence.reason is None:
                sentence.reason = REASON_UNKNOWN_CITATION

    def _fallback(
        self,
        question: str,
        passages: list[Document],
        retrieved: list[list[Document]],
        reason: str,
        verdicts: list[dict[str, Any]],
        fallback_answer: str | None,
    ) -> dict[str, Any]:
        if fallback_answer:
            note = f"No answer from the model ({reason_text(reason)}). This is the record table's description."
            return _out(fallback_answer, [], ANSWER_SOURCE_RECORD_TABLE, note, reason, verdicts)
        # Quoted from every passage of the run when it retrieved more than this answer was given (an earlier round
        # of a loop may hold the answer); each quoted sentence cites its own passage.
        pool = fallback.passage_pool(*retrieved, passages)
        given = {doc.id for doc in passages}
        wider = any(doc.id not in given for doc in pool)
        extraction = fallback.extract_answer(question, pool if wider else passages)
        if not extraction.text:
            return _out("", [], fallback.ANSWER_SOURCE_NONE, fallback_note(reason, extracted=False), reason, verdicts)
        return _out(
            extraction.text,
            list(extraction.documents),
            fallback.ANSWER_SOURCE_EXTRACTED,
            fallback_note(reason, extracted=True),
            reason,
            verdicts,
        )

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self, require_passages=self.require_passages)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "GroundingChecker":
        return default_from_dict(cls, data)


def no_passage_answer(principals: list[str]) -> str:
    """The answer when retrieval for the caller found nothing; it says nothing of documents the caller cannot read."""
    names = sorted(set(principals)) or ["everyone"]
    who = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
    return f"No passage that {who} may read matches the question."


def reason_text(reason: str) -> str:
    """One line a user can read; the new reasons keep their code in front (`unsupported_number: ...`)."""
    if reason == REASON_NOT_AN_ANSWER:
        return f"{reason}: {_NOT_AN_ANSWER_TEXT}"
    if reason in _REASON_TEXT:
        return f"{reason}: the model's answer was not supported, {_REASON_TEXT[reason]}"
    return fallback.reason_text(reason)


def fallback_note(reason: str, *, extracted: bool) -> str:
    """The note of an answer that is not the model's: quoted sentences (`extracted`) or none."""
    if extracted:
        return (
            f"No answer from the model ({reason_text(reason)}). These sentences are quoted from the retrieved "
            "passages, not generated."
        )
    return f"No answer: {reason_text(reason)}, and no retrieved passage matches the question."


def split_answer(answer: str) -> list[_Sentence]:
    """The answer's sentences, each with the whitespace after it and the passage numbers it cites."""
    pieces: list[str] = []
    start = 0
    for match in _END.finditer(answer):
        if len(pieces) >= MAX_SENTENCES:
            break
        before = answer[start : match.start() + 1]
        if match.group(0)[0] in ".!?" and (_ABBREVIATION.search(before) or _LIST_NUMBER.match(before)):
            continue
        pieces.append(answer[start : match.end()])
        start = match.end()
    pieces.append(answer[start:])
    sentences: list[_Sentence] = []
    for piece in pieces:
        core = piece.strip()
        if not core:
            if sentences:
                sentences[-1].separator += piece
            continue
        if sentences:
            sentences[-1].separator += piece[: len(piece) - len(piece.lstrip())]
        numbers = [int(n) for group in _MARKERS.findall(core) for n in re.split(r"\s*,\s*", group)]
        sentences.append(_Sentence(text=core, separator=piece[len(piece.rstrip()) :], numbers=numbers))
    return sentences


def _mark_truncated(sentences: list[_Sentence], finish_reason: str | None) -> None:
    last = sentences[-1]
    if _TERMINAL.search(last.text):
        return
    # Without a finish reason only a fragment after complete sentences counts as cut off: a one-line answer
    # ("EUR 5,000") needs no full stop.
    if finish_reason == "length" or (finish_reason is None and len(sentences) > 1):
        last.kept, last.reason = False, REASON_TRUNCATED


def _searchable(doc: Document) -> str:
    """A passage as the facts it states: its text, its title and source, and a record's own fields (its value and
    date live in metadata; the table summary a model is shown states them)."""
    meta = doc.meta or {}
    stated = [str(meta[key]) for key in _STATED_META if meta.get(key) not in (None, "")]
    return " ".join([*stated, doc.content or ""])


def _support(
    text: str, facts: list[Fact], scope: list[int], indexes: list[FactIndex], passages: list[Document]
) -> list[int]:
    """The passages (0-based) that state all of a sentence's facts; with no fact, the one sharing most words."""
    if facts:
        return [i for i in scope if all(indexes[i].supports(f) for f in facts)]
    words = _content_words(_MARKERS.sub(" ", text))
    shared = [(len(words & _content_words(_searchable(passages[i]))), -i) for i in scope]
    best = max(shared, default=(0, 0))
    # A short answer ("Lisbon") is found by its one word; a longer one needs two in common.
    return [-best[1]] if best[0] >= min(2, len(words)) and best[0] > 0 else []


def _copies_passage_list(answer: str, passages: list[Document]) -> bool:
    """Whether the reply opens by copying out the prompt's numbered passages: a first line that starts with a
    passage marker (`[1] ...`, as the prompt lists them), runs over more than one sentence, and has at least
    `COPIED_SHARE` of its runs of words in the passages. A small model continuing its prompt does this
    (`[1] <title> <the passage, nearly word for word>`); an answer puts its marker after what it says, or quotes
    one sentence."""
    first = next((line.strip() for line in answer.splitlines() if line.strip()), "")
    if not _LEADING_MARKER.match(first) or len(split_answer(first)) < 2:
        return False
    return copied_share(_LEADING_MARKER.sub("", first), [_searchable(doc) for doc in passages]) >= COPIED_SHARE


def _unbacked_short_answer(text: str, question: str, passages: list[Document]) -> bool:
    """Whether a short answer ("mendatang") has words beside its facts and none of them occurs, up to a plural or
    tense ending, in the passages or the question; its names, numbers and dates were checked as facts already, and
    an answer saying it does not know ("unknown") claims nothing."""
    core = _MARKERS.sub(" ", text)
    if len(core.split()) > SHORT_ANSWER_WORDS or abstains(core):
        return False
    # The names, numbers and dates in it were checked against the passages as facts already.
    checked = {w for fact in sentence_facts(core) for w in _content_words(fact.text)}
    words = {fallback.stem(w) for w in _content_words(core) - checked}
    if not words:
        return False
    known = {fallback.stem(w) for w in _content_words(question)}
    for doc in passages:
        known |= {fallback.stem(w) for w in _content_words(_searchable(doc))}
    return words.isdisjoint(known)


def _restates_question(text: str, question: str) -> bool:
    """Whether a sentence is the question again ("... started when?"), which a small model writes before (or
    instead of) its answer: the question itself, or a question made only of the question's words."""
    core = _MARKERS.sub(" ", text).strip()
    words = _content_words(core)
    if not words or not words <= _content_words(question):
        return False
    # Every word in the question's order: "The limit is X." answers "Is the limit X?", it does not repeat it.
    return core.endswith("?") or _ALL_WORDS.findall(core.lower()) == _ALL_WORDS.findall(question.lower())


def _content_words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _COMMON}


def _shown(kept: list[_Sentence], passages: list[Document]) -> tuple[str, list[Document]]:
    """The kept text with valid markers renumbered in order of first citation, and the cited passages."""
    order: list[int] = []
    for sentence in kept:
        for number in sentence.numbers:
            if number not in order:
                order.append(number)

    def renumber(match: re.Match[str]) -> str:
        valid = [int(n) for n in re.split(r"\s*,\s*", match.group(1)) if int(n) in order]
        if not valid:
            return ""
        lead = match.group(0)[: len(match.group(0)) - len(match.group(0).lstrip())]
        return lead + "".join(f"[{order.index(n) + 1}]" for n in dict.fromkeys(valid))

    parts = []
    for i, sentence in enumerate(kept):
        body = _MARKERS.sub(renumber, sentence.text)
        parts.append(body + (sentence.separator or " " if i < len(kept) - 1 else ""))
    text = "".join(parts).strip()
    if order:
        return text, [passages[n - 1] for n in order]
    support = sorted({i for sentence in kept for i in sentence.support})
    return text, [passages[i] for i in support]


def _out(
    answer: str,
    cited: list[Document],
    source: str,
    note: str | None,
    reason: str | None,
    verdicts: list[dict[str, Any]],
) -> dict[str, Any]:
    return {
        "answer": answer,
        "cited_documents": cited,
        "answer_source": source,
        "answer_note": note,
        "reason": reason,
        "verdicts": verdicts,
    }
