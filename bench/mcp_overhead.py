"""Latency overhead of `ask` through MCP (streamable HTTP at /mcp, the official MCP client) over `POST /v1/query`,
against the server as deployed (gunicorn, PostgreSQL, the embedded store) with the scripted OpenAI-compatible LLM
on loopback, so model time is near zero and the figures show the server and the protocol.

Both paths answer the same question with the same strategy as the same users, `--clients` at once; the two are
measured in alternating rounds so that drift of a shared machine hits both alike. Prints p50/p95 per path and the
difference (MCP minus HTTP).

    python bench/mcp_overhead.py --clients 8 --requests 30 --rounds 3 --pipeline standard
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sys
import tempfile
import time
from pathlib import Path

import httpx
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support.server_stack import QUESTION, Stack, server_stack

USERS = ("alice", "bob", "carol", "dave")
# Every request of the bench is within the limits: it measures latency, not the rate limiter.
NO_RATE_LIMIT = {"DOCQA_RATE_LIMIT_PER_MINUTE": "1000000", "DOCQA_RATE_LIMIT_BURST": "100000"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def http_round(stack: Stack, clients: int, requests: int, pipeline: str) -> list[float]:
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=stack.base_url, timeout=120, limits=limits) as http:

        async def one_client(user: str) -> None:
            for _ in range(requests):
                start = time.perf_counter()
                response = await http.post("/v1/query", headers=stack.auth(user),
                                           json={"question": QUESTION, "pipeline": pipeline})
                response.raise_for_status()
                latencies.append(time.perf_counter() - start)

        await asyncio.gather(*(one_client(user) for user, _ in zip(itertools.cycle(USERS), range(clients))))
    return latencies


async def mcp_round(stack: Stack, clients: int, requests: int, pipeline: str) -> list[float]:
    latencies: list[float] = []

    async def one_client(user: str) -> None:
        # One MCP client (one connection, as an assistant keeps) per concurrent user, connected before timing.
        http = httpx2.AsyncClient(headers=stack.auth(user), timeout=httpx2.Timeout(120))
        async with http, Client(streamable_http_client(f"{stack.base_url}/mcp", http_client=http)) as client:
            for _ in range(requests):
                start = time.perf_counter()
                result = await client.call_tool("ask", {"question": QUESTION, "strategy": pipeline})
                if result.is_error:
                    raise RuntimeError(result.content)
                latencies.append(time.perf_counter() - start)

    await asyncio.gather(*(one_client(user) for user, _ in zip(itertools.cycle(USERS), range(clients))))
    return latencies


def line(name: str, values: list[float]) -> str:
    return (f"{name:10} p50 {percentile(values, 0.5) * 1000:7.1f} ms   p95 {percentile(values, 0.95) * 1000:7.1f} ms"
            f"   ({len(values)} answers)")


async def main_async(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp, server_stack(Path(tmp), workers=args.workers,
                                                            extra_env=NO_RATE_LIMIT) as stack:
        # Warm both paths (pipelines built, models loaded in every worker) before anything is timed.
        await http_round(stack, args.clients, 2, args.pipeline)
        await mcp_round(stack, args.clients, 2, args.pipeline)
        by_path: dict[str, list[float]] = {"/v1/query": [], "MCP ask": []}
        for _ in range(args.rounds):
            by_path["/v1/query"] += await http_round(stack, args.clients, args.requests, args.pipeline)
            by_path["MCP ask"] += await mcp_round(stack, args.clients, args.requests, args.pipeline)
    print(f"ask through MCP vs POST /v1/query: {args.clients} concurrent clients, pipeline {args.pipeline}, "
          f"{args.workers} worker(s), scripted LLM on loopback")
    for name, values in by_path.items():
        print(line(name, values))
    http_values, mcp_values = by_path["/v1/query"], by_path["MCP ask"]
    print(f"overhead   p50 {(percentile(mcp_values, 0.5) - percentile(http_values, 0.5)) * 1000:+7.1f} ms   "
          f"p95 {(percentile(mcp_values, 0.95) - percentile(http_values, 0.95)) * 1000:+7.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=30, help="answers per client per round and path")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--pipeline", default="standard")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
