"""Conversation datasets in `docqa eval`: the file format, follow-up recall@k, exact rewrites and the method mix."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from haystack import Document

from docqa.access import AccessScope
from docqa.errors import DocqaError
from docqa.evaluation.conversations import (
    evaluate_conversations,
    format_summary,
    load_conversations,
    summarize,
    support_recall,
)
from docqa.settings import Settings

CHECKOUT = Path(__file__).resolve().parents[2]

CONVERSATION = {"id": "halcyon", "turns": [
    {"role": "user", "content": "Who leads Project Halcyon?"},
    {"role": "assistant", "content": "Dana Whitlock leads it."},
    {"role": "user", "content": "Where did that person work before?", "kind": "answer_referent",
     "standalone": "Where did Dana Whitlock work before?", "supporting": ["people/dana.md"]},
    {"role": "assistant", "content": "At Orbital Systems."},
    {"role": "user", "content": "What about Sam Okafor?", "kind": "what_about",
     "standalone": "Where did Sam Okafor work before?", "supporting": ["sam-okafor"]},
]}


def write(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "conversations.jsonl"
    path.write_text("\n".join(json.dumps(line) if not isinstance(line, str) else line for line in lines) + "\n")
    return path


def test_follow_ups_are_read_with_the_exchange_before_them(tmp_path: Path) -> None:
    cases = load_conversations(write(tmp_path, CONVERSATION))
    assert [(c.turn, c.question) for c in cases] == [(2, "Where did that person work before?"),
                                                      (4, "What about Sam Okafor?")]
    assert [m["role"] for m in cases[1].messages] == ["user", "assistant", "user", "assistant", "user"]
    assert cases[0].supporting == ("people/dana.md",)


@pytest.mark.parametrize(("line", "message"), [
    ("{not json", "not JSON"),
    ({"id": "x", "turns": []}, "non-empty `turns`"),
    ({"id": "x", "turns": [{"role": "bot", "content": "hi"}]}, "role"),
    ({"id": "x", "turns": [{"role": "user", "content": "a?"}, {"role": "user", "content": "b?"}]}, "standalone"),
    ({"id": "x", "turns": [{"role": "user", "content": "a?"},
                           {"role": "user", "content": "b?", "standalone": "b?", "supporting": "doc"}]}, "list"),
])
def test_a_malformed_conversation_is_refused_naming_its_line(tmp_path: Path, line: Any, message: str) -> None:
    with pytest.raises(DocqaError, match=message) as raised:
        load_conversations(write(tmp_path, CONVERSATION, line))
    assert ":2:" in raised.value.message


def test_supporting_passages_match_by_id_title_or_the_end_of_their_source() -> None:
    docs = [Document(id="a", content="x", meta={"source": "team/people/dana.md"}),
            Document(id="b", content="y", meta={"title": "Sam Okafor"}), Document(id="c", content="z")]
    assert support_recall(docs, ["people/dana.md", "Sam Okafor", "c"], k=3) == 1.0
    assert support_recall(docs, ["people/dana.md", "Sam Okafor", "c"], k=1) == pytest.approx(1 / 3)
    assert support_recall(docs, [], k=5) is None


class FakeRetriever:
    """Returns the passage whose text shares the most words with the query first."""

    def __init__(self, documents: list[Document], top_k: int) -> None:
        self.documents, self.top_k, self.queries = documents, top_k, []

    def run(self, query: str, filters: dict[str, Any]) -> dict[str, Any]:
        self.queries.append((query, filters))
        words = set(query.lower().strip("?").split())
        ranked = sorted(self.documents, key=lambda d: -len(words & set((d.content or "").lower().split())))
        return {"documents": ranked[: self.top_k]}


class FakeRuntime:
    def __init__(self, documents: list[Document]) -> None:
        self.settings = Settings()
        self.documents = documents
        self.made: list[FakeRetriever] = []

    def retriever(self, top_k: int) -> FakeRetriever:
        self.made.append(FakeRetriever(self.documents, top_k))
        return self.made[-1]

    def chat_generator(self, role: str) -> Any:
        raise AssertionError("the deterministic rewrite asks no model")


def test_recall_exact_rewrites_and_method_mix_are_reported(tmp_path: Path) -> None:
    documents = [Document(id="dana", content="dana whitlock worked at orbital systems before",
                          meta={"source": "/srv/docs/people/dana.md"}),
                 Document(id="sam-okafor", content="sam okafor worked at kestrel before"),
                 Document(id="halcyon", content="project halcyon is led by dana whitlock"),
                 Document(id="decoy", content="that person before")]
    runtime = FakeRuntime(documents)
    scope = AccessScope("acme", frozenset({"group:hr"}))
    results = evaluate_conversations(runtime, load_conversations(write(tmp_path, CONVERSATION)), scope, k=1)
    assert [r.rewrite for r in results] == ["Where did Dana Whitlock work before?", "Where did Sam Okafor work before?"]
    assert [r.recall for r in results] == [1.0, 1.0]
    assert runtime.made[0].queries[0][1] == scope.to_filters()  # retrieval reads as the asker, nothing more
    summary = summarize(results, k=1)
    assert summary["recall_at_1"] == 1.0 and summary["exact_rewrite_rate"] == 1.0
    assert summary["methods"] == {"referent_replaced": 1, "subject_swapped": 1}
    assert set(summary["by_kind"]) == {"answer_referent", "what_about"}
    assert "| all | 2 | 1.000 | 1.000 |" in format_summary(summary)

    # The raw follow-up, unrewritten, retrieves the wrong passage: recall and exact rate say so.
    raw = evaluate_conversations(runtime, load_conversations(write(tmp_path, CONVERSATION)), scope, k=1,
                                 rewrite=lambda messages: _Raw(messages[-1]["content"]))
    assert summarize(raw, k=1)["exact_rewrite_rate"] == 0.0
    assert summarize(raw, k=1)["recall_at_1"] < 1.0


class _Raw:
    method = "raw"

    def __init__(self, question: str) -> None:
        self.question = question


def test_the_shipped_conversation_sets_load() -> None:
    folder = CHECKOUT / "docqa_eval" / "conversations"
    cases = [c for path in sorted(folder.glob("*.jsonl")) for c in load_conversations(path)]
    conversations = {c.conversation_id for c in cases}
    assert len(conversations) >= 40
    assert all(c.supporting for c in cases)
    kinds = {c.kind for c in cases}
    assert {"answer_referent", "question_referent", "what_about", "ellipsis", "standalone", "chain"} <= kinds
