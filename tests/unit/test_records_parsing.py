"""FHIR and Synthea CSV parsing on the real shared Synthea files: counts per type, dates, ids, flags."""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from docqa.errors import UnreadableFileError
from docqa.ingestion.records import parse_fhir_bundle, parse_synthea_csv_dir
from docqa.ingestion.records.dates import parse_instant
from docqa.ingestion.records.fhir import KEPT_RESOURCE_TYPES
from docqa.ingestion.records.synthea_csv import CLINICAL_TABLES, SIMULATION_METRIC_CODES

RECORDS = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "records"
FHIR_DIR = RECORDS / "synthea_fhir_r4"
CSV_DIR = RECORDS / "synthea_csv"
needs_data = pytest.mark.skipif(not RECORDS.is_dir(), reason=f"shared Synthea data not found at {RECORDS}")


def _bundles() -> list[Path]:
    return sorted(FHIR_DIR.glob("*.json")) if FHIR_DIR.is_dir() else []


class TestRecordDates:
    def test_keeps_offset_and_derives_utc(self) -> None:
        instant = parse_instant("2012-02-08T02:43:19-05:00")
        assert instant is not None
        assert instant.iso == "2012-02-08T02:43:19-05:00"
        assert instant.utc == "2012-02-08T07:43:19Z"
        assert instant.precision == "second"

    def test_zulu_and_day_precision(self) -> None:
        assert parse_instant("2023-10-10T04:17:47Z").iso == "2023-10-10T04:17:47+00:00"
        day = parse_instant("2023-01-27")
        assert (day.iso, day.utc, day.precision) == ("2023-01-27", "2023-01-27T00:00:00Z", "day")

    def test_unreadable_is_none(self) -> None:
        assert parse_instant("") is None
        assert parse_instant("last tuesday") is None


@needs_data
class TestParseFhirBundle:
    @pytest.mark.parametrize("path", _bundles(), ids=lambda p: p.name[:20])
    def test_counts_per_resource_type_match_the_bundle(self, path: Path) -> None:
        bundle = json.loads(path.read_text())
        source = Counter(e["resource"]["resourceType"] for e in bundle["entry"])
        expected = {kind: source[kind] for kind in KEPT_RESOURCE_TYPES if source[kind]}
        documents = parse_fhir_bundle(path)
        assert Counter(d.meta["resource_type"] for d in documents) == expected
        assert len({d.id for d in documents}) == len(documents)

    def test_dates_keep_their_time_zone_and_observations_their_values(self) -> None:
        path = _bundles()[0]
        bundle = json.loads(path.read_text())
        source = {e["resource"]["id"]: e["resource"] for e in bundle["entry"]}
        documents = parse_fhir_bundle(path)
        lab = next(d for d in documents if d.meta["record_type"] == "lab_result" and "value" in d.meta)
        resource = source[lab.meta["source"].rsplit("/", 1)[1]]
        assert lab.meta["effective_start"] == resource["effectiveDateTime"]
        assert lab.meta["effective_start"].endswith("+00:00")
        assert lab.meta["effective_start_utc"].endswith("Z")
        assert lab.meta["value"] == pytest.approx(resource["valueQuantity"]["value"], abs=0.01)
        assert lab.meta["unit"] == resource["valueQuantity"]["unit"]
        assert lab.meta["patient_id"] == next(r["id"] for r in source.values() if r["resourceType"] == "Patient")

    def test_encounter_carries_its_reason(self) -> None:
        documents = [d for p in _bundles() for d in parse_fhir_bundle(p)]
        with_reason = [d for d in documents if d.meta["record_type"] == "encounter" and d.meta.get("reasons")]
        assert with_reason
        assert all(d.meta["reasons"][0] in d.content for d in with_reason)

    def test_abnormal_flag_comes_from_adult_range(self) -> None:
        documents = [d for p in _bundles() for d in parse_fhir_bundle(p)]
        glucose = [d for d in documents if d.meta.get("code") == "2339-0" and "abnormal" in d.meta]
        assert glucose
        for doc in glucose:
            assert doc.meta["reference_source"] == "default_adult_table"
            assert doc.meta["abnormal"] == (not 70 <= doc.meta["value"] <= 99)

    def test_reparsing_gives_the_same_ids_and_tenant_changes_them(self) -> None:
        path = _bundles()[0]
        first = [d.id for d in parse_fhir_bundle(path)]
        assert first == [d.id for d in parse_fhir_bundle(path)]
        other = parse_fhir_bundle(path, tenant="other", access=["group:x"])
        assert not set(first) & {d.id for d in other}
        assert other[0].meta["access"] == ["group:x"]

    def test_not_a_bundle_is_rejected(self, tmp_path: Path) -> None:
        bad = tmp_path / "x.json"
        bad.write_text('{"resourceType": "Patient"}')
        with pytest.raises(UnreadableFileError):
            parse_fhir_bundle(bad)
        bad.write_text("{not json")
        with pytest.raises(UnreadableFileError):
            parse_fhir_bundle(bad)


@needs_data
class TestParseSyntheaCsvDir:
    def test_counts_per_table_match_the_source(self) -> None:
        documents = parse_synthea_csv_dir(CSV_DIR)
        expected = Counter()
        for table in CLINICAL_TABLES:
            with (CSV_DIR / f"{table}.csv").open(newline="") as handle:
                for row in csv.DictReader(handle):
                    if table == "observations" and row["CODE"] in SIMULATION_METRIC_CODES:
                        continue
                    expected[table] += 1
        assert Counter(d.meta["resource_type"] for d in documents) == expected
        assert len({d.id for d in documents}) == len(documents)

    def test_dates_with_zone_and_days(self) -> None:
        documents = parse_synthea_csv_dir(CSV_DIR)
        encounter = next(d for d in documents if d.meta["record_type"] == "encounter")
        assert encounter.meta["effective_start"].endswith("+00:00")
        condition = next(d for d in documents if d.meta["record_type"] == "condition")
        assert len(condition.meta["effective_start"]) == 10
        assert condition.meta["effective_start_utc"] == condition.meta["effective_start"] + "T00:00:00Z"

    def test_patient_subset_and_stable_ids(self) -> None:
        everyone = parse_synthea_csv_dir(CSV_DIR)
        patient = everyone[0].meta["patient_id"]
        subset = parse_synthea_csv_dir(CSV_DIR, patient_ids={patient})
        assert subset and {d.meta["patient_id"] for d in subset} == {patient}
        assert {d.id for d in subset} <= {d.id for d in everyone}

    def test_missing_export_is_rejected(self, tmp_path: Path) -> None:
        with pytest.raises(UnreadableFileError):
            parse_synthea_csv_dir(tmp_path)
