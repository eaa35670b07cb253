"""Short-answer scores for the checkout's bench scripts and tests: the installed `docqa.evaluation.metrics`
(exact match and token F1 with the HotpotQA/SQuAD normalisation), re-exported so there is one implementation.

Usage:
    best_scores("the Eiffel Tower", ["Eiffel Tower", "La tour Eiffel"])  # (1.0, 1.0)
"""

from __future__ import annotations

from docqa.evaluation.metrics import best_scores, exact_match, normalize_answer, token_f1

__all__ = ["best_scores", "exact_match", "normalize_answer", "token_f1"]
