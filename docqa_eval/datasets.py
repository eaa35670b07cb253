"""Loaders for the shared multi-hop evaluation data (MuSiQue and HotpotQA samples in ../shared/data/multihop).

The files are read by `docqa eval`'s own readers (`docqa.evaluation.formats` and `corpus`), so bench scripts and
`docqa eval` see the same questions and passages. Passages become Haystack Documents whose id depends only on
dataset, title and text, so loading twice or writing twice never duplicates. Content is "title\\ntext" (the
title carries much of a passage's meaning).

Usage:
    questions = load_questions("musique")
    corpus = load_corpus("musique", tenant="eval", access=["everyone"])
    questions[0].supporting_ids  # ids of the passages that answer it, present in `corpus`
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from haystack import Document

from docqa.evaluation.corpus import read_corpus
from docqa.evaluation.formats import passage_id, question_fields

__all__ = ["MULTIHOP_DATASETS", "MultihopQuestion", "load_corpus", "load_questions", "passage_id", "shared_data_dir"]

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


def load_questions(dataset: Dataset, data_dir: Path | None = None) -> list[MultihopQuestion]:
    """The sample's questions with answers and supporting passages. Raises FileNotFoundError if absent."""
    fields = [f for item in _read(dataset, f"{dataset}_train.json", data_dir)
              for f in question_fields(dataset, item, f"{dataset}_train.json")]
    return [_question(dataset, f) for f in fields]


def load_corpus(
    dataset: Dataset, *, tenant: str = "default", access: Sequence[str] = ("everyone",), data_dir: Path | None = None
) -> list[Document]:
    """Every passage of the sample's corpus once, with meta title/source/dataset and the given tenant/access."""
    return read_corpus(_path(dataset, f"{dataset}_train_corpus.json", data_dir), tenant=tenant, access=access)


def _path(dataset: str, name: str, data_dir: Path | None) -> Path:
    if dataset not in MULTIHOP_DATASETS:
        raise ValueError(f"unknown dataset {dataset!r}; expected one of {MULTIHOP_DATASETS}")
    path = (data_dir or shared_data_dir()) / "multihop" / name
    if not path.is_file():
        raise FileNotFoundError(f"multi-hop data not found: {path} (expected ../shared/data beside the checkout)")
    return path


def _read(dataset: str, name: str, data_dir: Path | None) -> Any:
    return json.loads(_path(dataset, name, data_dir).read_text(encoding="utf-8"))


def _question(dataset: str, fields: dict[str, Any]) -> MultihopQuestion:
    answers = fields["golden_answers"]
    return MultihopQuestion(id=str(fields["id"]), dataset=dataset, question=fields["question"],
                            answers=(answers,) if isinstance(answers, str) else tuple(answers),
                            supporting_titles=tuple(fields["supporting_titles"]),
                            supporting_ids=tuple(fields["supporting"]))
