"""The abuse run of the reliability review: what one hostile user's expensive questions cost everybody else.

One gunicorn worker, a query timeout (5 s by default), and the scripted LLM on loopback in adversarial mode
(judges say "No", graders fail, every plan and rewrite is new, each call takes `--llm-delay-ms`), so a loop ends
only at its bound. Prints:
- the p95 of an ordinary user's `standard` question alone, then while 16 AT-RAG requests asking for
  `max_iterations` 10^9 (and, where that is refused, the server's ceiling) run at once;
- the status codes the attack got, and the LLM calls that started after the last attack request was answered
  (a run stopped at its timeout makes none beyond the one it had in flight).

    python bench/abuse_run.py --timeout 5 --attackers 16
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.support.scripted_openai_server import llm_calls_since
from tests.support.server_stack import QUESTION, Stack, server_stack

# In every attack question, so the LLM calls of the attack can be told from the ordinary user's.
ATTACK_TAG = "attack-"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


async def ordinary_user(http: httpx.AsyncClient, stack: Stack, until: float) -> tuple[list[float], collections.Counter]:
    latencies: list[float] = []
    codes: collections.Counter = collections.Counter()
    while time.perf_counter() < until:
        start = time.perf_counter()
        response = await http.post("/v1/query", headers=stack.auth("bob"),
                                   json={"question": QUESTION, "pipeline": "standard"})
        codes[response.status_code] += 1
        if response.status_code == 200:
            latencies.append(time.perf_counter() - start)
    return latencies, codes


async def attack(http: httpx.AsyncClient, stack: Stack, attackers: int, options: dict[str, Any]) -> tuple[
        collections.Counter, float]:
    async def one(n: int) -> int:
        try:
            response = await http.post("/v1/query", headers=stack.auth("alice"), json={
                "question": f"{QUESTION} ({ATTACK_TAG}{n})", "pipeline": "atrag", "options": options})
            return response.status_code
        except httpx.HTTPError:
            return 0

    codes = collections.Counter(await asyncio.gather(*(one(n) for n in range(attackers))))
    return codes, time.time()


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "llm-calls.log"
        env = {"DOCQA_QUERY_TIMEOUT_S": str(args.timeout), "DOCQA_MAX_CONCURRENT_QUERIES": "8",
               "DOCQA_QUEUE_TIMEOUT_S": str(args.timeout), "DOCQA_RATE_LIMIT_BURST": "1000",
               "DOCQA_RATE_LIMIT_PER_MINUTE": "100000"}
        with server_stack(Path(tmp), workers=1, llm_mode="adversarial", llm_delay_ms=args.llm_delay_ms,
                          extra_env=env, llm_calls_log=log) as stack:
            async with httpx.AsyncClient(base_url=stack.base_url, timeout=120) as http:
                # Build both strategies first: building loads the embedding model.
                for pipeline in ("standard", "atrag"):
                    await http.post("/v1/query", headers=stack.auth("bob"),
                                    json={"question": QUESTION, "pipeline": pipeline, "options": {"max_iterations": 1}}
                                    if pipeline == "atrag" else {"question": QUESTION, "pipeline": pipeline})
                quiet, quiet_codes = await ordinary_user(http, stack, time.perf_counter() + args.seconds)
                print(f"standard question alone: p50 {percentile(quiet, 0.5) * 1000:.0f} ms, "
                      f"p95 {percentile(quiet, 0.95) * 1000:.0f} ms over {len(quiet)} answers {dict(quiet_codes)}")
                for options in ({"max_iterations": 1_000_000_000}, {"max_iterations": args.ceiling}):
                    user = asyncio.ensure_future(ordinary_user(http, stack, time.perf_counter() + args.seconds))
                    codes, answered_at = await attack(http, stack, args.attackers, options)
                    during, during_codes = await user
                    await asyncio.sleep(args.settle)
                    print(f"attack {args.attackers} x atrag {options}: responses {dict(codes)}; "
                          f"LLM calls started in the {args.settle:g} s after the last response: "
                          f"{llm_calls_since(log, answered_at, ATTACK_TAG)}")
                    print(f"  standard question during the attack: p50 {percentile(during, 0.5) * 1000:.0f} ms, "
                          f"p95 {percentile(during, 0.95) * 1000:.0f} ms over {len(during)} answers "
                          f"{dict(during_codes)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=5.0, help="DOCQA_QUERY_TIMEOUT_S of the server")
    parser.add_argument("--attackers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the ordinary user asks")
    parser.add_argument("--settle", type=float, default=10.0, help="how long to count LLM calls after the attack")
    parser.add_argument("--llm-delay-ms", type=int, default=150, dest="llm_delay_ms")
    parser.add_argument("--ceiling", type=int, default=10, help="the largest max_iterations the server accepts")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
