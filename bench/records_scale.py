"""Patient-record ingestion throughput and record-question latency at 10 and at 1,000 patients.

The larger sets are made from the shared Synthea files by re-identifying copies: every UUID of a copy (patient,
encounters, resources, references) is replaced by a fresh one derived from the copy number, and the patient's
name by a generated one, so copy k of a patient is a new patient with the same history. Units are the 9 FHIR
bundles and the 27 patients of the CSV export (one folder each, rows filtered by PATIENT), cycled: patient n is
copy n // 36 of unit n % 36.

For each size:
- ingestion: parse (FHIR / CSV parsers) and `write_patient_records` per patient into a fresh embedded store, as
  `docqa records` does; records/s over the whole run. By default without embeddings (the exact record path
  filters on metadata and never uses them; embedding 150k records on two busy cores would take the whole
  budget), in wall and in CPU seconds (the machine is shared: CPU time is the figure that does not depend on
  what else runs); `--embed-up-to N` also embeds with the configured model at sizes <= N, reported on its own line;
- queries: the 16 question kinds of `bench/record_sets.py` for `--query-patients` patients spread over the set,
  asked through the `atrag` pipeline with a constant answering model (so the latency is resolution, retrieval,
  record table and the pipeline's steps, not an LLM); p50/p95, and the record-set precision/recall of those
  answers against gold sets computed from the re-identified source files.

    nice python bench/records_scale.py [--sizes 10 1000] [--query-patients 8] [--embed-up-to 10]
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

import argparse
import csv
import json
import re
import sys
import tempfile
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # docqa_eval and bench are checkout folders

from bench.record_sets import KINDS, UTC_TEXT, ConstantChatGenerator, Source, _last_encounter, csv_sources, fhir_sources
from docqa.access import AccessScope
from docqa.ingestion.records import group_by_patient, parse_fhir_bundle, parse_synthea_csv_dir, write_patient_records
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa_eval.datasets import shared_data_dir

TENANT = "records-scale"
ACCESS = ["group:clinicians"]
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
# The CSV tables the records parser reads (rows filtered by PATIENT), plus organizations for display names.
_CSV_TABLES = ("patients", "encounters", "conditions", "medications", "procedures", "immunizations", "allergies",
               "careplans", "observations")
_GIVEN = ("Avery", "Blake", "Casey", "Dana", "Emery", "Finley", "Gray", "Harper", "Indy", "Jordan", "Kai", "Logan")
_FAMILY = ("Abbott", "Barros", "Chen", "Diallo", "Eriksen", "Fontaine", "Gupta", "Haddad", "Ito", "Jansen")


def _units(records_dir: Path, workdir: Path) -> list[tuple[str, Path]]:
    """The 36 source patients: ("fhir", bundle) or ("csv", a one-patient export folder)."""
    units = [("fhir", path) for path in sorted((records_dir / "synthea_fhir_r4").glob("*.json"))]
    export = records_dir / "synthea_csv"
    tables = {}
    for table in _CSV_TABLES:
        with (export / f"{table}.csv").open(newline="", encoding="utf-8") as handle:
            reader = csv.DictReader(handle)
            tables[table] = (reader.fieldnames or [], list(reader))
    for patient in (row["Id"] for row in tables["patients"][1]):
        folder = workdir / "units" / patient
        folder.mkdir(parents=True)
        for table, (columns, rows) in tables.items():
            key = "Id" if table == "patients" else "PATIENT"
            with (folder / f"{table}.csv").open("w", newline="", encoding="utf-8") as handle:
                writer = csv.DictWriter(handle, fieldnames=columns)
                writer.writeheader()
                writer.writerows(row for row in rows if row[key] == patient)
        (folder / "organizations.csv").write_bytes((export / "organizations.csv").read_bytes())
        units.append(("csv", folder))
    return units


def _reidentify(text: str, copy: int) -> str:
    if copy == 0:
        return text
    return _UUID.sub(lambda m: str(uuid.uuid5(uuid.NAMESPACE_URL, f"copy{copy}/{m.group(0)}")), text)


def _new_name(n: int) -> tuple[str, str]:
    return _GIVEN[n % len(_GIVEN)], f"{_FAMILY[(n // len(_GIVEN)) % len(_FAMILY)]}{n}"


def make_patients(units: list[tuple[str, Path]], count: int, out: Path) -> list[tuple[str, Path]]:
    """`count` re-identified patients written under `out`, as (kind, path) to ingest."""
    made = []
    for n in range(count):
        kind, source = units[n % len(units)]
        copy = n // len(units)
        given, family = _new_name(n)
        if kind == "fhir":
            bundle = json.loads(_reidentify(source.read_text(encoding="utf-8"), copy))
            for entry in bundle["entry"]:
                if entry["resource"]["resourceType"] == "Patient":
                    entry["resource"]["name"] = [{"use": "official", "family": family, "given": [given]}]
            path = out / f"p{n:05d}.json"
            path.write_text(json.dumps(bundle), encoding="utf-8")
        else:
            path = out / f"p{n:05d}"
            path.mkdir()
            for table in source.iterdir():
                text = table.read_text(encoding="utf-8")
                if table.name == "patients.csv":
                    rows = list(csv.DictReader(text.splitlines()))
                    for row in rows:
                        row["FIRST"], row["LAST"] = given, family
                    lines = [",".join(rows[0].keys()) if rows else text.splitlines()[0]]
                    buffer: list[str] = []
                    writer = csv.DictWriter(_Lines(buffer), fieldnames=list(rows[0].keys()))
                    writer.writerows(rows)
                    text = "\n".join(lines + buffer) + "\n"
                (path / table.name).write_text(_reidentify(text, copy), encoding="utf-8")
        made.append((kind, path))
    return made


def _fresh(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


class _Lines:
    def __init__(self, buffer: list[str]) -> None:
        self.buffer = buffer

    def write(self, line: str) -> None:
        self.buffer.append(line.rstrip("\r\n"))


def ingest(runtime: Runtime, patients: list[tuple[str, Path]],
           embedder: object | None) -> tuple[int, float, float]:
    """Parse and write every patient as `docqa records` does; returns (records, wall seconds, CPU seconds)."""
    started, cpu = time.perf_counter(), time.process_time()
    total = 0
    for kind, path in patients:
        documents = (parse_fhir_bundle(path, tenant=TENANT, access=ACCESS) if kind == "fhir"
                     else parse_synthea_csv_dir(path, tenant=TENANT, access=ACCESS))
        for patient_id, records in group_by_patient(documents).items():
            counts = write_patient_records(runtime.document_store, records, tenant=TENANT, patient_id=patient_id,
                                           embedder=embedder)
            total += counts["written"]
    return total, time.perf_counter() - started, time.process_time() - cpu


def _sources(kind: str, path: Path) -> list[Source]:
    return fhir_sources(path) if kind == "fhir" else csv_sources(path)


def query(runtime: Runtime, patients: list[tuple[str, Path]], sample: int) -> dict[str, float]:
    pipeline = build_pipeline("atrag", runtime, max_iterations=1, max_scoped_records=1000)
    scope = AccessScope(tenant=TENANT, principals=frozenset(ACCESS))
    step = max(1, len(patients) // sample)
    latencies, cpu_times, hit, returned, gold_total, asked = [], [], 0, 0, 0, 0
    for kind, path in patients[::step][:sample]:
        records = _sources(kind, path)
        patient = records[0].patient
        last = _last_encounter(records, datetime.max.replace(tzinfo=UTC))
        if last is None:
            continue
        as_of = (last.when + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
        keys = {d.id: (patient, d.meta["record_type"], d.meta.get("effective_start_utc", ""), d.meta.get("code", ""))
                for d in runtime.document_store.filter_documents(
                    filters={"field": "meta.patient_id", "operator": "==", "value": patient})}
        for gold_of in KINDS.values():
            made = gold_of(records, as_of)
            if made is None:
                continue
            question, gold = made
            started, cpu = time.perf_counter(), time.process_time()
            result = pipeline.run(question, scope, as_of=as_of.strftime(UTC_TEXT), patient_id=patient)
            latencies.append(time.perf_counter() - started)
            cpu_times.append(time.process_time() - cpu)
            table = result.steps[-1].outputs.get("table") if result.steps[-1].kind == "record_table" else None
            rows = table["rows"] if table else []
            got = Counter(keys.get(r["record_id"], ("foreign", r["record_id"], "", "")) for r in rows)
            wanted = Counter((patient, s.record_type, s.when.strftime(UTC_TEXT) if s.when else "", s.code)
                             for s in gold)
            hit += sum((got & wanted).values())
            returned += sum(got.values())
            gold_total += sum(wanted.values())
            asked += 1
    latencies.sort()
    cpu_times.sort()
    return {"questions": asked, "cpu_p50_ms": cpu_times[len(cpu_times) // 2] * 1000 if cpu_times else 0.0,
            "cpu_p95_ms": cpu_times[min(len(cpu_times) - 1, int(len(cpu_times) * 0.95))] * 1000 if cpu_times else 0.0,
            "p50_ms": latencies[len(latencies) // 2] * 1000 if latencies else 0.0,
            "p95_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.95))] * 1000 if latencies else 0.0,
            "precision": hit / returned if returned else 1.0, "recall": hit / gold_total if gold_total else 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--query-patients", type=int, default=8, dest="query_patients")
    parser.add_argument("--embed-up-to", type=int, default=0, dest="embed_up_to",
                        help="also ingest with the configured embedding model at sizes up to this")
    args = parser.parse_args()
    records_dir = shared_data_dir() / "records"
    if not records_dir.is_dir():
        sys.exit(f"shared Synthea data not found at {records_dir}; nothing to measure")
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        units = _units(records_dir, workdir)
        # One-time costs (imports, the store's first open) are not ingestion throughput.
        ingest(Runtime(Settings(data_dir=workdir / "warm-up")), make_patients(units, 1, _fresh(workdir / "w")), None)
        for size in args.sizes:
            out = workdir / f"set{size}"
            out.mkdir()
            made_at = time.perf_counter()
            patients = make_patients(units, size, out)
            print(f"{size} patients: re-identified copies made in {time.perf_counter() - made_at:.1f} s", flush=True)
            runtime = Runtime(Settings(data_dir=workdir / f"store{size}"),
                              chat_generator_factory=lambda role: ConstantChatGenerator())
            records, seconds, cpu = ingest(runtime, patients, None)
            print(f"  ingest (parse + write, no embeddings): {records} records in {seconds:.1f} s = "
                  f"{records / seconds:.0f} records/s ({cpu:.1f} CPU s = {records / cpu:.0f} records per CPU s)",
                  flush=True)
            if size <= args.embed_up_to:
                embedded = Runtime(Settings(data_dir=workdir / f"embedded{size}"))
                embedder = embedded.document_embedder()
                embedder.warm_up()
                records, seconds, _ = ingest(embedded, patients, embedder)
                print(f"  ingest (parse + embed with the configured model + write): {records} records in "
                      f"{seconds:.1f} s = {records / seconds:.0f} records/s", flush=True)
            figures = query(runtime, patients, args.query_patients)
            print(f"  record questions (atrag, constant answering model): {figures['questions']} questions, "
                  f"p50 {figures['p50_ms']:.0f} ms, p95 {figures['p95_ms']:.0f} ms (CPU p50 "
                  f"{figures['cpu_p50_ms']:.0f} ms, p95 {figures['cpu_p95_ms']:.0f} ms); record-set precision "
                  f"{figures['precision']:.3f}, recall {figures['recall']:.3f}", flush=True)


if __name__ == "__main__":
    main()
