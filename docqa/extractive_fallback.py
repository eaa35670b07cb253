"""When the model gives no usable answer, quote the retrieved sentences that best match the question.

Small local models often return nothing usable: an empty reply, a reply that only repeats the prompt (dropped by
`strip_prompt_echo`), a reply stuck repeating one phrase, or an answer the grader judged unsupported by the
passages. The passages that hold the answer were usually retrieved all the same, so instead of "(no answer)" the
result carries the top sentences of those passages by BM25 overlap with the question, each with its citation, and
says plainly that they are extracted rather than generated (`PipelineResult.answer_source == "extracted"` and
`answer_note`).

A table row (a spreadsheet's or CSV's chunk is a Markdown table under its header) is quoted as one statement with
its column names, "Order: 125005; Customer: Customer 17; Amount: 6556.75", so an exact-value question about a sheet
still gets the row that answers it.

The passages come from the run's graph: every retrieval's `candidates` reach the grounding node's `retrieved`
input (a lazy variadic socket, so each round of a loop adds its own; `Pipeline.run(include_outputs_from=...)` would
keep a looping node's last visit only), all already filtered by the caller's access scope; `passage_pool` makes
one list of them.

Usage:
    fallback = extract_answer(question, passage_pool(first_round, second_round, given))
    fallback.text, fallback.documents
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from docqa.result import Step

ANSWER_SOURCE_MODEL = "model"
ANSWER_SOURCE_EXTRACTED = "extracted"
ANSWER_SOURCE_NONE = "none"

REASON_EMPTY = "empty"
REASON_ECHO = "echo"
REASON_UNGROUNDED = "ungrounded"
REASON_REPETITIVE = "repetitive"
REASON_LLM_BUDGET = "llm_budget"
# The step a strategy records when the question's LLM call budget ended its run before it answered
# (`docqa.pipelines.haystack_strategy`): the answer is then empty for that reason, not because the model said nothing.
LLM_BUDGET_STEP = "llm_budget"
_REASON_TEXT = {
    REASON_EMPTY: "the model gave no answer",
    REASON_ECHO: "the model only repeated the question or prompt",
    REASON_UNGROUNDED: "the model's answer was judged not supported by the retrieved passages",
    REASON_REPETITIVE: "the model's reply was one phrase repeated over and over",
    REASON_LLM_BUDGET: "the question's LLM call budget ran out before the model answered",
}

# A reply of at least REPETITIVE_MIN_WORDS words whose distinct word trigrams are below this share of all its
# trigrams is a small model stuck in a loop ("User datamodel\n\nUser datamodel ..."), not an answer; written prose
# repeats few trigrams (the 2,040 human summaries of ODSum-Story: lowest 0.91, mean 0.99).
REPETITIVE_MIN_WORDS = 12
REPETITIVE_MAX_DISTINCT_SHARE = 0.4
MAX_SENTENCES = 3
MAX_SENTENCE_CHARS = 400
# Sentences scoring below this share of the best one add noise rather than support.
RELATIVE_SCORE_FLOOR = 0.5
# A run retrieves tens of passages at most; the cap bounds memory for a pathological graph.
MAX_PASSAGES = 200
_K1, _B = 1.2, 0.75

_STOPWORDS = frozenset(" ".join((
    "a an and are as at be been but by can could did do does for from had has have how i if in into is it its "
    "many may me might much must my no not of on or our shall should so than that the their them then there "
    "these they this those to was we were what when where which who whom whose why will with within would you "
    "your",
)).split())
_TOKEN = re.compile(r"[a-z0-9]+")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[A-Z0-9])")
_QUESTION_LABEL = re.compile(r"^\s*question\s*:\s*", re.IGNORECASE)
_MARKUP_LINE = re.compile(r"^\s*(#{1,6}\s|[-*+]\s|\d+[.)]\s|>\s?|\|)")
_TABLE_RULE = re.compile(r"^\|(?:\s*:?-{3,}:?\s*\|)+$")
_CELL_EDGE = re.compile(r"(?<!\\)\|")

def passage_pool(*groups: Iterable[Any]) -> list[Any]:
    """The passages of `groups` once each (by id), in order of first appearance, at most MAX_PASSAGES."""
    kept: dict[str, Any] = {}
    for group in groups:
        for doc in group:
            if len(kept) >= MAX_PASSAGES:
                return list(kept.values())
            if _is_passage(doc):
                kept.setdefault(doc.id, doc)
    return list(kept.values())


def _is_passage(doc: Any) -> bool:
    # A passage says where it comes from (a stored chunk, a web result, a record table); a Document made in memory
    # to embed a text, such as ReSP's sub-question guard's earlier questions, has no metadata and is never quoted.
    return (type(doc).__name__ == "Document" and isinstance(getattr(doc, "content", None), str) and bool(doc.content)
            and bool(getattr(doc, "meta", None)))


def unusable_reason(question: str, answer: str, steps: Sequence[Step]) -> str | None:
    """Why the model's answer cannot be shown ("empty", "echo", "repetitive", "ungrounded", "llm_budget"), or None
    when usable."""
    text = _normalized(answer)
    if not text:
        if steps and steps[-1].name == LLM_BUDGET_STEP:
            return REASON_LLM_BUDGET
        # The answer generators drop replies that only repeat the prompt; a model that did reply was echoing.
        replied = any((call.get("response") or "").strip() for step in steps
                      for call in step.outputs.get("llm_calls", []) if isinstance(call, dict))
        return REASON_ECHO if replied else REASON_EMPTY
    asked = _normalized(question)
    # "Question: <the question>" is the commonest echo of a base model continuing the prompt.
    text = _normalized(_QUESTION_LABEL.sub("", answer))
    if text == asked or (len(text) >= 20 and text in asked):
        return REASON_ECHO
    if is_repetitive(answer):
        return REASON_REPETITIVE
    graded = [step.outputs["grounded"] for step in steps if isinstance(step.outputs.get("grounded"), bool)]
    if graded and graded[-1] is False:
        return REASON_UNGROUNDED
    return None


def is_repetitive(answer: str) -> bool:
    """Whether `answer` is mostly the same few words over and over (see REPETITIVE_MAX_DISTINCT_SHARE)."""
    words = answer.lower().split()
    if len(words) < REPETITIVE_MIN_WORDS:
        return False
    trigrams = list(zip(words, words[1:], words[2:], strict=False))
    return len(set(trigrams)) < REPETITIVE_MAX_DISTINCT_SHARE * len(trigrams)


def reason_text(reason: str) -> str:
    return _REASON_TEXT.get(reason, reason)


@dataclass
class Extraction:
    """The extracted answer: `text` cites `documents` as [1]..[n]; `sentences` are (sentence, document) pairs."""

    text: str
    documents: list[Any]
    sentences: list[tuple[str, Any, float]]


def extract_answer(question: str, passages: Sequence[Any], max_sentences: int = MAX_SENTENCES) -> Extraction:
    """The passages' sentences that best match the question (BM25 over sentences), at most `max_sentences`."""
    candidates = [(sentence, doc) for doc in passages
                  for sentence in [*split_sentences(_body(doc)), *table_rows(doc.content or "")]]
    query = set(_terms(question))
    if not candidates or not query:
        return Extraction("", [], [])
    scores = _bm25([_terms(sentence) for sentence, _ in candidates], query)
    ranked = sorted(range(len(candidates)), key=lambda i: (-scores[i], i))
    best = scores[ranked[0]]
    if best <= 0:
        return Extraction("", [], [])
    chosen: list[tuple[str, Any, float]] = []
    seen: set[str] = set()
    for i in ranked:
        sentence, doc = candidates[i]
        if scores[i] < best * RELATIVE_SCORE_FLOOR or len(chosen) >= max_sentences:
            break
        if sentence.lower() in seen:  # the same sentence in two overlapping chunks
            continue
        seen.add(sentence.lower())
        chosen.append((sentence, doc, scores[i]))
    documents: list[Any] = []
    lines = []
    for sentence, doc, _ in chosen:
        if doc not in documents:
            documents.append(doc)
        lines.append(f"{sentence} [{documents.index(doc) + 1}]")
    return Extraction("\n".join(lines), documents, chosen)


