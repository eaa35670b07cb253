"""The grounding node every generating strategy ends with, and the check that the caller can read any passage.

`attach_grounding` puts a `GroundingChecker` named `grounding` between a graph's answer and the result: it takes
the `answer` output, the generator's own `cited_documents` and, when present, its `finish_reason`,
`answer_source` and `fallback_answer`; the passages it checks against are the answering component's own
`documents` output (the passages it was given, in prompt order), else what feeds its `documents` input, else a
socket the strategy names (without any, the generator's `cited_documents` are the passages). Every retrieval's
`candidates` output (else, in a graph without any, every `documents` output holding Documents) feeds its
`retrieved` input, each round of a loop adding its own, so an extracted answer quotes every passage the run
retrieved; nodes after the answer never do. A graph that already has a `GroundingChecker` (a YAML export of a
built-in) keeps it.

`ReadablePassages` is the one-node graph a strategy runs before its own when it reads only docqa's store: when
the caller's filters match no passage at all, the strategy answers at once, with no model call.

Usage:
    name = attach_grounding(pipeline, require_passages=True, inputs={"documents": "retriever.prompt_documents"})
    store = readable_store(pipeline)     # None: some retriever reads something else; no count is run
    ReadablePassages(store).run(filters=restrict(scope, None))["readable"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import networkx as nx
from haystack import Document, Pipeline, component

from docqa.components.grounding_checker import GroundingChecker

GROUNDING_NODE = "grounding"
PRINCIPALS_SOCKET = "principals"
_PASSED_THROUGH = ("cited_documents", "finish_reason", "answer_source", "fallback_answer")


def grounding_node(pipeline: Pipeline) -> str | None:
    """The name of the graph's `GroundingChecker`, if it has one."""
    return next((name for name, instance in pipeline.walk() if isinstance(instance, GroundingChecker)), None)


def attach_grounding(pipeline: Pipeline, *, require_passages: bool = True,
                     inputs: Mapping[str, str] | None = None) -> str | None:
    """Add the grounding node fed by the graph's answer (see the module docstring); returns its name, or None
    when the graph has no unconnected `answer` output to check.

    :param inputs: `GroundingChecker` input -> "component.socket" overriding what is found (e.g. `documents`).
    """
    existing = grounding_node(pipeline)
    if existing is not None:
        return existing
    outputs = pipeline.outputs()
    owners = [name for name, sockets in outputs.items() if "answer" in sockets]
    if len(owners) != 1:
        return None  # the contract check reports a missing or doubled answer
    owner = owners[0]
    wiring = {"answer": f"{owner}.answer"}
    for socket in _PASSED_THROUGH:
        senders = [name for name, sockets in outputs.items() if socket in sockets]
        if owner in senders or len(senders) == 1:
            wiring[socket] = f"{owner if owner in senders else senders[0]}.{socket}"
    given = f"{owner}.documents" if "documents" in outputs[owner] else _documents_sender(pipeline, owner)
    if given is not None:
        wiring["documents"] = given
    wiring.update(inputs or {})
    retrieved = _retrieval_senders(pipeline, owner)
    pipeline.add_component(GROUNDING_NODE, GroundingChecker(require_passages=require_passages))
    for receiver, sender in wiring.items():
        pipeline.connect(sender, f"{GROUNDING_NODE}.{receiver}")
    for sender in retrieved:
        pipeline.connect(sender, f"{GROUNDING_NODE}.retrieved")
    return GROUNDING_NODE


def _retrieval_senders(pipeline: Pipeline, owner: str) -> list[str]:
    """The sockets whose documents the run retrieved: every `candidates` output, else every `documents` output
    holding Documents, of the nodes that can run before the answer (graph order)."""
    # Nodes only the answer leads to (not those in a loop with it) run after it.
    after = nx.descendants(pipeline.graph, owner) - nx.ancestors(pipeline.graph, owner)
    outputs = {name: sockets for name, sockets in pipeline.outputs(include_components_with_connected_outputs=True)
               .items() if name != owner and name not in after}
    found = [f"{name}.candidates" for name, sockets in outputs.items() if "candidates" in sockets]
    if found:
        return found
    return [f"{name}.documents" for name, sockets in outputs.items()
            if sockets.get("documents", {}).get("type") == list[Document]]


def _documents_sender(pipeline: Pipeline, owner: str) -> str | None:
    """The socket that feeds the answering component's `documents` input, when exactly one does."""
    senders = [f"{sender}.{data['from_socket'].name}"
               for sender, receiver, data in pipeline.graph.in_edges(owner, data=True)
               if data["to_socket"].name == "documents"]
    return senders[0] if len(senders) == 1 else None


def readable_store(pipeline: Pipeline) -> Any | None:
    """The store every retriever of the graph reads, when all of them read docqa's store (and nothing reads the web):
    only then does a count of what the caller may read there say that retrieval would find nothing."""
    leaves: list[Any] = []
    for _, instance in pipeline.walk():
        if _reads_web(instance, 0):
            return None
        leaves.extend(_retrieval_leaves(instance, 0))
    stores = [getattr(leaf, "document_store", None) for leaf in leaves]
    if not stores or not all(hasattr(store, "count_documents_by_filter") for store in stores):
        return None
    return stores[0]


def _held(value: Any) -> list[Any]:
    """The components an object holds (nested retrievers, embedders, generators ...)."""
    return [v for v in (vars(value).values() if hasattr(value, "__dict__") else ()) if hasattr(v, "__haystack_input__")]


def _retriever_like(value: Any) -> bool:
    return type(value).__name__.endswith("Retriever") or hasattr(value, "document_store")


def _retrieval_leaves(value: Any, depth: int) -> list[Any]:
    """The innermost retrievers an object reaches (a hybrid retriever's BM25 and dense retrievers, ...)."""
    if depth > 4:
        return []
    nested = [leaf for held in _held(value) for leaf in _retrieval_leaves(held, depth + 1)]
    if nested:
        return nested
    return [value] if _retriever_like(value) else []


def _reads_web(value: Any, depth: int) -> bool:
    if depth > 4:
        return False
    if "WebSearch" in type(value).__name__ or getattr(value, "web_search", None) is not None:
        return True
    return any(_reads_web(held, depth + 1) for held in _held(value))


@component
class ReadablePassages:
    """
    Whether the caller may read any passage of the store: retrieval under the caller's filters finds nothing
    otherwise, so a strategy answers at once instead of calling the model. Says nothing of other passages.

    Usage example:
    ```python
    ReadablePassages(store).run(filters=restrict(scope, None))["readable"]  # False: answer without a model
    ```
    """

    step_kind = "access"

    def __init__(self, document_store: Any) -> None:
        """
        :param document_store: docqa's document store (it counts by filter).
        """
        self.document_store = document_store

    @component.output_types(readable=bool)
    def run(self, filters: dict[str, Any]) -> dict[str, Any]:
        """
        :param filters: docqa's access filters for the caller.
        :returns: `readable`: whether at least one passage matches them.
        """
        return {"readable": self.document_store.count_documents_by_filter(filters) > 0}
