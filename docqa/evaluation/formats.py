"""Benchmark layouts read as they are published: HotpotQA, MuSiQue and ODSum, questions and passages.

- HotpotQA: a JSON array (or JSONL) of `_id`, `question`, `answer`, `supporting_facts` ([[title, sentence], ...])
  and `context` ([[title, [sentences]], ...]); a corpus file is `{title: [sentences]}`.
- MuSiQue: objects with `id`, `question`, `answer`, `answer_aliases` and `paragraphs` (`title`,
  `paragraph_text`, `is_supporting`); a corpus file is a list of `{title, text}`.
- ODSum: `queries.jsonl`, one line per story holding a list of queries (`question_text`, `title` of the gold
  story, `responses[].response_text` as the references); stories are JSONL objects with `title` and
  `divided_document` (the story's chunks), cut here into pieces of PIECE_WORDS words.

A passage's id depends only on the layout, its title and its text (`passage_id`), so the passages of a question
file's own contexts and those of the matching corpus file get the same ids, and a question's supporting ids
name them: supporting-passage recall needs no id mapping. HotpotQA and MuSiQue question files can be the corpus
themselves (their contexts/paragraphs); an ODSum question's supporting ids are its gold story's pieces, known
once the stories are read.

Usage:
    fmt = detect_format(first_object)               # "hotpotqa", "musique", "odsum" or None
    questions = questions_of("musique", objects)
    passages = passages_of("hotpotqa", json.loads(Path("hotpotqa_corpus.json").read_text()))
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from docqa.errors import DocqaError

LAYOUTS = ("hotpotqa", "musique", "odsum")
# ODSum's chunks run to 1,000 words, beyond what an embedder reads and what a small model's context holds.
PIECE_WORDS = 200


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str


def passage_id(layout: str, title: str, text: str) -> str:
    # Same formula as the bench loaders, so passages they stored are found again under the same ids.
    return hashlib.sha256(f"{layout}\x1f{title}\x1f{text}".encode()).hexdigest()


def odsum_piece_id(title: str, chunk: int, piece: int) -> str:
    return f"odsum:{title}#{chunk}.{piece}"


def detect_format(raw: Any) -> str | None:
    """The layout of one question or corpus entry (the first of a file), or None for anything else."""
    if isinstance(raw, list) and raw and isinstance(raw[0], dict) and "question_text" in raw[0]:
        return "odsum"  # a queries.jsonl line
    if not isinstance(raw, dict):
        return None
    if "supporting_facts" in raw and "context" in raw:
        return "hotpotqa"
    if isinstance(raw.get("paragraphs"), list):
        return "musique"
    if "divided_document" in raw or "question_text" in raw:
        return "odsum"
    return None


def detect_corpus_format(raw: Any) -> str | None:
    """The layout of a whole parsed corpus file (not one line): a HotpotQA title map or a MuSiQue list."""
    if isinstance(raw, dict) and raw and all(isinstance(v, list) for v in list(raw.values())[:20]):
        return "hotpotqa"
    if isinstance(raw, list) and raw and isinstance(raw[0], dict):
        if {"title", "text"} <= raw[0].keys() and "id" not in raw[0]:
            return "musique"
        return detect_format(raw[0])
    return None


def _text(value: Any, where: str, key: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise DocqaError(f"{where}: expected a non-empty string `{key}`")
    return value


def question_fields(layout: str, raw: Any, where: str) -> list[dict[str, Any]]:
    """One entry of a question file as FlashRAG-style dicts (ODSum lines hold several queries)."""
    if layout == "odsum":
        queries = raw if isinstance(raw, list) else [raw]
        out = []
        for number, query in enumerate(queries):
            if not isinstance(query, dict):
                raise DocqaError(f"{where}: expected ODSum query objects")
            question = _text(query.get("question_text"), where, "question_text")
            title = _text(query.get("title"), where, "title").strip()
            references = [r["response_text"] for r in query.get("responses") or []
                          if isinstance(r, dict) and isinstance(r.get("response_text"), str)]
            qid = f"{title}#{query.get('question_number', number + 1)}"
            out.append({"id": qid, "question": question, "golden_answers": references, "gold_title": title})
        return out
    if not isinstance(raw, dict):
        raise DocqaError(f"{where}: expected a {layout} question object")
    if layout == "hotpotqa":
        titles = dict.fromkeys(f[0] for f in raw.get("supporting_facts") or [] if isinstance(f, list) and f)
        context = {p.title: p.id for p in _hotpot_context(raw.get("context") or [], where)}
        # A supporting title absent from the context has no text to hash: the corpus file's passage is meant.
        supporting = [context[t] for t in titles if t in context]
        return [{"id": raw.get("_id") or raw.get("id"), "question": raw.get("question"),
                 "golden_answers": _text(raw.get("answer"), where, "answer"), "supporting": supporting,
                 "supporting_titles": list(titles)}]
    if layout == "musique":
        paragraphs = raw.get("paragraphs") or []
        supporting = [passage_id("musique", p["title"], p["paragraph_text"]) for p in paragraphs
                      if isinstance(p, dict) and p.get("is_supporting") and "title" in p and "paragraph_text" in p]
        answers = [_text(raw.get("answer"), where, "answer"), *[str(a) for a in raw.get("answer_aliases") or []]]
        titles = [p["title"] for p in paragraphs if isinstance(p, dict) and p.get("is_supporting") and "title" in p]
        return [{"id": raw.get("id"), "question": raw.get("question"), "golden_answers": answers,
                 "supporting": list(dict.fromkeys(supporting)), "supporting_titles": list(dict.fromkeys(titles))}]
    raise DocqaError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")


def _hotpot_context(context: Iterable[Any], where: str) -> list[Passage]:
    passages = []
    for entry in context:
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], list)):
            raise DocqaError(f"{where}: expected HotpotQA context entries [title, [sentences]]")
        title, text = str(entry[0]), "".join(str(s) for s in entry[1])
        passages.append(Passage(passage_id("hotpotqa", title, text), title, text))
    return passages


def pieces(text: str, words: int = PIECE_WORDS) -> list[str]:
    tokens = text.split()
    return [" ".join(tokens[start:start + words]) for start in range(0, len(tokens), words)]


def passages_of(layout: str, raw: Any, where: str = "corpus") -> list[Passage]:
    """Passages of a corpus file (parsed whole), a question file's contexts, or one ODSum story object."""
    if layout == "hotpotqa":
        if isinstance(raw, dict):  # the corpus file: {title: [sentences]}
            return _hotpot_context([[t, s] for t, s in raw.items()], where)
        return [p for q in raw for p in _hotpot_context(q.get("context") or [], where)]
    if layout == "musique":
        passages = []
        for item in raw:
            if not isinstance(item, dict):
                raise DocqaError(f"{where}: expected MuSiQue objects")
            if "paragraphs" in item:  # a question file: its paragraphs
                pairs = [(p.get("title", ""), p.get("paragraph_text", "")) for p in item["paragraphs"]]
            else:
                pairs = [(item.get("title", ""), item.get("text", ""))]
            passages += [Passage(passage_id("musique", str(t), str(x)), str(t), str(x)) for t, x in pairs if x]
        return passages
    if layout == "odsum":
        passages = []
        for story in raw:
            if not isinstance(story, dict) or not isinstance(story.get("divided_document"), list):
                raise DocqaError(f"{where}: expected ODSum story objects with `title` and `divided_document`")
            title = str(story.get("title", "")).strip()
            passages += [Passage(odsum_piece_id(title, i, j), title, piece)
                         for i, chunk in enumerate(story["divided_document"])
                         for j, piece in enumerate(pieces(str(chunk)))]
        return passages
    raise DocqaError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