def _body(doc: Any) -> str:
    """The passage without its document title: converters put a Markdown heading on the first sentence's line
    ("Travel and expense policy Employees submit ..."), which would otherwise be quoted as part of it."""
    content = doc.content or ""
    title = str((doc.meta or {}).get("title") or "").strip()
    if title and content.startswith(title) and content[len(title):len(title) + 1].isspace():
        return content[len(title):].lstrip()
    return content


def split_sentences(text: str) -> list[str]:
    """Sentences of a passage: paragraphs joined across line wraps, headings and list markers dropped."""
    sentences: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [line.strip() for line in paragraph.splitlines() if line.strip()]
        # Headings and table rows are labels, not statements; list items keep their text without the marker.
        lines = [_MARKUP_LINE.sub("", line) for line in lines if not line.lstrip().startswith(("#", "|"))]
        joined = " ".join(line for line in lines if line)
        for sentence in _SENTENCE_END.split(joined):
            sentence = sentence.strip()
            if len(_terms(sentence)) >= 3:
                sentences.append(sentence[:MAX_SENTENCE_CHARS])
    return sentences


def table_rows(text: str) -> list[str]:
    """The rows of the Markdown tables in a passage, each as "Column: value; ..." (empty cells left out).

    `split_sentences` drops table lines: a row alone is a list of values, and only its header says what they are.
    """
    rows: list[str] = []
    header: list[str] | None = None
    previous: str | None = None
    for line in (raw.strip() for raw in text.splitlines()):
        if not line.startswith("|"):
            header = previous = None
            continue
        if _TABLE_RULE.match(line) and previous is not None:
            header = _cells(previous)
        elif header is not None:
            pairs = [f"{name}: {value}" if name else value
                     for name, value in zip(header, _cells(line), strict=False) if value]
            if pairs:
                rows.append("; ".join(pairs)[:MAX_SENTENCE_CHARS])
        previous = line
    return rows


