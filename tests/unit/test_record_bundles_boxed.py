"""Uploaded patient-record bundles are parsed in the conversion box: the same records and errors as in process,
and a bundle whose parse outgrows the box's memory limit fails with that limit instead of growing the worker."""

from __future__ import annotations

import copy
import json

import pytest

from docqa.conversion.conversion_box import ConversionLimits
from docqa.errors import FileTooLargeError, UnreadableFileError
from docqa.ingestion.records import read_fhir_bundle, read_fhir_bundle_boxed
from tests.unit.test_records_upload_errors import bundle

ACCESS = ["group:care"]


def big_bundle(copies: int) -> bytes:
    """The sample bundle's records repeated `copies` times, each copy under its own ids."""
    data = bundle()
    patient = [e for e in data["entry"] if e["resource"]["resourceType"] == "Patient"]
    others = [e for e in data["entry"] if e["resource"]["resourceType"] != "Patient"]
    entries = list(patient)
    for n in range(copies):
        for entry in others:
            copied = copy.deepcopy(entry)
            copied["resource"]["id"] = f"{copied['resource']['id']}-{n}"
            entries.append(copied)
    return json.dumps({**data, "entry": entries}).encode()


def test_a_boxed_parse_gives_the_records_of_the_parse_in_process():
    raw = json.dumps(bundle()).encode()
    boxed = read_fhir_bundle_boxed(raw, name="p1.json", tenant="acme", access=ACCESS, limits=ConversionLimits())
    direct = read_fhir_bundle(raw, name="p1.json", tenant="acme", access=ACCESS)
    assert [(d.id, d.content, d.meta) for d in boxed] == [(d.id, d.content, d.meta) for d in direct]


def test_a_boxed_parse_raises_the_same_errors():
    with pytest.raises(UnreadableFileError, match=r"^p1\.json: not a FHIR Bundle$"):
        read_fhir_bundle_boxed(b"[]", name="p1.json", tenant="acme", access=ACCESS, limits=ConversionLimits())


def test_a_bundle_past_the_memory_limit_fails_with_it():
    raw = big_bundle(4000)  # about 40,000 records: far more than 64 MB of parsed objects
    with pytest.raises(FileTooLargeError, match=r"^big\.json: conversion used more than 64 MB"):
        read_fhir_bundle_boxed(
            raw, name="big.json", tenant="acme", access=ACCESS, limits=ConversionLimits(max_memory_mb=64)
        )
