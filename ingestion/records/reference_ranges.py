"""Adult reference ranges for common LOINC codes (packaged data), used when a record carries no range or interpretation.

Synthea observations carry values but neither `referenceRange` nor `interpretation`, so "abnormal" questions
need a range from somewhere. These are conventional adult ranges in the units Synthea emits; the flag is only
derived for patients aged 18 or more at the time of the observation, and every derived flag says so
(`reference_source = "default_adult_table"`), because it is a screening aid, not a lab's own verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from docqa.components.clinical_terms import observation_terms


@dataclass(frozen=True)
class ReferenceRange:
    low: float | None
    high: float | None
    unit: str

    def text(self) -> str:
        if self.low is not None and self.high is not None:
            return f"{self.low:g}-{self.high:g} {self.unit}"
        if self.high is not None:
            return f"< {self.high:g} {self.unit}"
        return f">= {self.low:g} {self.unit}"

    def interpret(self, value: float) -> str:
        """'L', 'H' or 'N' (HL7 v3 ObservationInterpretation codes)."""
        if self.low is not None and value < self.low:
            return "L"
        if self.high is not None and value > self.high:
            return "H"
        return "N"


def _packaged_ranges() -> dict[str, tuple[ReferenceRange, ...]]:
    ranges: dict[str, tuple[ReferenceRange, ...]] = {}
    for code, term in observation_terms().items():
        if term.has_range:
            ranges[code] = tuple(ReferenceRange(term.low, term.high, unit) for unit in term.units)
    return ranges


# Code -> its range in each unit the table knows (package data: docqa/components/data/clinical_terms.json).
ADULT_RANGES: dict[str, tuple[ReferenceRange, ...]] = _packaged_ranges()


def adult_range(loinc_code: str, unit: str | None) -> ReferenceRange | None:
    """The table's range for a code, only when the record's unit is one the range is written in."""
    return next((r for r in ADULT_RANGES.get(loinc_code, ()) if r.unit == (unit or "")), None)
