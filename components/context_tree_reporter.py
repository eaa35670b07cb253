"""ConTRe alone: the context tree and its passages as a strategy's result, for any generator downstream."""

from __future__ import annotations

from typing import Any

from haystack import Document, component, default_from_dict, default_to_dict

from docqa.components.context_tree import ContextTree


@component
class ContextTreeReporter:
    """
    Turns an expanded context tree into a retrieval-only result, without an LLM call.

    The `answer` is the tree as an indented outline (each accepted node's query and the numbers of its passages,
    rejected sub-questions marked with their status); `cited_documents` are all passages of the tree, deduplicated,
    in the order of their numbers.

    Usage example:
    ```python
    out = ContextTreeReporter().run(tree=expander_output["tree"])
    print(out["answer"]); out["cited_documents"]
    ```
    """

    step_kind = "report"

    @component.output_types(answer=str, cited_documents=list[Document], stop_reason=str, tree=ContextTree)
    def run(self, tree: ContextTree) -> dict[str, Any]:
        """
        :param tree: The expanded tree.
        :returns: The outline as `answer`, the passages as `cited_documents`, the tree's `stop_reason` and `tree`.
        """
        lines: list[str] = []

        def walk(node_id: str, indent: int) -> None:
            node = tree.nodes[node_id]
            numbers = "".join(f"[{n}]" for n, _ in tree.numbered(node.passage_ids))
            label = node.query or node.sub_question
            status = "" if node.accepted else f" ({node.status})"
            lines.append(f"{'  ' * indent}- {label}{status} {numbers}".rstrip())
            for child in node.children:
                walk(child, indent + 1)

        if "0" in tree.nodes:
            walk("0", 0)
        return {"answer": "\n".join(lines), "cited_documents": list(tree.documents.values()),
                "stop_reason": tree.stop_reason, "tree": tree}

    def to_dict(self) -> dict[str, Any]:
        return default_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ContextTreeReporter:
        return default_from_dict(cls, data)
