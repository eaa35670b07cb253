"""What hostile files cost when they are ingested: a zip-bomb DOCX (220 MB of XML in about 2 MB), a DOCX whose
directory lies about that XML's size, a DOCX within every declared bound whose parse outgrows the box, a PDF whose
content stream inflates to 2 GiB, an XLSX bomb (220 MB of sheet XML in about 2 MB) and an XLSX within every declared
bound (60 MB of sheet XML, about 570,000 rows).

1. The box's start-up: the first call of a process (it starts the forkserver, which imports and warms the
   parsers) and the median of later ones.
2. Each file through a broker-less ingestion job in this process (`submit_job`, the path of an upload without
   DOCQA_BROKER_URL), after a normal DOCX warmed that path: the failed item's reason, the time from submitting
   to the failed item, the converting child's peak RSS ("no child" when the pre-check refused the file), this
   process's peak RSS above its size before the job, and the same for `convert_bytes` alone (peaks reset
   through /proc/self/clear_refs, so each figure is the call's own).
3. With --live, each file uploaded to gunicorn (one worker, PostgreSQL when reachable; tests/support/server_stack):
   the time from the upload to the failed item in GET /v1/jobs and the worker's peak RSS above its size before.

    python bench/conversion_bombs.py [--memory-mb 1024] [--timeout-s 120] [--live]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from docqa.conversion.conversion_box import ConversionLimits, run_in_box
from docqa.conversion.converters import convert_bytes
from docqa.errors import DocqaError
from docqa.settings import Settings
from tests.support.conversion_bombs import lying_docx, pdf_bomb, xlsx_bomb, zip_bomb_docx
from tests.support.sample_files import docx_bytes

MB = 1024 * 1024
NORMAL_DOCX = docx_bytes(["Travel must be approved by a manager."] * 20)
CASES = [
    ("zip-bomb DOCX (220 MB of XML)", "bomb.docx", lambda: zip_bomb_docx()),
    ("lying DOCX (60 MB of XML declared 4 KB)", "liar.docx", lambda: lying_docx(60 * MB)),
    ("DOCX within the pre-check (60 MB of XML)", "big.docx", lambda: zip_bomb_docx(60 * MB)),
    ("PDF decompression bomb (2 GiB stream)", "bomb.pdf", lambda: pdf_bomb()),
    ("XLSX bomb (220 MB of XML)", "bomb.xlsx", lambda: xlsx_bomb()),
    ("XLSX within the pre-check (60 MB of XML)", "big.xlsx", lambda: xlsx_bomb(60 * MB)),
]


class ChildPeaks(logging.Handler):
    """The converting children's peak RSS, from the box's debug lines."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.peaks_kb: list[int] = []

    def emit(self, record: logging.LogRecord) -> None:
        if hasattr(record, "child_peak_rss_kb"):
            self.peaks_kb.append(record.child_peak_rss_kb)


def status_kb(field: str, pid: int | str = "self") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def reset_peak() -> None:
    Path("/proc/self/clear_refs").write_text("5")


