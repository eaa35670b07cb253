"""Reformulates the search query after a failed grade; never returns a query that was already tried."""

from __future__ import annotations

from typing import Any

from haystack import component
from haystack.dataclasses import ChatMessage

from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import PromptedLLM
from docqa.components.reply_parsers import reply_text
from docqa.llm.calls import parse_json_object

MAX_QUERY_CHARS = 300
QUERY_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS}},
    "required": ["query"],
    "additionalProperties": False,
}


@component
class NewQueryParser:
    """
    Reads the query of a `{"query": "..."}` reply, trimmed to `MAX_QUERY_CHARS`; an empty, malformed or
    already-tried query is None, so the caller can stop instead of repeating itself.

    Usage example:
    ```python
    NewQueryParser().run(replies=[ChatMessage.from_assistant('{"query": "q2"}')], previous_queries=["q1"])
    ```
    """

    @component.output_types(query=str | None, raw=str | None)
    def run(self, replies: list[ChatMessage], previous_queries: list[str]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param previous_queries: Queries already searched.
        :returns: `query`, a new query or None, and `raw`, what the model proposed (None when unreadable).
        """
        data = parse_json_object(reply_text(replies))
        raw = data.get("query") if data else None
        if not isinstance(raw, str):
            return {"query": None, "raw": None}
        query = " ".join(raw.split())[:MAX_QUERY_CHARS]
        tried = {" ".join(q.lower().split()) for q in previous_queries}
        if not query or query.lower() in tried:
            return {"query": None, "raw": raw}
        return {"query": query, "raw": raw}


@component
class QueryRewriter(PromptedLLM):
    """
    Asks for a better search query as constrained JSON: a `ChatPromptBuilder` (`question`, `previous_queries`,
    `feedback`) -> schema-constrained call -> `NewQueryParser` step.

    Usage example:
    ```python
    rewriter = QueryRewriter(chat_generator=OpenAIChatGenerator(...))
    out = rewriter.run(question="...", previous_queries=["..."], feedback="not supported by the documents")
    out["query"]  # str or None
    ```
    """

    def __init__(self, chat_generator: Any, prompt_template: str | None = None, max_tokens: int = 96) -> None:
        """
        :param chat_generator: Any Haystack chat generator (the `planner` role in docqa).
        :param prompt_template: Jinja2 template (`question`, `previous_queries`, `feedback`).
        :param max_tokens: Bound on the JSON reply.
        """
        if max_tokens < 8:
            raise ValueError("max_tokens must be at least 8")
        template = prompt_template or load_prompt("atrag_rewrite")
        PromptedLLM.__init__(
            self, chat_generator, template, NewQueryParser(),
            variables=["question", "previous_queries", "feedback"], required_variables=["question", "previous_queries"],
            outputs={"query": "query", "raw": "raw"}, max_tokens=max_tokens, output="json", schema=QUERY_SCHEMA,
            schema_name="rewrite", purpose="rewrite_query",
            init_parameters={"prompt_template": template, "max_tokens": max_tokens},
        )
