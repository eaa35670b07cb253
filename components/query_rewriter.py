"""Reformulates the search query after a failed grade; never returns a query that was already tried."""

from __future__ import annotations

from typing import Any

from haystack import component

from docqa.components.llm_serialization import ChatComponentSerialization
from docqa.components.prompt_templates import load_prompt, render_prompt
from docqa.llm.calls import ChatGenerator, generate_json

MAX_QUERY_CHARS = 300
QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}},
    "required": ["query"],
    "additionalProperties": False,
}


@component
class QueryRewriter(ChatComponentSerialization):
    """
    Asks for a better search query as constrained JSON. The result is trimmed to `MAX_QUERY_CHARS`; an empty,
    malformed or already-tried query yields `query=None`, so the caller can stop instead of repeating itself.

    Usage example:
    ```python
    rewriter = QueryRewriter(chat_generator=OpenAIChatGenerator(...))
    out = rewriter.run(question="...", previous_queries=["..."], feedback="not supported by the documents")
    out["query"]  # str or None
    ```
    """

    serialized_parameters = ("prompt_template", "max_tokens")

    def __init__(self, chat_generator: ChatGenerator, prompt_template: str | None = None, max_tokens: int = 96) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `planner` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `previous_queries`, `feedback`).
        :param max_tokens: Bound on the JSON reply.
        """
        if max_tokens < 8:
            raise ValueError("max_tokens must be at least 8")
        self.chat_generator = chat_generator
        self.prompt_template = prompt_template or load_prompt("atrag_rewrite")
        self.max_tokens = max_tokens

    @component.output_types(query=str | None, raw=str | None)
    def run(self, question: str, previous_queries: list[str], feedback: str = "") -> dict[str, Any]:
        """
        :param question: The user's original question.
        :param previous_queries: Queries already searched, oldest first.
        :param feedback: Why the last answer failed the grade.
        :returns: `query`, a new query or None, and `raw`, what the model proposed.
        """
        prompt = render_prompt(self.prompt_template, question=question, previous_queries=previous_queries,
                               feedback=feedback or "unknown")
        data = generate_json(self.chat_generator, prompt, QUERY_SCHEMA, name="rewrite",
                             max_tokens=self.max_tokens, purpose="rewrite_query")
        raw = data.get("query") if data else None
        if not isinstance(raw, str):
            return {"query": None, "raw": None}
        query = " ".join(raw.split())[:MAX_QUERY_CHARS]
        tried = {" ".join(q.lower().split()) for q in previous_queries}
        if not query or query.lower() in tried:
            return {"query": None, "raw": raw}
        return {"query": query, "raw": raw}
