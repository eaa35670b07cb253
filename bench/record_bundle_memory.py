"""What a large patient-record bundle costs the worker that parses it. FHIR bundles (`POST /v1/records`, a `.json`
item of an ingestion job) are parsed by `read_fhir_bundle_boxed`: in the conversion box, a child within the
DOCQA_CONVERT_* memory and time limits, so the worker holds only the records handed back. JSON is not compressed;
the upload limit (`DOCQA_MAX_UPLOAD_BYTES`, 64 MB) bounds a bundle's size.

A real Synthea bundle's resources are repeated (with new ids) up to about `--mb` megabytes; the script prints the
bundle's size and resources, then for the parse in this process (`read_fhir_bundle`, what runs inside the box) and
for the boxed parse: the records, the time, and this process's peak RSS above its size before (peaks reset through
/proc/self/clear_refs).

    nice -n 10 python bench/record_bundle_memory.py --mb 60      # needs ../shared/data/records/synthea_fhir_r4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BUNDLES = ROOT.parent / "shared" / "data" / "records" / "synthea_fhir_r4"


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def grown_bundle(source: Path, megabytes: float) -> tuple[bytes, int]:
    """The bundle's Patient and its other resources repeated, each copy with its own ids, to about `megabytes`."""
    bundle = json.loads(source.read_text())
    patient = [e for e in bundle["entry"] if e["resource"]["resourceType"] == "Patient"]
    others = [e for e in bundle["entry"] if e["resource"]["resourceType"] != "Patient"]
    per_entry = len(json.dumps(others).encode()) / max(len(others), 1)
    entries, size, copies = list(patient), 0.0, 0
    while size < megabytes * 1024 * 1024:
        for entry in others:
            copy = json.loads(json.dumps(entry))
            copy["resource"]["id"] = f"{copy['resource'].get('id', 'r')}-{copies}"
            copy["fullUrl"] = f"urn:uuid:{copies}"
            entries.append(copy)
            copies += 1
            size += per_entry
    return json.dumps({"resourceType": "Bundle", "type": "collection", "entry": entries}).encode(), len(entries)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mb", type=float, default=60.0, help="bundle size to reach (the upload limit is 64 MB)")
    parser.add_argument("--source", type=Path, help="the Synthea bundle to grow (default: the largest one)")
    args = parser.parse_args()
    source = args.source or max(BUNDLES.glob("*.json"), key=lambda path: path.stat().st_size, default=None)
    if source is None:
        sys.exit(f"no Synthea FHIR bundle under {BUNDLES} (see ../shared/data/README.md)")
    raw, resources = grown_bundle(source, args.mb)

    from docqa.conversion.conversion_box import ConversionLimits, run_in_box
    from docqa.ingestion.records import read_fhir_bundle, read_fhir_bundle_boxed

    run_in_box(int, limits=ConversionLimits(), name="start")  # the forkserver's start is not the parse's cost
    print(f"bundle {len(raw) / 1e6:.1f} MB ({source.name} grown), {resources} resources")
    parses = (
        ("in this process", lambda: read_fhir_bundle(raw, name="big.json", tenant="acme", access=["everyone"])),
        (
            "in the box",
            lambda: read_fhir_bundle_boxed(
                raw, name="big.json", tenant="acme", access=["everyone"], limits=ConversionLimits()
            ),
        ),
    )
    for label, parse in parses:
        Path("/proc/self/clear_refs").write_text("5")
        before = status_kb("VmRSS")
        started = time.monotonic()
        documents = parse()
        elapsed = time.monotonic() - started
        print(
            f"  {label:16} {len(documents)} records in {elapsed:5.1f} s; RSS before {before // 1024} MB, "
            f"peak +{(status_kb('VmHWM') - before) // 1024} MB"
        )
        del documents


if __name__ == "__main__":
    main()
