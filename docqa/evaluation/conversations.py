"""Conversation datasets: follow-up questions scored on their rewrite and on what the rewrite retrieves.

A JSONL file, one conversation a line: `id` and `turns`, oldest first, each `{"role": "user" | "assistant",
"content": ...}`. A user turn after the first is a follow-up and carries its gold `standalone` question and
`supporting`: the passages that answer it, each named by passage id, title (`meta.title`) or source (the
source id, its file name, or the path it ends with). `kind` (e.g. "answer_referent", "what_about") is optional and
only groups the report. The assistant turns are the answers the asker saw: a follow-up is rewritten against them.

Each follow-up is rewritten from the turns before it, then scored:
- exact rewrite: the rewrite equals the gold standalone question up to case, punctuation and spacing;
- recall@k: share of its supporting passages among the first k distinct passages its rewrite retrieved;
- method: how the rewrite was made (`docqa.followups`), counted over the set (the method mix).

Usage:
    cases = load_conversations(Path("conversations.jsonl"))
    results = [score_followup(c, rewrite_followup(c.messages), retrieved_docs, k=5) for c in cases]
    summary = summarize(results, k=5)   # {"followups": 46, "recall_at_k": 0.87, "exact_rewrite_rate": ...}
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from docqa.errors import DocqaError

RESULTS_FILE = "conversations.jsonl"
SUMMARY_FILE = "conversation_summary.json"


@dataclass(frozen=True)
class FollowupCase:
    """One follow-up of a conversation: the exchange up to it (it last) and its gold rewrite and passages."""

    conversation_id: str
    turn: int  # index of the follow-up among the conversation's turns
    question: str
    messages: tuple[dict[str, str], ...]
    standalone: str
    supporting: tuple[str, ...] = ()
    kind: str | None = None


@dataclass
class FollowupResult:
    conversation_id: str
    turn: int
    question: str
    rewrite: str
    gold: str
    method: str
    exact: bool
    kind: str | None = None
    recall: float | None = None
    retrieved: list[str] = field(default_factory=list)
    rejected: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_conversations(path: Path) -> list[FollowupCase]:
    """The follow-ups of a conversations JSONL file; a malformed line raises DocqaError naming it."""
    if not path.is_file():
        raise DocqaError(f"no such conversations file: {path}")
    cases: list[FollowupCase] = []
    seen: set[str] = set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            raw = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DocqaError(f"{where}: not JSON ({exc.msg})") from exc
        if not isinstance(raw, dict) or not isinstance(raw.get("turns"), list) or not raw["turns"]:
            raise DocqaError(f"{where}: expected an object with a non-empty `turns` list")
        conversation_id = str(raw.get("id") or number)
        if conversation_id in seen:
            raise DocqaError(f"{where}: duplicate conversation id {conversation_id!r}")
        seen.add(conversation_id)
        cases += _followups(conversation_id, raw["turns"], where)
    if not cases:
        raise DocqaError(f"{path}: no follow-up question (a user turn after the first) in any conversation")
    return cases


def _followups(conversation_id: str, turns: list[Any], where: str) -> list[FollowupCase]:
    messages: list[dict[str, str]] = []
    found: list[FollowupCase] = []
    users = 0
    for index, turn in enumerate(turns):
        if not isinstance(turn, dict) or turn.get("role") not in ("user", "assistant"):
            raise DocqaError(f"{where}: turn {index + 1} needs `role` user or assistant")
        content = turn.get("content")
        if not isinstance(content, str) or not content.strip():
            raise DocqaError(f"{where}: turn {index + 1} has no `content`")
        messages.append({"role": turn["role"], "content": content})
        if turn["role"] != "user":
            continue
        users += 1
        if users == 1:
            continue
        standalone = turn.get("standalone")
        if not isinstance(standalone, str) or not standalone.strip():
            raise DocqaError(f"{where}: follow-up turn {index + 1} needs its gold `standalone` question")
        supporting = turn.get("supporting", [])
        if not isinstance(supporting, list) or not all(isinstance(s, str) and s for s in supporting):
            raise DocqaError(f"{where}: turn {index + 1}: `supporting` must be a list of passage ids or names")
        found.append(FollowupCase(conversation_id, index, content, tuple(messages), standalone,
                                  tuple(supporting), turn.get("kind")))
    return found


def normalized(question: str) -> str:
    """A question compared for an exact rewrite: lower case, words only ("Dunkin' Brands's" keeps its words)."""
    return " ".join(re.findall(r"\w+", question.lower().replace("’", "'")))


def passage_names(document: Any) -> set[str]:
    """What a gold `supporting` entry may name a retrieved passage by: id, title, source and its trailing paths."""
    meta = getattr(document, "meta", None) or {}
    names = {str(getattr(document, "id", ""))}
    if meta.get("title"):
        names.add(str(meta["title"]))
    for key in ("source", "source_path"):
        source = meta.get(key)
        if source:
            parts = PurePosixPath(str(source).replace("\\", "/")).parts
            names |= {"/".join(parts[i:]) for i in range(len(parts))}
    return names - {""}


def support_recall(retrieved: Sequence[Any], supporting: Sequence[str], k: int) -> float | None:
    """Share of the supporting entries that name one of the first k distinct passages; None without any."""
    if not supporting:
        return None
    seen: list[Any] = []
    ids: set[str] = set()
    for document in retrieved:
        if document.id not in ids:
            ids.add(document.id)
            seen.append(document)
    names: set[str] = set().union(*(passage_names(d) for d in seen[:k])) if seen else set()
    return sum(1 for s in supporting if s in names) / len(supporting)


def score_followup(case: FollowupCase, rewrite: Any, retrieved: Sequence[Any] | None, k: int) -> FollowupResult:
    """One follow-up's result from its `docqa.followups.Rewrite` and the passages its rewrite retrieved."""
    return FollowupResult(
        conversation_id=case.conversation_id, turn=case.turn, question=case.question, rewrite=rewrite.question,
        gold=case.standalone, method=rewrite.method, exact=normalized(rewrite.question) == normalized(case.standalone),
        kind=case.kind, recall=None if retrieved is None else support_recall(retrieved, case.supporting, k),
        retrieved=[d.id for d in (retrieved or [])][:k], rejected=getattr(rewrite, "rejected", None),
    )


