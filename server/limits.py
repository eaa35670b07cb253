"""Request limits of one worker process: body size, rate per API key, concurrent queries.

Overload is answered at once or after a bounded wait with 429/503 and `Retry-After`; nothing waits forever.
Rate and concurrency are counted per worker: with N gunicorn workers a key may get up to N times the rate.
"""

from __future__ import annotations

import asyncio
import json
import math
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from docqa.server.api_errors import ApiError, error_body

ASGIApp = Any


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
    body = json.dumps(error_body("request_too_large", f"request body exceeds {limit} bytes")).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})


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
                wait = math.ceil((1.0 - tokens) / self.rate)
                raise ApiError(
                    429, "rate_limited", "too many requests for this API key", headers={"Retry-After": str(wait)}
                )
            self._buckets[key] = (tokens - 1.0, now)


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