def ingest(settings: Settings, name: str, data: bytes) -> dict:
    from docqa.ingestion.jobs import Upload, job_status, submit_job

    job_id = submit_job(settings, tenant="acme", access=["everyone"], uploads=[Upload(name=name, data=data)])
    return job_status(settings, job_id)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--memory-mb", type=int, default=ConversionLimits.max_memory_mb)
    parser.add_argument("--timeout-s", type=float, default=ConversionLimits.timeout_s)
    parser.add_argument("--live", action="store_true", help="also upload each file to a gunicorn server")
    args = parser.parse_args()

    from docqa.schema import upgrade_database

    # The first call of a process also starts its forkserver.
    print("box start-up, 20 runs each:")
    small = docx_bytes(["One paragraph."])
    for label, call in (
        ("child that runs nothing", lambda: run_in_box(int, limits=ConversionLimits(), name="n")),
        ("convert 1-paragraph DOCX", lambda: convert_bytes(small, "s.docx", 10 * MB)),
    ):
        times = []
        for _ in range(20):
            started = time.monotonic()
            call()
            times.append(time.monotonic() - started)
        print(f"  {label:28} first {times[0] * 1000:7.1f} ms  median {statistics.median(times[1:]) * 1000:7.1f} ms")

    peaks = ChildPeaks()
    box_logger = logging.getLogger("docqa.conversion.conversion_box")
    box_logger.addHandler(peaks)
    box_logger.setLevel(logging.DEBUG)
    cases = [(label, name, build()) for label, name, build in CASES]
    with tempfile.TemporaryDirectory(prefix="conversion-bombs-") as workdir:
        settings = Settings(
            data_dir=Path(workdir), convert_max_memory_mb=args.memory_mb, convert_timeout_s=args.timeout_s
        )
        limits = ConversionLimits.from_settings(settings)
        upgrade_database(settings)
        warm = ingest(settings, "normal.docx", NORMAL_DOCX)
        print(f"\nwarm-up: normal.docx {warm['items_written']} written; this process {status_kb('VmRSS') // 1024} MB")
        print(f"limits: {limits}")
        print(
            f"\n{'file':42} {'size':>7} {'to failed':>9} {'child peak':>10} {'job +peak':>9} "
            f"{'convert +peak':>13}  reason"
        )
        for label, name, data in cases:
            peaks.peaks_kb.clear()
            before = status_kb("VmRSS")
            reset_peak()
            started = time.monotonic()
            report = ingest(settings, name, data)
            elapsed = time.monotonic() - started
            job_peak = status_kb("VmHWM") - before
            before = status_kb("VmRSS")
            reset_peak()
            with contextlib.suppress(DocqaError):
                convert_bytes(data, name, settings.max_file_bytes, limits)
            convert_peak = status_kb("VmHWM") - before
            child = f"{max(peaks.peaks_kb) // 1024} MB" if peaks.peaks_kb else "no child"
            print(
                f"{label:42} {len(data) / MB:5.2f}MB {elapsed:8.2f}s {child:>10} {job_peak / 1024:6.0f} MB "
                f"{convert_peak / 1024:10.0f} MB  {_outcome(report)}"
            )
    if args.live:
        live(cases, args)


def live(cases: list[tuple[str, str, bytes]], args: argparse.Namespace) -> None:
    import httpx

    from tests.support.live_server import worker_pids
    from tests.support.server_stack import server_stack

    env = {"DOCQA_CONVERT_MAX_MEMORY_MB": str(args.memory_mb), "DOCQA_CONVERT_TIMEOUT_S": str(args.timeout_s)}
    with (
        tempfile.TemporaryDirectory(prefix="conversion-bombs-live-") as workdir,
        server_stack(Path(workdir), workers=1, extra_env=env) as stack,
        httpx.Client(base_url=stack.base_url, timeout=args.timeout_s + 120) as client,
    ):
        [worker] = worker_pids(stack.server.pid)

        def upload(name: str, data: bytes) -> dict:
            created = client.post(
                "/v1/documents",
                headers=stack.auth("root"),
                data={"access": ["everyone"]},
                files=[("files", (name, data, "application/octet-stream"))],
            )
            created.raise_for_status()
            return client.get(f"/v1/jobs/{created.json()['job_id']}", headers=stack.auth("root")).json()

        warm = upload("normal.docx", NORMAL_DOCX)
        print(
            f"\nlive gunicorn worker: normal.docx {warm['items_written']} written; worker "
            f"{status_kb('VmRSS', worker) // 1024} MB"
        )
        print(f"{'file':42} {'to failed':>9} {'worker +peak':>12}  reason")
        for label, name, data in cases:
            before = status_kb("VmRSS", worker)
            Path(f"/proc/{worker}/clear_refs").write_text("5")
            started = time.monotonic()
            report = upload(name, data)
            elapsed = time.monotonic() - started
            growth = status_kb("VmHWM", worker) - before
            print(f"{label:42} {elapsed:8.2f}s {growth / 1024:9.0f} MB  {_outcome(report)}")


def _outcome(report: dict) -> str:
    if not report["failures"]:
        return f"NOT FAILED ({report['items_written']} written)"
    failure = report["failures"][0]
    return f"{failure['code']}: {failure['reason']}"


if __name__ == "__main__":
    main()
