"""`docqa eval`'s scores against hand-computed values, normalisation edge cases included."""

from __future__ import annotations

import pytest

from docqa.evaluation.metrics import (
    best_scores,
    exact_match,
    normalize_answer,
    recall_at_k,
    rouge_l,
    set_precision_recall,
    short_answer_recall,
    strip_citation_markers,
    token_f1,
)
from docqa_eval import qa_metrics


@pytest.mark.parametrize(("text", "normalized"), [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  an   Apple, a day ", "apple day"),
    ("U.S.A.", "usa"),
    ("Theatre of the Absurd", "theatre of absurd"),  # "the" inside a word stays
    ("A.", ""),  # only an article: nothing left
    ("", ""),
    ("don't\tstop\n", "dont stop"),
])
def test_normalize_answer(text, normalized):
    assert normalize_answer(text) == normalized


def test_exact_match_after_normalisation():
    assert exact_match("the eiffel tower.", "Eiffel Tower") == 1.0
    assert exact_match("Eiffel", "Eiffel Tower") == 0.0
    assert exact_match("", "") == 1.0


def test_token_f1_hand_computed():
    # pred "paris capital of france" (4 tokens), gold "paris": P=1/4, R=1, F1=0.4
    assert token_f1("Paris, the capital of France", "Paris") == pytest.approx(0.4)
    # P=1, R=1/2
    assert token_f1("Eiffel", "Eiffel Tower") == pytest.approx(2 / 3)
    # repeated tokens count once per occurrence: pred "new new york" vs gold "new york": overlap 2, P=2/3, R=1
    assert token_f1("new new york", "New York") == pytest.approx(0.8)
    assert token_f1("", "Lyon") == 0.0 and token_f1("Lyon", "") == 0.0


def test_yes_no_answers_need_an_exact_match():
    assert token_f1("no way", "no") == 0.0
    assert token_f1("Yes.", "yes") == 1.0


def test_best_scores_take_the_best_alias():
    assert best_scores("NYC", ["New York City", "NYC"]) == (1.0, 1.0)
    assert best_scores("the city of new york", ["New York City"]) == (0.0, pytest.approx(2 * 0.75 * 1 / 1.75))
    assert best_scores("anything", []) == (0.0, 0.0)


def test_the_checkout_scores_are_the_installed_ones():
    assert qa_metrics.best_scores is best_scores


def test_rouge_l_hand_computed():
    # normalised: pred "cat sat on mat" (4), ref "cat was on mat" (4): LCS cat,on,mat=3 -> P=R=F=0.75
    assert rouge_l("The cat sat on the mat.", ["A cat was on a mat"]) == pytest.approx(0.75)
    # LCS is a subsequence, not a substring: "a b c d" vs "a x c y d" -> 3; P=3/4, R=3/5
    assert rouge_l("a1 b c d", ["a1 x c y d"]) == pytest.approx(2 * 0.75 * 0.6 / 1.35)
    assert rouge_l("same words", ["other", "Same words!"]) == 1.0
    assert rouge_l("", ["x"]) == 0.0 and rouge_l("x", []) == 0.0


def test_short_answer_recall_counts_answer_groups_found_whole():
    prediction = "The 2003 film was directed by Jane Roe; the remake came out in 2019."
    assert short_answer_recall(prediction, [["Jane Roe", "J. Roe"], ["2019"], ["Paris"]]) == pytest.approx(2 / 3)
    # whole tokens only: "201" is not found inside "2019"
    assert short_answer_recall(prediction, [["201"]]) == 0.0
    assert short_answer_recall(prediction, []) is None


def test_recall_at_k():
    assert recall_at_k(["d3", "d1", "d9"], ["d1", "d2"], k=2) == 0.5
    assert recall_at_k(["d3", "d1", "d9"], ["d1", "d2"], k=1) == 0.0
    # duplicates across retrieval rounds do not push gold passages out of the top k
    assert recall_at_k(["d3", "d3", "d1"], ["d1"], k=2) == 1.0
    assert recall_at_k(["d1", "d2"], ["d1", "d2"]) == 1.0
    assert recall_at_k(["d1"], []) is None


def test_record_set_precision_recall():
    assert set_precision_recall(["r1", "r2"], ["r2", "r3"]) == (0.5, 0.5)
    assert set_precision_recall(["r1", "r1", "r2"], ["r1", "r2", "r3", "r4"]) == (1.0, 0.5)
    assert set_precision_recall([], []) == (1.0, 1.0)
    assert set_precision_recall([], ["r1"]) == (0.0, 0.0)
    assert set_precision_recall(["r1"], []) == (0.0, 1.0)


@pytest.mark.parametrize(("answer", "said"), [
    ("180 euros [1].", "180 euros."),
    ("Jane Roe [1][2] in 1901 [3, 4].", "Jane Roe in 1901."),
    ("See [note] and [a1].", "See [note] and [a1]."),  # only numeric source markers go
])
def test_citation_markers_are_not_part_of_the_answer(answer, said):
    assert strip_citation_markers(answer) == said
