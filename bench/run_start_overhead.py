"""What writing every run `started` costs: the `started` row before a run, the trace that replaces it (against a
plain trace append), the look for leftovers each process does as runs start, and closing leftovers as
`interrupted` after a crash.

    python bench/run_start_overhead.py                 # PostgreSQL on 127.0.0.1:5432 (throwaway database) and SQLite
    python bench/run_start_overhead.py --runs 500 --leftovers 200

Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed_ms(action: Callable[[], Any], repeat: int) -> tuple[float, float]:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append((time.perf_counter() - start) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.95) - 1]


def measure(settings: Any, runs: int, leftovers: int) -> None:
    from sqlalchemy import update
    from sqlalchemy.orm import Session

    from docqa.audit.models import AuditRun
    from docqa.audit.recorder import TraceRecord, audit_engine, close_interrupted_runs, open_run, record_answer
    from docqa.audit.runs import Owner, open_runs
    from docqa.schema import upgrade_database

    upgrade_database(settings)
    common = {"asked_by": "bench", "tenant": "acme", "question": "Who founded Acme?", "pipeline": "bench",
              "models": {"generator": "m"}}
    trace = {**common, "config": {"top_k": 5}, "error": "bench"}
    ids: list[str] = []

    def start() -> None:
        ids.append(str(uuid.uuid4()))
        open_run(settings, run_id=ids[-1], config={"top_k": 5}, asked_at=datetime.now(UTC), timeout_s=300,
                 **common)

    record = TraceRecord(**trace)
    record_answer(settings, record)  # connections and keys warm before timing
    started_ms = timed_ms(start, runs)
    settled = iter(list(ids))
    settle_ms = timed_ms(lambda: record_answer(settings, record, run_id=next(settled)), runs)
    plain_ms = timed_ms(lambda: record_answer(settings, record), runs)
    with Session(audit_engine(settings)) as session:
        look_ms = timed_ms(lambda: open_runs(session), runs)
    ids.clear()
    for _ in range(leftovers):
        start()
    gone = replace(Owner.current(), boot_id="an-earlier-boot")
    with Session(audit_engine(settings)) as session, session.begin():
        session.execute(update(AuditRun).values(boot_id=gone.boot_id))
    began = time.perf_counter()
    closed = close_interrupted_runs(settings)
    close_s = time.perf_counter() - began
    print(f"  started row before a run:          p50 {started_ms[0]:6.2f} ms  p95 {started_ms[1]:6.2f} ms")
    print(f"  trace replacing its started row:   p50 {settle_ms[0]:6.2f} ms  p95 {settle_ms[1]:6.2f} ms")
    print(f"  plain trace append (before):       p50 {plain_ms[0]:6.2f} ms  p95 {plain_ms[1]:6.2f} ms")
    print(f"  look for leftovers (none left):    p50 {look_ms[0]:6.2f} ms  p95 {look_ms[1]:6.2f} ms")
    print(f"  {len(closed)} leftovers closed as interrupted in {close_s:.2f} s "
          f"({close_s / max(1, len(closed)) * 1000:.1f} ms each)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--leftovers", type=int, default=100)
    args = parser.parse_args()
    from docqa.settings import Settings
    from tests.support.live_server import postgres_available, postgres_database

    with tempfile.TemporaryDirectory() as tmp:
        print(f"SQLite ({args.runs} runs):")
        measure(Settings(data_dir=Path(tmp) / "data"), args.runs, args.leftovers)
        if postgres_available():
            with postgres_database() as url:
                print(f"PostgreSQL ({args.runs} runs):")
                measure(Settings(data_dir=Path(tmp) / "pg", database_url=url), args.runs, args.leftovers)
        else:
            print("PostgreSQL: not reachable on 127.0.0.1:5432, skipped")


if __name__ == "__main__":
    main()