def summarize(results: Sequence[FollowupResult], k: int) -> dict[str, Any]:
    """Recall@k of the follow-ups, the exact-rewrite rate and the method mix, overall and by kind."""
    def block(items: Sequence[FollowupResult]) -> dict[str, Any]:
        recalls = [r.recall for r in items if r.recall is not None]
        return {
            "followups": len(items),
            f"recall_at_{k}": round(sum(recalls) / len(recalls), 4) if recalls else None,
            "exact_rewrite_rate": round(sum(r.exact for r in items) / len(items), 4) if items else None,
            "methods": dict(Counter(r.method for r in items).most_common()),
        }

    summary = block(results)
    summary["k"] = k
    kinds = sorted({r.kind for r in results if r.kind})
    summary["by_kind"] = {kind: block([r for r in results if r.kind == kind]) for kind in kinds}
    return summary


def format_summary(summary: dict[str, Any]) -> str:
    """The summary as a small Markdown table, overall then by kind."""
    k = summary["k"]
    lines = [f"| follow-ups | n | recall@{k} | exact rewrite | methods |", "|---|---:|---:|---:|---|"]

    def row(name: str, block: dict[str, Any]) -> str:
        recall = block[f"recall_at_{k}"]
        methods = ", ".join(f"{m} {n}" for m, n in block["methods"].items())
        return (f"| {name} | {block['followups']} | {'-' if recall is None else f'{recall:.3f}'} | "
                f"{block['exact_rewrite_rate']:.3f} | {methods} |")

    lines.append(row("all", summary))
    lines += [row(kind, block) for kind, block in summary["by_kind"].items()]
    return "\n".join(lines)


def write_results(out: Path, results: Sequence[FollowupResult], summary: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with (out / RESULTS_FILE).open("w", encoding="utf-8") as handle:
        for result in results:
            handle.write(json.dumps(result.to_dict(), ensure_ascii=False) + "\n")
    (out / SUMMARY_FILE).write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def evaluate_conversations(runtime: Any, cases: Sequence[FollowupCase], scope: Any, k: int,
                           rewrite: Any = None) -> list[FollowupResult]:
    """Rewrite each follow-up and retrieve its top k passages as `scope` (the hybrid retrieval strategies start from).

    :param rewrite: `messages -> Rewrite`; default: `docqa.followups.rewrite_with_settings` with the runtime's
        settings (so `DOCQA_CONVERSATION_REWRITE` chooses the method, as for every entry point).
    """
    from docqa.followups import rewrite_with_settings

    if rewrite is None:
        def rewrite(messages: Sequence[dict[str, str]]) -> Any:
            return rewrite_with_settings(messages, runtime.settings, runtime.chat_generator)

    retriever = runtime.retriever(top_k=k)
    filters = scope.to_filters()
    results = []
    for case in cases:
        rewritten = rewrite(case.messages)
        documents = retriever.run(query=rewritten.question, filters=filters)["documents"]
        results.append(score_followup(case, rewritten, documents, k))
    return results
