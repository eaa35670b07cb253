"""The abuse run of the reliability review: what one hostile user's expensive questions cost everybody else.

One gunicorn worker, a query timeout (5 s by default), and the scripted LLM on loopback in adversarial mode
(judges say "No", graders fail, every plan and rewrite is new, each call takes `--llm-delay-ms`), so a loop ends
only at its bound. Prints:
- the p95 of an ordinary user's `standard` question alone, then while 16 AT-RAG requests asking for
  `max_iterations` 10^9 (and, where that is refused, the server's ceiling) run at once;
- the status codes the attack got, and the LLM calls that started after the last attack request was answered
  (a run stopped at its timeout makes none beyond the one it had in flight);
- a sign-in flood: `--wrong-keys` bad API keys from one address as fast as the server answers them, the status
  codes they got (401 up to the sign-in throttle's threshold, then 429 with Retry-After) and what a valid key
  from the same address got meanwhile (`--signin-threshold 0` turns the throttle off for comparison).

    python bench/abuse_run.py --timeout 5 --attackers 16 --wrong-keys 200
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


async def signin_flood(http: httpx.AsyncClient, stack: Stack, wrong_keys: int) -> None:
    async def wrong(n: int) -> httpx.Response:
        return await http.get("/v1/me", headers={"Authorization": f"Bearer dq_{n:016x}_wrong-secret-{n}"})

    async def valid_user(done: asyncio.Event) -> collections.Counter:
        codes: collections.Counter = collections.Counter()
        while not done.is_set():
            codes[(await http.get("/v1/me", headers=stack.auth("bob"))).status_code] += 1
        return codes

    done = asyncio.Event()
    user = asyncio.ensure_future(valid_user(done))
    start = time.perf_counter()
    responses = []
    for first in range(0, wrong_keys, 20):  # 20 at a time: a client hammering on a few connections
        responses += await asyncio.gather(*(wrong(n) for n in range(first, min(first + 20, wrong_keys))))
    elapsed = time.perf_counter() - start
    done.set()
    user_codes = await user
    codes = collections.Counter(r.status_code for r in responses)
    first_429 = next((i for i, r in enumerate(responses) if r.status_code == 429), None)
    waits = sorted({int(r.headers["Retry-After"]) for r in responses if r.status_code == 429})
    print(f"sign-in flood: {wrong_keys} wrong keys in {elapsed:.2f} s: responses {dict(codes)}; first 429 at "
          f"attempt {None if first_429 is None else first_429 + 1}, Retry-After {waits[0] if waits else '-'}.."
          f"{waits[-1] if waits else '-'} s; a valid key from the same address meanwhile: {dict(user_codes)}")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "llm-calls.log"
        env = {"DOCQA_QUERY_TIMEOUT_S": str(args.timeout), "DOCQA_MAX_CONCURRENT_QUERIES": "8",
               "DOCQA_QUEUE_TIMEOUT_S": str(args.timeout), "DOCQA_RATE_LIMIT_BURST": "1000",
               "DOCQA_RATE_LIMIT_PER_MINUTE": "100000",
               "DOCQA_SIGNIN_MAX_FAILURES_PER_ADDRESS": str(args.signin_threshold)}
        if args.redis_url:
            env["DOCQA_RATE_LIMIT_REDIS_URL"] = args.redis_url
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
                if args.wrong_keys:
                    await signin_flood(http, stack, args.wrong_keys)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=5.0, help="DOCQA_QUERY_TIMEOUT_S of the server")
    parser.add_argument("--attackers", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=20.0, help="how long the ordinary user asks")
    parser.add_argument("--settle", type=float, default=10.0, help="how long to count LLM calls after the attack")
    parser.add_argument("--llm-delay-ms", type=int, default=150, dest="llm_delay_ms")
    parser.add_argument("--ceiling", type=int, default=10, help="the largest max_iterations the server accepts")
    parser.add_argument("--wrong-keys", type=int, default=200, dest="wrong_keys",
                        help="bad API keys sent in the sign-in flood (0: no flood)")
    parser.add_argument("--signin-threshold", type=int, default=30, dest="signin_threshold",
                        help="DOCQA_SIGNIN_MAX_FAILURES_PER_ADDRESS of the server (0: throttle off)")
    parser.add_argument("--redis-url", dest="redis_url", help="count sign-in failures in this Redis (else per worker)")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
