"""Short-answer scores for the checkout's bench scripts and tests: the installed `docqa.evaluation.metrics`
(exact match, token F1 and FlashRAG's containment accuracy with the HotpotQA/SQuAD normalisation, and citation
precision), re-exported so there is one implementation.

Usage:
    best_scores("the Eiffel Tower", ["Eiffel Tower", "La tour Eiffel"])  # (1.0, 1.0)
"""

from __future__ import annotations

from docqa.evaluation.metrics import (
    answer_accuracy,
    best_scores,
    citation_precision,
    exact_match,
    normalize_answer,
    token_f1,
)

__all__ = ["answer_accuracy", "best_scores", "citation_precision", "exact_match", "normalize_answer", "token_f1"]
