"""Request limits: body size, rate per API key, concurrent queries per worker.

Overload is answered at once or after a bounded wait with 429/503 and `Retry-After`; nothing waits forever.
Concurrency is counted per worker. The rate is counted per worker by `RateLimiter`, or across every worker
and machine by `RedisRateLimiter` (one bucket per key in Redis), which falls back to the local bucket
while Redis cannot be reached, so an outage never turns into unlimited requests or refused service.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis

from docqa.server.api_errors import ApiError, send_asgi_error

ASGIApp = Any

logger = logging.getLogger(__name__)


class BodySizeLimitMiddleware:
    """Rejects bodies above a limit with 413 before the app reads them (Content-Length) or while streaming.

    `upload_prefixes` get `upload_limit`, everything else `json_limit`.
    """

    def __init__(self, app: ASGIApp, json_limit: int, upload_limit: int, upload_prefixes: tuple[str, ...]) -> None:
        if json_limit < 1 or upload_limit < 1:
            raise ValueError("body limits must be positive")
        self.app = app
        self.json_limit = json_limit
        self.upload_limit = upload_limit
        self.upload_prefixes = upload_prefixes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path: str = scope.get("path", "")
        limit = self.upload_limit if path.startswith(self.upload_prefixes) else self.json_limit
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _send_too_large(send, limit)
            return
        received = 0
        response_started = False

        async def limited_receive() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise _BodyTooLarge()
            return message

        async def tracking_send(message: dict[str, Any]) -> None:
            nonlocal response_started
            if message["type"] == "http.response.start":
                response_started = True
            await send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except _BodyTooLarge:
            if not response_started:
                await _send_too_large(send, limit)


class _BodyTooLarge(Exception):
    pass


async def _send_too_large(send: Any, limit: int) -> None:
    await send_asgi_error(send, 413, "request_too_large", f"request body exceeds {limit} bytes")


class RateLimiter:
    """Token bucket per key: `per_minute` sustained, `burst` at once. Thread-safe."""

    def __init__(self, per_minute: int, burst: int, clock: Any = time.monotonic) -> None:
        if per_minute < 1 or burst < 1:
            raise ValueError("rate limits must be positive")
        self.rate = per_minute / 60.0
        self.burst = float(burst)
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def check(self, key: str) -> None:
        """Take one token for `key`; raises a 429 `ApiError` with Retry-After when the bucket is empty."""
        now = self._clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (self.burst, now))
            tokens = min(self.burst, tokens + (now - last) * self.rate)
            if tokens < 1.0:
                self._buckets[key] = (tokens, now)
                raise _rate_limited(tokens, self.rate)
            self._buckets[key] = (tokens - 1.0, now)


# Redis' own clock, so that workers on machines whose clocks drift apart still share one refill schedule.
# Token counts go back as strings: Redis truncates Lua numbers to integers in replies.
_TOKEN_BUCKET_LUA = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local state = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(state[1]) or burst
local at = tonumber(state[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate)
local allowed = 0
if tokens >= 1 then
  tokens = tokens - 1
  allowed = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
redis.call('EXPIRE', KEYS[1], math.ceil(burst / rate) + 1)
return {allowed, tostring(tokens)}
"""


class RedisRateLimiter:
    """Token bucket per key shared by every worker through Redis: `per_minute` sustained, `burst` at once.

    Usage:
        limiter = RedisRateLimiter("redis://redis:6379/2", per_minute=600, burst=60)
        limiter.check(caller.key_id)  # raises a 429 ApiError with Retry-After when the key's bucket is empty

    While Redis is unreachable each worker limits with its own bucket (`RateLimiter`) and logs the outage;
    after a failure Redis is asked again only every `retry_s`, so an outage does not add a connect timeout to
    every request.
    """

    def __init__(self, url: str, per_minute: int, burst: int, prefix: str = "docqa:rate:",
                 timeout_s: float = 0.5, retry_s: float = 5.0, clock: Any = time.monotonic) -> None:
        self.local = RateLimiter(per_minute, burst, clock=clock)
        self.prefix = prefix
        self.retry_s = retry_s
        self._clock = clock
        self._client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._script = self._client.register_script(_TOKEN_BUCKET_LUA)
        self._down_until: float | None = None

    def check(self, key: str) -> None:
        """Take one token for `key` from the shared bucket; raises a 429 `ApiError` when it is empty."""
        if self._down_until is not None and self._clock() < self._down_until:
            self.local.check(key)
            return
        try:
            allowed, tokens = self._script(keys=[self.prefix + key], args=[self.local.rate, self.local.burst])
        except (redis.RedisError, OSError) as exc:
            if self._down_until is None:
                logger.warning("shared rate limit unavailable (%s); limiting per worker until Redis is back",
                               type(exc).__name__)
            self._down_until = self._clock() + self.retry_s
            self.local.check(key)
            return
        if self._down_until is not None:
            logger.info("shared rate limit available again")
            self._down_until = None
        if not int(allowed):
            raise _rate_limited(float(tokens), self.local.rate)

    def close(self) -> None:
        self._client.close()


def _rate_limited(tokens: float, rate: float) -> ApiError:
    wait = max(1, math.ceil((1.0 - tokens) / rate))
    return ApiError(429, "rate_limited", "too many requests for this API key", headers={"Retry-After": str(wait)})


def build_rate_limiter(url: str | None, per_minute: int, burst: int) -> RateLimiter | RedisRateLimiter:
    """The shared limiter when a Redis URL is configured, the per-worker one otherwise."""
    if url:
        return RedisRateLimiter(url, per_minute, burst)
    return RateLimiter(per_minute, burst)


class QuerySlots:
    """At most `limit` queries at once in this worker; a query waits at most `wait_s` for a slot, then 503."""

    def __init__(self, limit: int, wait_s: float, retry_after_s: int) -> None:
        if limit < 1 or wait_s < 0:
            raise ValueError("limit must be positive and wait_s non-negative")
        self.limit = limit
        self.wait_s = wait_s
        self.retry_after_s = retry_after_s
        self._semaphore: asyncio.Semaphore | None = None
        self.in_use = 0

    async def take(self) -> None:
        """Take a slot, waiting at most `wait_s`; raises a 503 `ApiError` with Retry-After when none frees up."""
        # Created lazily so the semaphore binds to the worker's running event loop.
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.limit)
        try:
            await asyncio.wait_for(self._semaphore.acquire(), timeout=self.wait_s or 0.001)
        except TimeoutError:
            raise ApiError(
                503,
                "overloaded",
                "the server is busy; retry later",
                headers={"Retry-After": str(self.retry_after_s)},
            ) from None
        self.in_use += 1

    def give_back(self) -> None:
        if self._semaphore is None or self.in_use < 1:
            raise RuntimeError("give_back() without take()")
        self.in_use -= 1
        self._semaphore.release()

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[None]:
        await self.take()
        try:
            yield
        finally:
            self.give_back()
