"""ConTReGen's context tree: each node is a query with the passages judged relevant to the original question.

The tree expander builds it top-down; the synthesizer fills in the summaries bottom-up. Passages are held once
per tree (`documents`, in the order they were first kept) and numbered `[1]..[n]` in that order in every
prompt, so a citation means the same passage wherever in the tree it was written.

Usage:
    tree = ContextTree(question="How does the war change Noork?")
    root = tree.add_node(parent=None, sub_question=tree.question)
    tree.keep(root, documents)
    tree.number_of(documents[0].id)  # 1
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

from haystack import Document

# A node's status: how far it got, and why it stopped there.
ROOT = "root"
ACCEPTED = "accepted"  # needed, and at least one new relevant passage
REJECTED_NOT_NEEDED = "rejected_not_needed"  # verification (i): not needed for its parent
REJECTED_UNREADABLE = "rejected_unreadable"  # verification (i) could not be read
REJECTED_NO_RELEVANT = "rejected_no_relevant_passages"  # verification (ii) kept nothing new
SKIPPED_BUDGET = "skipped_budget"  # proposed, but the LLM call budget ended the expansion first
REJECTED_STATUSES = (REJECTED_NOT_NEEDED, REJECTED_UNREADABLE, REJECTED_NO_RELEVANT, SKIPPED_BUDGET)

STOP_TREE_COMPLETE = "tree_complete"  # expanded as far as depth, breadth and the verdicts allowed
STOP_LLM_BUDGET = "llm_budget"  # the call budget stopped the expansion (or the synthesis) early
STOP_NO_PASSAGES = "no_passages"  # the question itself retrieved nothing the caller may read


@dataclass
class TreeNode:
    """One sub-question of the tree (the root holds the question itself)."""

    id: str
    parent: str | None
    depth: int
    sub_question: str
    query: str = ""
    status: str = ACCEPTED
    # Verification (i) verdict ("yes", "no", "unreadable") and the plan's outcome ("ok", "malformed", ...).
    needed: str | None = None
    plan: str | None = None
    passage_ids: list[str] = field(default_factory=list)
    # Retrieved but not kept: `{"id", "reason"}` ("judged irrelevant", "already in the tree", ...).
    dropped: list[dict[str, Any]] = field(default_factory=list)
    children: list[str] = field(default_factory=list)
    summary: str = ""
    summary_mode: str | None = None  # "llm", "extractive" (budget), "none"
    step: int | None = None  # the trace step of this node's expansion

    @property
    def accepted(self) -> bool:
        return self.status in (ROOT, ACCEPTED)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "parent": self.parent, "depth": self.depth, "sub_question": self.sub_question,
            "query": self.query, "status": self.status, "needed": self.needed, "plan": self.plan,
            "passage_ids": list(self.passage_ids), "dropped": list(self.dropped), "children": list(self.children),
            "summary": self.summary, "summary_mode": self.summary_mode, "step": self.step,
        }


@dataclass
class ContextTree:
    """The whole tree; thread-safe for the expander's concurrent branches."""

    question: str
    nodes: dict[str, TreeNode] = field(default_factory=dict)
    documents: dict[str, Document] = field(default_factory=dict)
    stop_reason: str = STOP_TREE_COMPLETE
    llm_calls: dict[str, int] = field(default_factory=dict)  # by purpose: "plan", "verify", "relevance", ...
    budget: int | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __deepcopy__(self, memo: dict[int, Any]) -> ContextTree:
        # Haystack deep-copies what one component hands another; a lock cannot be copied, so make a new one.
        with self._lock:
            return ContextTree(question=self.question, nodes=copy.deepcopy(self.nodes, memo),
                               documents=dict(self.documents), stop_reason=self.stop_reason,
                               llm_calls=dict(self.llm_calls), budget=self.budget)

    @property
    def root(self) -> TreeNode:
        return self.nodes["0"]

    def add_node(self, parent: TreeNode | None, sub_question: str) -> TreeNode:
        with self._lock:
            if parent is None:
                node = TreeNode(id="0", parent=None, depth=0, sub_question=sub_question, query=sub_question,
                                status=ROOT)
            else:
                node = TreeNode(id=f"{parent.id}.{len(parent.children) + 1}", parent=parent.id,
                                depth=parent.depth + 1, sub_question=sub_question)
                parent.children.append(node.id)
            self.nodes[node.id] = node
            return node

    def new_documents(self, documents: list[Document]) -> tuple[list[Document], list[Document]]:
        """(`documents` not yet in the tree, those already in it), each without repeats, in order."""
        with self._lock:
            seen: set[str] = set()
            new, known = [], []
            for doc in documents:
                if doc.id in seen:
                    continue
                seen.add(doc.id)
                (known if doc.id in self.documents else new).append(doc)
            return new, known

    def keep(self, node: TreeNode, documents: list[Document]) -> None:
        """Attach `documents` to `node`; each passage is stored once for the whole tree."""
        with self._lock:
            for doc in documents:
                self.documents.setdefault(doc.id, doc)
                if doc.id not in node.passage_ids:
                    node.passage_ids.append(doc.id)

    def count_call(self, purpose: str) -> None:
        with self._lock:
            self.llm_calls[purpose] = self.llm_calls.get(purpose, 0) + 1

    def number_of(self, doc_id: str) -> int:
        """The 1-based citation number of a passage (its position in `documents`)."""
        return list(self.documents).index(doc_id) + 1

    def numbered(self, doc_ids: list[str]) -> list[tuple[int, Document]]:
        order = {doc_id: position for position, doc_id in enumerate(self.documents, start=1)}
        return [(order[doc_id], self.documents[doc_id]) for doc_id in doc_ids if doc_id in order]

    def accepted_children(self, node: TreeNode) -> list[TreeNode]:
        return [self.nodes[child] for child in node.children if self.nodes[child].accepted]

    def accepted_nodes(self) -> list[TreeNode]:
        return [node for node in self.nodes.values() if node.accepted]

    def to_dict(self) -> dict[str, Any]:
        """The tree for the trace: nodes with parent links, passages by citation number, calls, stop reason."""
        return {
            "question": self.question,
            "stop_reason": self.stop_reason,
            "budget": self.budget,
            "llm_calls": dict(self.llm_calls),
            "llm_calls_total": sum(self.llm_calls.values()),
            "nodes": [node.to_dict() for node in self.nodes.values()],
            "passages": [
                {"number": number, "id": doc.id, "source": (doc.meta or {}).get("source") or (doc.meta or {}).get(
                    "title"), "snippet": (doc.content or "")[:200]}
                for number, doc in enumerate(self.documents.values(), start=1)
            ],
        }
