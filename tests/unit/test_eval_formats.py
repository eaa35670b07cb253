"""HotpotQA, MuSiQue and ODSum questions and passages read in their own layouts (hand-written fixtures)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from docqa.errors import DocqaError
from docqa.evaluation.corpus import read_corpus
from docqa.evaluation.datasets import load_dataset, with_story_support
from docqa.evaluation.formats import passage_id, pieces

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "eval"


def _by_title(docs):
    return {d.meta["title"]: d for d in docs}


def test_hotpotqa_questions_name_their_supporting_context_passages():
    questions = load_dataset(FIXTURES / "hotpotqa_dev.json")
    assert [q.id for q in questions] == ["h1", "h2"]
    first = questions[0]
    assert first.answers == ("Amsterdam",)
    night_watch = passage_id("hotpotqa", "The Night Watch",
                             "The Night Watch is a painting by Rembrandt. It hangs in the Rijksmuseum.")
    rijks = passage_id("hotpotqa", "Rijksmuseum", "The Rijksmuseum is a museum in Amsterdam.")
    assert first.supporting_ids == (night_watch, rijks)  # the Louvre distractor is not supporting


@pytest.mark.parametrize("corpus", ["hotpotqa_corpus.json", "hotpotqa_dev.json"])
def test_hotpotqa_corpus_file_or_the_question_contexts_hold_the_supporting_ids(corpus):
    docs = read_corpus(FIXTURES / corpus, tenant="acme", access=["group:eval"])
    titles = _by_title(docs)
    assert sorted(titles) == ["Louvre", "Rijksmuseum", "The Night Watch"]  # each passage once
    assert titles["Rijksmuseum"].content == "Rijksmuseum\nThe Rijksmuseum is a museum in Amsterdam."
    assert titles["Louvre"].meta["tenant"] == "acme" and titles["Louvre"].meta["access"] == ["group:eval"]
    ids = {d.id for d in docs}
    for question in load_dataset(FIXTURES / "hotpotqa_dev.json"):
        assert set(question.supporting_ids) <= ids


def test_musique_jsonl_questions_with_aliases_and_supporting_paragraphs():
    (question,) = load_dataset(FIXTURES / "musique_dev.jsonl")
    assert question.id == "2hop__1_2"
    assert question.answers == ("Germany", "Holy Roman Empire")
    corpus = _by_title(read_corpus(FIXTURES / "musique_corpus.json", tenant="acme"))
    assert question.supporting_ids == (corpus["Zadok the Priest"].id, corpus["George Frideric Handel"].id)
    # The question file's own paragraphs are the same passages under the same ids.
    own = read_corpus(FIXTURES / "musique_dev.jsonl", tenant="acme")
    assert {d.id for d in own} == {d.id for d in corpus.values()}


def test_odsum_queries_are_long_form_with_the_gold_story_pieces_as_support():
    questions = load_dataset(FIXTURES / "odsum_queries.jsonl")
    assert [q.question for q in questions] == ["What happens to the lighthouse keeper?", "Who visits the keeper?"]
    assert questions[0].answers == ("The keeper stays through the storm.", "He keeps the light burning.")
    assert questions[0].gold_title == "The Keeper"  # the trailing space of the published title is dropped
    assert questions[0].supporting_ids == ()  # unknown until the stories are read
    stories = read_corpus(FIXTURES / "odsum_stories.jsonl", tenant="acme")
    assert len(stories) == 3
    supported = with_story_support(questions, stories)
    keeper = sorted(d.id for d in stories if d.meta["title"] == "The Keeper")
    assert [sorted(q.supporting_ids) for q in supported] == [keeper, keeper]


def test_long_odsum_chunks_are_cut_into_pieces():
    text = " ".join(f"w{i}" for i in range(450))
    assert [len(p.split()) for p in pieces(text, 200)] == [200, 200, 50]


def test_format_can_be_forced_and_a_wrong_one_fails_with_the_location(tmp_path):
    flashrag = tmp_path / "q.jsonl"
    flashrag.write_text(json.dumps({"question": "Who?", "golden_answers": ["Ann"]}) + "\n")
    with pytest.raises(DocqaError, match=r"q\.jsonl:1"):
        load_dataset(flashrag, "musique")
    with pytest.raises(DocqaError, match="unknown dataset format"):
        load_dataset(flashrag, "squad")
    assert load_dataset(flashrag, "flashrag")[0].answers == ("Ann",)
    assert [q.id for q in load_dataset(FIXTURES / "hotpotqa_dev.json", "hotpotqa")] == ["h1", "h2"]
