"""Answer and retrieval scores for `docqa eval`, all pure functions over strings and ids.

Short answers: exact match and token F1 with the SQuAD/HotpotQA normalisation (lower case, punctuation and
articles removed, whitespace collapsed), each the best over the accepted answers, and accuracy as FlashRAG reports
it (`acc`: an accepted answer contained in the answer). Long answers: ROUGE-L F-measure (longest common token
subsequence) and ASQA-style short-answer recall. Retrieval: supporting-passage recall@k; citations: the share of
cited passages that are supporting. Record questions: precision and recall of the returned record set.

Usage:
    best_scores("the Eiffel Tower", ["Eiffel Tower", "La tour Eiffel"])  # (1.0, 1.0)
    answer_accuracy("It is the Eiffel Tower.", ["Eiffel Tower"])        # 1.0
    citation_precision(["d1", "d7"], ["d1", "d2"])                       # 0.5
    rouge_l("the cat sat on the mat", ["a cat sat on a mat"])            # 1.0 after normalisation
    recall_at_k(["d3", "d1", "d9"], ["d1", "d2"], k=2)                   # 0.5
    set_precision_recall(["r1", "r2"], ["r2", "r3"])                     # (0.5, 0.5)
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable, Sequence

_CITATION_MARKERS = re.compile(r"\s*\[\d+(?:\s*[,;-]\s*\d+)*\]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)
# HotpotQA scores these only by exact match: partial overlap with them means nothing.
_SPECIAL_ANSWERS = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str) -> str:
    """Lower case, punctuation and articles removed, whitespace collapsed (the official evaluation scripts)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def strip_citation_markers(text: str) -> str:
    """An answer without its `[1]`, `[2, 3]` source markers, which are not part of what it says."""
    return _CITATION_MARKERS.sub("", text).strip()


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    if (" ".join(pred_tokens) in _SPECIAL_ANSWERS or " ".join(gold_tokens) in _SPECIAL_ANSWERS) \
            and pred_tokens != gold_tokens:
        return 0.0
    common = Counter(pred_tokens) & Counter(gold_tokens)
    overlap = sum(common.values())
    if overlap == 0:
        return 0.0
    precision = overlap / len(pred_tokens)
    recall = overlap / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def best_scores(prediction: str, answers: Sequence[str]) -> tuple[float, float]:
    """(EM, F1), each the best over the gold answer and its accepted aliases; (0, 0) without answers."""
    if not answers:
        return 0.0, 0.0
    return max(exact_match(prediction, a) for a in answers), max(token_f1(prediction, a) for a in answers)


def answer_accuracy(prediction: str, answers: Sequence[str]) -> float:
    """FlashRAG's `acc`: 1.0 when a normalised accepted answer occurs in the normalised prediction, else 0.0.

    Containment, not word match, exactly as FlashRAG computes it; an answer normalised to nothing ("the") never
    counts, or every prediction would contain it.
    """
    said = normalize_answer(prediction)
    golds = (normalize_answer(answer) for answer in answers)
    return float(any(gold and gold in said for gold in golds))


def citation_precision(cited_ids: Iterable[str], supporting_ids: Iterable[str]) -> float | None:
    """Share of the distinct cited passages that are supporting ones; None when the question names no supporting
    passage or the answer cites none (nothing to be precise about)."""
    gold = set(supporting_ids)
    cited = set(cited_ids)
    if not gold or not cited:
        return None
    return len(cited & gold) / len(cited)


def _lcs_length(a: Sequence[str], b: Sequence[str]) -> int:
    # One row of the dynamic programme at a time: answers can be long-form paragraphs.
    previous = [0] * (len(b) + 1)
    for token in a:
        current = [0]
        for j, other in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if token == other else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


def rouge_l(prediction: str, references: Sequence[str]) -> float:
    """ROUGE-L F1 over normalised tokens, the best over the references; 0 when either side is empty."""
    pred = normalize_answer(prediction).split()
    best = 0.0
    for reference in references:
        ref = normalize_answer(reference).split()
        lcs = _lcs_length(pred, ref) if pred and ref else 0
        if lcs:
            precision, recall = lcs / len(pred), lcs / len(ref)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def short_answer_recall(prediction: str, short_answers: Sequence[Sequence[str]]) -> float | None:
    """ASQA's STR-EM: the share of questions' short answers (each with aliases) found in the long prediction.

    :param short_answers: one alias list per disambiguated short answer.
    :returns: None when there are no short answers to look for.
    """
    groups = [g for g in short_answers if g]
    if not groups:
        return None
    text = f" {normalize_answer(prediction)} "
    found = sum(any(f" {normalize_answer(alias)} " in text for alias in group if normalize_answer(alias))
                for group in groups)
    return found / len(groups)


def recall_at_k(retrieved_ids: Sequence[str], supporting_ids: Iterable[str], k: int | None = None) -> float | None:
    """Share of supporting passages among the first k retrieved (all with k=None); None without supporting ids."""
    gold = set(supporting_ids)
    if not gold:
        return None
    ranked = list(dict.fromkeys(retrieved_ids))
    return len(gold & set(ranked if k is None else ranked[:k])) / len(gold)


def set_precision_recall(returned: Iterable[str], expected: Iterable[str]) -> tuple[float, float]:
    """(precision, recall) of a returned record set; an empty returned set has precision 1 only if none expected."""
    got, want = set(returned), set(expected)
    hits = len(got & want)
    precision = hits / len(got) if got else float(not want)
    recall = hits / len(want) if want else 1.0
    return precision, recall
