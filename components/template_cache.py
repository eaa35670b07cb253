"""Jinja templates of a graph node compiled once instead of on every run.

`ChatPromptBuilder` and `ConditionalRouter` compile their Jinja templates (a prompt; a route's condition and
outputs) again on every `run`: with a scripted model that was about a tenth of a strategy's orchestration time, and
AT-RAG's routers run on every round. A node's templates are fixed when it is built (a template passed at run time
is compiled on first use and kept too, at most `MAX_TEMPLATES`), and a compiled Jinja template renders safely from
several threads. Serialization is unchanged: the cache lives on the node's Jinja environment, not in its settings.

Usage:
    router = compiling_once(ConditionalRouter(routes))
    builder = compiling_once(ChatPromptBuilder(template=[ChatMessage.from_user("Q: {{ q }}")]))
"""

from __future__ import annotations

from functools import lru_cache
from typing import TypeVar

T = TypeVar("T")

MAX_TEMPLATES = 16


def compiling_once(node: T) -> T:
    """`node`, its Jinja environment's `from_string` cached by template text (a node without one is unchanged);
    for a `SuperComponent`, every node of its inner graph, at any depth."""
    environment = getattr(node, "_env", None)
    if environment is not None and not hasattr(environment.from_string, "cache_info"):
        environment.from_string = lru_cache(maxsize=MAX_TEMPLATES)(environment.from_string)
    inner = getattr(node, "pipeline", None)
    if inner is not None and callable(getattr(inner, "walk", None)):
        for _, child in inner.walk():
            compiling_once(child)
    return node
