"""Loaders for the shared multi-hop evaluation data (MuSiQue and HotpotQA samples in ../shared/data/multihop).

Passages become Haystack Documents whose id depends only on dataset, title and text, so loading twice or
writing twice never duplicates. Content is "title\\ntext" (the title carries much of a passage's meaning).

Usage:
    questions = load_questions("musique")
    corpus = load_corpus("musique", tenant="eval", access=["everyone"])
    questions[0].supporting_ids  # ids of the passages that answer it, present in `corpus`
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from haystack import Document

Dataset = Literal["musique", "hotpotqa"]
MULTIHOP_DATASETS: tuple[Dataset, ...] = ("musique", "hotpotqa")


def shared_data_dir() -> Path:
    """`../shared/data` next to the checkout (where CI and developers keep third-party data)."""
    return Path(__file__).resolve().parents[2] / "shared" / "data"


@dataclass(frozen=True)
class MultihopQuestion:
    id: str
    dataset: str
    question: str
    answers: tuple[str, ...]  # the gold answer first, then accepted aliases
    supporting_titles: tuple[str, ...]
    supporting_ids: tuple[str, ...]


def passage_id(dataset: str, title: str, text: str) -> str:
    return hashlib.sha256(f"{dataset}\x1f{title}\x1f{text}".encode()).hexdigest()


def load_questions(dataset: Dataset, data_dir: Path | None = None) -> list[MultihopQuestion]:
    """The sample's questions with answers and supporting passages. Raises FileNotFoundError if absent."""
    raw = _read(dataset, f"{dataset}_train.json", data_dir)
    if dataset == "musique":
        return [_musique_question(q) for q in raw]
    corpus = _read(dataset, "hotpotqa_train_corpus.json", data_dir)
    return [_hotpot_question(q, corpus) for q in raw]


def load_corpus(
    dataset: Dataset, *, tenant: str = "default", access: Sequence[str] = ("everyone",), data_dir: Path | None = None
) -> list[Document]:
    """Every passage of the sample's corpus once, with meta title/source/dataset and the given tenant/access."""
    raw = _read(dataset, f"{dataset}_train_corpus.json", data_dir)
    pairs = (
        [(p["title"], p["text"]) for p in raw] if dataset == "musique" else [(t, "".join(s)) for t, s in raw.items()]
    )
    documents: dict[str, Document] = {}
    for title, text in pairs:
        doc_id = passage_id(dataset, title, text)
        documents.setdefault(
            doc_id,
            Document(
                id=doc_id,
                content=f"{title}\n{text}",
                meta={
                    "title": title,
                    "source": f"{dataset}:{title}",
                    "dataset": dataset,
                    "tenant": tenant,
                    "access": list(access),
                },
            ),
        )
    return list(documents.values())


def _read(dataset: str, name: str, data_dir: Path | None) -> Any:
    if dataset not in MULTIHOP_DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {MULTIHOP_DATASETS}")
    path = (data_dir or shared_data_dir()) / "multihop" / name
    if not path.is_file():
        raise FileNotFoundError(f"multi-hop data not found: {path} (expected ../shared/data beside the checkout)")
    return json.loads(path.read_text(encoding="utf-8"))


def _musique_question(raw: dict[str, Any]) -> MultihopQuestion:
    supporting = [p for p in raw["paragraphs"] if p["is_supporting"]]
    return MultihopQuestion(
        id=raw["id"],
        dataset="musique",
        question=raw["question"],
        answers=(raw["answer"], *raw.get("answer_aliases", [])),
        supporting_titles=tuple(dict.fromkeys(p["title"] for p in supporting)),
        supporting_ids=tuple(dict.fromkeys(passage_id("musique", p["title"], p["paragraph_text"]) for p in supporting)),
    )


def _hotpot_question(raw: dict[str, Any], corpus: dict[str, list[str]]) -> MultihopQuestion:
    titles = tuple(dict.fromkeys(title for title, _ in raw["supporting_facts"]))
    return MultihopQuestion(
        id=raw["_id"],
        dataset="hotpotqa",
        question=raw["question"],
        answers=(raw["answer"],),
        supporting_titles=titles,
        supporting_ids=tuple(passage_id("hotpotqa", t, "".join(corpus[t])) for t in titles if t in corpus),
    )
