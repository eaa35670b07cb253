"""Short-answer scoring used by the multi-hop evaluation (HotpotQA/SQuAD normalisation)."""

from __future__ import annotations

import pytest

from docqa_eval.qa_metrics import best_scores, exact_match, normalize_answer, token_f1


@pytest.mark.parametrize(("text", "normalized"), [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  an   Apple, a day ", "apple day"),
    ("U.S.A.", "usa"),
])
def test_normalize_answer(text: str, normalized: str) -> None:
    assert normalize_answer(text) == normalized


def test_exact_match_ignores_case_articles_and_punctuation() -> None:
    assert exact_match("the eiffel tower.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0


def test_token_f1_counts_overlap() -> None:
    assert token_f1("Eiffel", "Eiffel Tower") == pytest.approx(2 * 1.0 * 0.5 / 1.5)
    assert token_f1("Paris France", "Lyon") == 0.0
    assert token_f1("", "Lyon") == 0.0


def test_yes_no_answers_need_an_exact_match() -> None:
    assert token_f1("no way", "no") == 0.0
    assert token_f1("yes", "yes") == 1.0


def test_best_scores_take_the_best_alias() -> None:
    assert best_scores("NYC", ["New York City", "NYC"]) == (1.0, 1.0)
    assert best_scores("anything", []) == (0.0, 0.0)
