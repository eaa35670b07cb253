"""Short-answer scores with the HotpotQA/SQuAD normalisation: exact match and token-level F1.

Usage:
    best_scores("the Eiffel Tower", ["Eiffel Tower", "La tour Eiffel"])  # (1.0, 1.0)
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower case, punctuation and articles removed, whitespace collapsed (the official evaluation scripts)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def token_f1(prediction: str, gold: str) -> float:
    pred_tokens = normalize_answer(prediction).split()
    gold_tokens = normalize_answer(gold).split()
    # HotpotQA scores yes/no/noanswer only by exact match: partial overlap with them means nothing.
    specials = {"yes", "no", "noanswer"}
    if (" ".join(pred_tokens) in specials or " ".join(gold_tokens) in specials) and pred_tokens != gold_tokens:
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
