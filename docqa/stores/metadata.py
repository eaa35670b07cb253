"""Metadata aggregations of the extended DocumentStore protocol, computed over (already filtered) meta dicts.

List values count element by element, like multi-valued keyword fields in Elasticsearch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def strip_meta_prefix(field: str) -> str:
    return field[len("meta.") :] if field.startswith("meta.") else field


def _values(metas: Iterable[dict[str, Any]], field: str) -> Iterator[Any]:
    key = strip_meta_prefix(field)
    for meta in metas:
        value = meta.get(key)
        if isinstance(value, list):
            yield from (v for v in value if v is not None)
        elif value is not None:
            yield value


def _typed_key(value: Any) -> tuple[str, Any]:
    """Distinguishes 1, 1.0, "1" and True, which Python's equality would collapse."""
    if isinstance(value, (dict, list)):
        return type(value).__name__, repr(value)
    return type(value).__name__, value


def unique_values(metas: Iterable[dict[str, Any]], field: str) -> list[Any]:
    """Distinct values in a stable order: grouped by type, sorted within a type."""
    seen: dict[tuple[str, Any], Any] = {}
    for value in _values(metas, field):
        seen.setdefault(_typed_key(value), value)
    return [seen[k] for k in sorted(seen, key=lambda k: (k[0], k[1]))]


def count_unique(metas: list[dict[str, Any]], fields: list[str]) -> dict[str, int]:
    return {field: len({_typed_key(v) for v in _values(metas, field)}) for field in fields}


def fields_info(metas: Iterable[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """Meta field name -> {"type": keyword|long|double|boolean|object}, named like Elasticsearch mappings."""
    info: dict[str, dict[str, str]] = {}
    for meta in metas:
        for key, value in meta.items():
            if key not in info and value is not None:
                info[key] = {"type": _type_name(value[0] if isinstance(value, list) and value else value)}
    return info


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "keyword"
    return "object"


def min_max(metas: Iterable[dict[str, Any]], field: str) -> dict[str, Any]:
    """Numbers compare numerically; without numbers, strings compare lexicographically (ISO dates work)."""
    values = list(_values(metas, field))
    numbers = [v for v in values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    candidates: list[Any] = numbers or [v for v in values if isinstance(v, str)]
    if not candidates:
        return {"min": None, "max": None}
    return {"min": min(candidates), "max": max(candidates)}
