"""Typed readers of a model's reply: the last node of every prompted LLM step (prompt -> llm -> parser).

Model output is untrusted input: every parser returns a value for any reply (empty, malformed, echoing the
prompt, cut by the token limit) and never raises on it. Each reads `replies` (a chat generator's output) and,
where it needs it, the `prompt` the reply answers (to strip echoes of it).

Usage:
    YesNoReplyParser().run(replies=[ChatMessage.from_assistant('{"answer": "Yes"}')])["verdict"]   # "yes"
    TextReplyParser(first_line=True).run(replies=replies, prompt=prompt)["answer"]
"""

from __future__ import annotations

import re
from typing import Any

from haystack import Document, component
from haystack.dataclasses import ChatMessage

from docqa.llm.calls import parse_schema_object, parse_yes_no, strip_prompt_echo

_REFERENCE = re.compile(r"\[(\d{1,3})\]")


def reply_text(replies: list[ChatMessage] | None) -> str:
    """The first reply's text, '' when there is none."""
    reply = replies[0] if replies else None
    return (reply.text if reply is not None else None) or ""


def finish_reason_of(replies: list[ChatMessage] | None) -> str | None:
    """The first reply's finish reason ("length" when the token limit cut it), None when unknown."""
    finish = replies[0].meta.get("finish_reason") if replies else None
    return finish if isinstance(finish, str) else None


def verdict_word(verdict: bool | None) -> str:
    """A Yes/No verdict as the trace shows it: "yes", "no" or "unreadable" (None)."""
    return {True: "yes", False: "no", None: "unreadable"}[verdict]


def prompt_text(prompt: list[ChatMessage] | None) -> str:
    """The text of the prompt's messages, as the echo check compares it."""
    return "\n".join(message.text or "" for message in prompt or [])


@component
class YesNoReplyParser:
    """
    Reads a Yes/No verdict (`{"answer": "Yes"}`, a bare `"No"` or free text); unreadable is a verdict too.

    Usage example:
    ```python
    YesNoReplyParser().run(replies=[ChatMessage.from_assistant("No.")])  # {"yes": False, "verdict": "no"}
    ```
    """

    @component.output_types(yes=bool, verdict=str)
    def run(self, replies: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :returns: `yes` (True only for a readable "yes") and `verdict`: "yes", "no" or "unreadable".
        """
        verdict = parse_yes_no(reply_text(replies))
        return {"yes": verdict is True, "verdict": verdict_word(verdict)}


@component
class JsonObjectReplyParser:
    """
    Reads the JSON object of a schema-constrained reply; None unless it is an object with the schema's required
    keys, each of the schema's basic type (`string`, `boolean`, `integer`, `number`, `array`, `object`).

    Usage example:
    ```python
    parser = JsonObjectReplyParser(schema={"type": "object", "properties": {"keep": {"type": "boolean"}},
                                           "required": ["keep"]})
    parser.run(replies=[ChatMessage.from_assistant('{"keep": true}')])["data"]  # {"keep": True}
    ```
    """

    def __init__(self, schema: dict[str, Any], check_types: bool = True) -> None:
        """
        :param schema: the JSON schema the reply was constrained to (an object schema).
        :param check_types: also check each key's basic type; off, only the required keys are checked (the caller
            reads each value defensively, as `docqa.llm.calls.generate_json` does).
        """
        self.schema = schema
        self.check_types = check_types

    @component.output_types(data=dict[str, Any] | None)
    def run(self, replies: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :returns: `data`, the object, or None when the reply is not one the schema allows.
        """
        data = parse_schema_object(reply_text(replies), self.schema)
        return {"data": data if data is not None and (not self.check_types or _fits(data, self.schema)) else None}


_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "string": str, "boolean": bool, "integer": int, "number": (int, float), "array": list, "object": dict,
}


def _fits(data: dict[str, Any], schema: dict[str, Any]) -> bool:
    properties = schema.get("properties", {})
    for key in schema.get("required", []):
        if key not in data:
            return False
    for key, value in data.items():
        expected = _JSON_TYPES.get(str(properties.get(key, {}).get("type")))
        if expected is None:
            continue
        # JSON's booleans are not its integers or numbers.
        if not isinstance(value, expected) or (isinstance(value, bool) and expected is not bool):
            return False
    return True


@component
class TextReplyParser:
    """
    Reads a free-text answer: without lines echoing the prompt, "Question:" continuations and "Answer:" labels;
    with `first_line`, only its first line (a short answer's scoring and its reader want the answer only).

    Usage example:
    ```python
    TextReplyParser(first_line=True).run(replies=replies, prompt=prompt)  # {"answer": ..., "finish_reason": ...}
    ```
    """

    def __init__(self, first_line: bool = False) -> None:
        """:param first_line: keep the first non-empty line only."""
        self.first_line = first_line

    @component.output_types(answer=str, finish_reason=str | None)
    def run(self, replies: list[ChatMessage], prompt: list[ChatMessage]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param prompt: the messages the reply answers.
        :returns: `answer` ('' when the model only repeated the prompt) and the reply's `finish_reason`.
        """
        answer = strip_prompt_echo(reply_text(replies).strip(), prompt_text(prompt))
        finish_reason = finish_reason_of(replies)
        if self.first_line:
            lines = answer.splitlines()
            # A limit that cut a later line did not cut the first.
            finish_reason = finish_reason if len(lines) <= 1 else "stop"
            answer = lines[0] if lines else ""
        return {"answer": answer, "finish_reason": finish_reason}


@component
class CitedReplyParser:
    """
    Reads an answer over numbered documents and the documents it cites by `[n]`.

    When the model cites nothing, the documents it was given are returned with `citation_mode="context"`,
    because the answer was generated from exactly those (small models rarely write references).

    Usage example:
    ```python
    out = CitedReplyParser().run(replies=replies, prompt=prompt, documents=docs)
    out["answer"], out["cited_documents"], out["citation_mode"]
    ```
    """

    @component.output_types(answer=str, cited_documents=list[Document], citation_mode=str, finish_reason=str | None)
    def run(self, replies: list[ChatMessage], prompt: list[ChatMessage], documents: list[Document]) -> dict[str, Any]:
        """
        :param replies: the model's replies; the first is read.
        :param prompt: the messages the reply answers.
        :param documents: the documents, in the order the prompt numbers them.
        :returns: `answer`, `cited_documents`, `citation_mode` ("explicit", "context" or "none") and the reply's
            `finish_reason`.
        """
        answer = strip_prompt_echo(reply_text(replies).strip(), prompt_text(prompt))
        cited = referenced_documents(answer, documents)
        if cited:
            mode = "explicit"
        elif documents and answer:
            cited, mode = list(documents), "context"
        else:
            mode = "none"
        return {"answer": answer, "cited_documents": cited, "citation_mode": mode,
                "finish_reason": finish_reason_of(replies)}


def referenced_documents(answer: str, documents: list[Document]) -> list[Document]:
    """The documents `answer` refers to by `[n]` (1-based), in the order first referred to."""
    seen: list[Document] = []
    for match in _REFERENCE.finditer(answer):
        number = int(match.group(1))
        if 1 <= number <= len(documents) and documents[number - 1] not in seen:
            seen.append(documents[number - 1])
    return seen
