"""Adult reference ranges for common LOINC codes, used when a record carries no range or interpretation.

Synthea observations carry values but neither `referenceRange` nor `interpretation`, so "abnormal" questions
need a range from somewhere. These are conventional adult ranges in the units Synthea emits; the flag is only
derived for patients aged 18 or more at the time of the observation, and every derived flag says so
(`reference_source = "default_adult_table"`), because it is a screening aid, not a lab's own verdict.
"""

from __future__ import annotations

from dataclasses import dataclass


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


ADULT_RANGES: dict[str, ReferenceRange] = {
    "2339-0": ReferenceRange(70, 99, "mg/dL"),  # glucose
    "6299-2": ReferenceRange(7, 20, "mg/dL"),  # urea nitrogen
    "38483-4": ReferenceRange(0.6, 1.3, "mg/dL"),  # creatinine
    "49765-1": ReferenceRange(8.5, 10.2, "mg/dL"),  # calcium
    "2947-0": ReferenceRange(135, 145, "mmol/L"),  # sodium
    "6298-4": ReferenceRange(3.5, 5.1, "mmol/L"),  # potassium
    "2069-3": ReferenceRange(98, 107, "mmol/L"),  # chloride
    "20565-8": ReferenceRange(22, 29, "mmol/L"),  # carbon dioxide
    "2093-3": ReferenceRange(None, 199, "mg/dL"),  # total cholesterol
    "2571-8": ReferenceRange(None, 149, "mg/dL"),  # triglycerides
    "18262-6": ReferenceRange(None, 129, "mg/dL"),  # LDL cholesterol
    "2085-9": ReferenceRange(40, None, "mg/dL"),  # HDL cholesterol
    "4548-4": ReferenceRange(None, 5.6, "%"),  # hemoglobin A1c
    "6690-2": ReferenceRange(4.5, 11.0, "10*3/uL"),  # leukocytes
    "789-8": ReferenceRange(4.2, 5.9, "10*6/uL"),  # erythrocytes
    "718-7": ReferenceRange(12.0, 17.5, "g/dL"),  # hemoglobin
    "4544-3": ReferenceRange(36, 50, "%"),  # hematocrit
    "787-2": ReferenceRange(80, 100, "fL"),  # MCV
    "785-6": ReferenceRange(27, 33, "pg"),  # MCH
    "786-4": ReferenceRange(32, 36, "g/dL"),  # MCHC
    "777-3": ReferenceRange(150, 450, "10*3/uL"),  # platelets
    "33914-3": ReferenceRange(60, None, "mL/min"),  # eGFR
    "2885-2": ReferenceRange(6.0, 8.3, "g/dL"),  # total protein
    "1751-7": ReferenceRange(3.5, 5.0, "g/dL"),  # albumin
    "1975-2": ReferenceRange(0.1, 1.2, "mg/dL"),  # total bilirubin
    "6768-6": ReferenceRange(44, 147, "U/L"),  # alkaline phosphatase
    "1742-6": ReferenceRange(7, 56, "U/L"),  # ALT
    "1920-8": ReferenceRange(10, 40, "U/L"),  # AST
    "8480-6": ReferenceRange(90, 129, "mm[Hg]"),  # systolic blood pressure
    "8462-4": ReferenceRange(60, 79, "mm[Hg]"),  # diastolic blood pressure
    "8867-4": ReferenceRange(60, 100, "/min"),  # heart rate
    "9279-1": ReferenceRange(12, 20, "/min"),  # respiratory rate
    "39156-5": ReferenceRange(18.5, 24.9, "kg/m2"),  # body mass index
}


def adult_range(loinc_code: str, unit: str | None) -> ReferenceRange | None:
    """The table's range for a code, only when the record's unit is the one the range is written in."""
    candidate = ADULT_RANGES.get(loinc_code)
    if candidate is None or (unit or "") != candidate.unit:
        return None
    return candidate
