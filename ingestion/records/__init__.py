"""Longitudinal patient records (FHIR R4 bundles, Synthea CSV) as one Document per clinical record."""

from docqa.ingestion.records.fhir import parse_fhir_bundle, read_fhir_bundle, read_fhir_bundle_boxed
from docqa.ingestion.records.patient_writer import group_by_patient, patient_filters, write_patient_records
from docqa.ingestion.records.synthea_csv import parse_synthea_csv_dir

__all__ = [
    "group_by_patient",
    "parse_fhir_bundle",
    "parse_synthea_csv_dir",
    "patient_filters",
    "read_fhir_bundle",
    "read_fhir_bundle_boxed",
    "write_patient_records",
]
