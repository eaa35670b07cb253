"""The packaged clinical vocabulary: common observation names, their LOINC codes, synonyms and adult ranges.

Loaded from `data/clinical_terms.json` (package data), so the table can be reviewed and extended without code
changes. Used by ingestion to flag values that carry no range of their own, and by `RecordQueryResolver` to
turn "HbA1c" or "blood pressure" into codes.

Usage:
    term = observation_terms()["4548-4"]
    term.name, term.synonyms, term.low, term.high, term.units
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources


@dataclass(frozen=True)
class ObservationTerm:
    code: str
    name: str
    record_type: str
    synonyms: tuple[str, ...]
    low: float | None
    high: float | None
    units: tuple[str, ...]

    @property
    def has_range(self) -> bool:
        return bool(self.units) and (self.low is not None or self.high is not None)


@cache
def observation_terms() -> dict[str, ObservationTerm]:
    """Code -> term, from the packaged table."""
    text = resources.files("docqa.components").joinpath("data", "clinical_terms.json").read_text(encoding="utf-8")
    terms = {}
    for item in json.loads(text)["observations"]:
        terms[item["code"]] = ObservationTerm(
            code=item["code"], name=item["name"], record_type=item["record_type"],
            synonyms=tuple(s.lower() for s in item.get("synonyms", [])),
            low=item.get("low"), high=item.get("high"), units=tuple(item.get("units", [])),
        )
    return terms


@cache
def synonym_codes() -> dict[str, tuple[str, ...]]:
    """Lower-case synonym -> the codes it names (one synonym may name several, e.g. "blood pressure")."""
    found: dict[str, list[str]] = {}
    for term in observation_terms().values():
        for synonym in term.synonyms:
            found.setdefault(synonym, []).append(term.code)
    return {synonym: tuple(codes) for synonym, codes in found.items()}