def _cells(line: str) -> list[str]:
    inner = line.strip().removeprefix("|").removesuffix("|")
    return [cell.strip().replace("\\|", "|") for cell in _CELL_EDGE.split(inner)]


def _terms(text: str) -> list[str]:
    return [stem(t) for t in _TOKEN.findall(text.lower()) if t not in _STOPWORDS]


def stem(token: str) -> str:
    """The token without a plural or tense ending ("reports" -> "report", "submitted" -> "submitt")."""
    # A crude suffix strip, not a linguistic stemmer: enough to match a word across its forms.
    for suffix in ("ing", "ed", "es", "s"):
        if len(token) > len(suffix) + 3 and token.endswith(suffix):
            return token[: -len(suffix)]
    return token


def _bm25(sentences: list[list[str]], query: set[str]) -> list[float]:
    n = len(sentences)
    avg = sum(len(s) for s in sentences) / n or 1.0
    df = {term: sum(1 for s in sentences if term in s) for term in query}
    idf = {term: math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5)) for term in query}
    scores = []
    for terms in sentences:
        score = 0.0
        for term in query:
            tf = terms.count(term)
            if tf:
                score += idf[term] * tf * (_K1 + 1) / (tf + _K1 * (1 - _B + _B * len(terms) / avg))
        scores.append(score)
    return scores


def _normalized(text: str) -> str:
    return " ".join(_TOKEN.findall((text or "").lower()))
