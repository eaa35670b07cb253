"""Haystack metadata filters compiled once into a Python predicate over one stored record.

Semantics follow `haystack.utils.filters` (same comparison functions, same `FilterError`s), with one extension
the access control relies on: when a document's value is a list, a comparison matches if any element matches
(`==`, `in`, `>`...) and the negations hold only when no element matches (`!=`, `not in`). That is how
Elasticsearch `term`/`terms` queries treat multi-valued keyword fields, so both stores agree.

Usage:
    predicate = compile_filters({"field": "meta.access", "operator": "in", "value": ["alice", "everyone"]})
    predicate(StoredRecord(id="1", meta={"access": ["alice"]}))  # True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from haystack.dataclasses import Document
from haystack.errors import FilterError
from haystack.utils.filters import COMPARISON_OPERATORS

Predicate = Callable[["StoredRecord"], bool]

_DOCUMENT_FIELDS = frozenset(f.name for f in fields(Document))
_NEGATED = {"!=": "==", "not in": "in"}


@dataclass
class StoredRecord:
    """What a predicate sees of one document: id and meta always, other fields only when a filter names them."""

    id: str
    meta: dict[str, Any]
    extra: dict[str, Any] = field(default_factory=dict)

    def value(self, path: tuple[str, ...]) -> Any:
        root = path[0]
        current: Any
        if root == "id":
            current = self.id
        elif root == "meta":
            current = self.meta
        else:
            current = self.extra.get(root)
        for part in path[1:]:
            if not isinstance(current, dict) or part not in current:
                return None
            current = current[part]
        return current


def field_path(name: str) -> tuple[str, ...]:
    """`meta.a.b` -> ("meta", "a", "b"); a bare name that is not a Document field is a legacy meta key."""
    if "." in name:
        return tuple(name.split("."))
    if name in _DOCUMENT_FIELDS:
        return (name,)
    return ("meta", name)


def referenced_fields(filters: dict[str, Any] | None) -> set[str]:
    """Top-level Document fields a filter reads (`meta`, `id`, `content`, ...)."""
    if not filters:
        return set()
    if "field" in filters:
        return {field_path(str(filters["field"]))[0]}
    found: set[str] = set()
    for condition in filters.get("conditions", []):
        found |= referenced_fields(condition)
    return found


def compile_filters(filters: dict[str, Any]) -> Predicate:
    """Validate a filter tree eagerly and return a predicate. Raises `FilterError` on malformed filters."""
    if not isinstance(filters, dict):
        raise FilterError(f"filters must be a dictionary, got {type(filters).__name__}")
    if "field" in filters:
        return _compile_comparison(filters)
    return _compile_logic(filters)


def _require_keys(condition: dict[str, Any], *keys: str) -> None:
    for key in keys:
        if key not in condition:
            raise FilterError(f"'{key}' key missing in {condition}")


def _compile_logic(condition: dict[str, Any]) -> Predicate:
    _require_keys(condition, "operator", "conditions")
    operator = condition["operator"]
    children = [compile_filters(child) for child in condition["conditions"]]
    if operator == "AND":
        return lambda record: all(child(record) for child in children)
    if operator == "OR":
        return lambda record: any(child(record) for child in children)
    if operator == "NOT":
        return lambda record: not all(child(record) for child in children)
    raise FilterError(f"Unknown logical operator '{operator}'. Valid operators are: ['AND', 'NOT', 'OR']")


def _compile_comparison(condition: dict[str, Any]) -> Predicate:
    _require_keys(condition, "operator", "value")
    operator = condition["operator"]
    if operator not in COMPARISON_OPERATORS:
        raise FilterError(
            f"Unknown comparison operator '{operator}'. Valid operators are: {sorted(COMPARISON_OPERATORS)}"
        )
    filter_value = condition["value"]
    if operator in ("in", "not in") and not isinstance(filter_value, list):
        raise FilterError(
            f"Filter value must be a `list` when using operator 'in' or 'not in', received type '{type(filter_value)}'"
        )
    if operator in (">", ">=", "<", "<=") and isinstance(filter_value, list):
        raise FilterError(f"Filter value can't be of type {type(filter_value)} using operators '>', '>=', '<', '<='")
    path = field_path(str(condition["field"]))
    positive = COMPARISON_OPERATORS[_NEGATED.get(operator, operator)]

    whole_list_comparable = operator in ("==", "!=", "in", "not in")

    def matches(value: Any) -> bool:
        if not isinstance(value, list):
            return positive(value=value, filter_value=filter_value, strict_datetime_comparison=False)
        if whole_list_comparable and positive(value=value, filter_value=filter_value, strict_datetime_comparison=False):
            return True
        return any(positive(value=item, filter_value=filter_value, strict_datetime_comparison=False) for item in value)

    if operator in _NEGATED:
        return lambda record: not matches(record.value(path))
    return lambda record: matches(record.value(path))
