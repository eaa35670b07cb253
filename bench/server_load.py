"""Load figures of the HTTP server: gunicorn with uvicorn workers, PostgreSQL, the embedded store, and the
scripted OpenAI-compatible LLM server on loopback (so LLM time is near zero and the figures show the server).

Prints, per concurrency level: sustained queries/s, p50/p95 latency, errors; then the server overhead per
query (client latency minus the time spent in the pipeline's steps, i.e. retrieval and the LLM call, measured
one query at a time) and the resident memory of each worker.

    python bench/server_load.py --workers 2 --levels 8,32,64 --seconds 20 --pipeline standard
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.live_server import worker_pids
from tests.support.server_stack import QUESTION, Stack, server_stack

USERS = ("alice", "bob", "carol", "dave")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_level(stack: Stack, clients: int, seconds: float, pipeline: str) -> dict[str, float]:
    latencies: list[float] = []
    errors: dict[str, int] = {}
    users = itertools.cycle(USERS)
    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)

    async with httpx.AsyncClient(base_url=stack.base_url, timeout=120, limits=limits) as http:

        async def client_loop(user: str) -> None:
            while time.perf_counter() < deadline:
                start = time.perf_counter()
                try:
                    response = await http.post("/v1/query", headers=stack.auth(user),
                                               json={"question": QUESTION, "pipeline": pipeline})
                    status = str(response.status_code)
                except httpx.HTTPError as exc:
                    status = type(exc).__name__
                if status == "200":
                    latencies.append(time.perf_counter() - start)
                else:
                    errors[status] = errors.get(status, 0) + 1

        started = time.perf_counter()
        await asyncio.gather(*(client_loop(next(users)) for _ in range(clients)))
        elapsed = time.perf_counter() - started
    return {
        "clients": clients,
        "ok": len(latencies),
        "errors": sum(errors.values()),
        "error_kinds": errors,
        "qps": len(latencies) / elapsed,
        "p50_ms": percentile(latencies, 0.50) * 1000 if latencies else float("nan"),
        "p95_ms": percentile(latencies, 0.95) * 1000 if latencies else float("nan"),
    }


def overhead(stack: Stack, pipeline: str, queries: int) -> dict[str, float]:
    """Latency of single queries minus the summed durations of their steps (retrieval, LLM calls)."""
    outside, inside, total = [], [], []
    with httpx.Client(base_url=stack.base_url, timeout=120) as http:
        for user in itertools.islice(itertools.cycle(USERS), queries):
            start = time.perf_counter()
            body = http.post("/v1/query", headers=stack.auth(user),
                             json={"question": QUESTION, "pipeline": pipeline}).json()
            latency = time.perf_counter() - start
            steps = sum(s["duration_s"] for s in body["steps"] if s["parent"] is None)
            total.append(latency * 1000)
            inside.append(steps * 1000)
            outside.append((latency - steps) * 1000)
    return {"latency_ms": statistics.median(total), "steps_ms": statistics.median(inside),
            "overhead_ms": statistics.median(outside), "overhead_p95_ms": percentile(outside, 0.95)}


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--levels", default="8,32,64")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--pipeline", default="standard")
    parser.add_argument("--overhead-queries", type=int, default=40, dest="overhead_queries")
    args = parser.parse_args()
    # One torch thread per worker process: two workers share the 2 cores.
    env = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "DOCQA_RATE_LIMIT_PER_MINUTE": "1000000",
           "DOCQA_RATE_LIMIT_BURST": "100000"}
    with tempfile.TemporaryDirectory() as tmp, server_stack(Path(tmp), workers=args.workers, llm_mode="fixed",
                                                           extra_env=env) as stack:
        print(f"server: gunicorn, {args.workers} uvicorn workers; database: {stack.database.split('/')[0]}; "
              f"pipeline: {args.pipeline}; LLM: scripted loopback endpoint")
        asyncio.run(run_level(stack, 4, 5, args.pipeline))  # warm-up: models loaded in every worker
        print(f"{'clients':>7} {'ok':>6} {'errors':>6} {'q/s':>7} {'p50 ms':>8} {'p95 ms':>8}  error kinds")
        for level in (int(x) for x in args.levels.split(",")):
            r = asyncio.run(run_level(stack, level, args.seconds, args.pipeline))
            print(f"{r['clients']:>7} {r['ok']:>6} {r['errors']:>6} {r['qps']:>7.1f} {r['p50_ms']:>8.0f} "
                  f"{r['p95_ms']:>8.0f}  {r['error_kinds'] or '-'}")
        o = overhead(stack, args.pipeline, args.overhead_queries)
        print(f"one client, {args.overhead_queries} queries (medians): latency {o['latency_ms']:.1f} ms, "
              f"in steps (retrieval + LLM) {o['steps_ms']:.1f} ms, server overhead {o['overhead_ms']:.1f} ms "
              f"(p95 {o['overhead_p95_ms']:.1f} ms)")
        workers = worker_pids(stack.server.pid)
        print("memory per worker (RSS MB): " + ", ".join(f"{rss_mb(pid):.0f}" for pid in workers)
              + f"; master {rss_mb(stack.server.pid):.0f}")


if __name__ == "__main__":
    main()
