"""Sign-in throttling: failed sign-ins counted per source address and per key id; past a threshold, 429.

Every failed credential (a bad or revoked API key, a bad token, anything malformed) adds one to the counter of
its client address and, when it names a key id (`dq_<id>_...`), to that key id's counter. While a counter is
over its threshold, further *failed* attempts from that address or for that key id get 429 with `Retry-After`
(until the counter's window ends) instead of 401.

A credential that verifies is never refused here, whatever the counters say: key ids are not secret (audit
events and logs name them) and many users may share one address (a proxy, an office NAT), so refusing before
verification would let anyone lock a colleague out. Verification stays cheap and bounded (one primary-key read
and a constant-time digest comparison, or a JWT signature check against cached keys), and secrets are 256-bit
random, so guessing is not what this guards against: it bounds and flags floods of bad credentials.

Counters live in Redis when a URL is configured (one count across every worker and machine, Redis' clock
for the windows), else in the worker; while Redis is unreachable each worker counts on its own.

Usage:
    throttle = build_signin_throttle(settings)
    wait = throttle.failed(address="10.0.0.7", key_id="0123456789abcdef")   # after a credential failed
    if wait: raise 429 with Retry-After: wait
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ThrottleLimits:
    """Failures allowed per window before 429: per address and per key id (0 turns that counter off)."""

    per_address: int = 30
    per_key: int = 10
    window_s: int = 300

    @property
    def enabled(self) -> bool:
        return self.per_address > 0 or self.per_key > 0


class LocalFailureCounter:
    """Fixed-window failure counts in this process, for at most `max_sources` sources (oldest dropped)."""

    def __init__(self, window_s: int, max_sources: int = 20_000, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = window_s
        self.max_sources = max_sources
        self._clock = clock
        self._counts: OrderedDict[str, tuple[int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, source: str) -> tuple[int, float]:
        """Count one failure of `source`: (failures in its current window, seconds until the window ends)."""
        now = self._clock()
        with self._lock:
            count, started = self._counts.pop(source, (0, now))
            if now - started >= self.window_s:
                count, started = 0, now
            count += 1
            self._counts[source] = (count, started)
            while len(self._counts) > self.max_sources:
                self._counts.popitem(last=False)
        return count, max(0.0, started + self.window_s - now)


# INCR, and start the window's expiry at the first failure: Redis' own clock ends every worker's window.
_COUNT_LUA = """
local count = redis.call('INCR', KEYS[1])
if count == 1 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
end
local ttl = redis.call('TTL', KEYS[1])
if ttl < 0 then
  redis.call('EXPIRE', KEYS[1], ARGV[1])
  ttl = tonumber(ARGV[1])
end
return {count, ttl}
"""


class RedisFailureCounter:
    """The same counts shared by every worker through Redis; counts in the worker while Redis is unreachable,
    asking Redis again only every `retry_s`."""

    def __init__(self, url: str, window_s: int, prefix: str = "docqa:signin:", timeout_s: float = 0.5,
                 retry_s: float = 5.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.local = LocalFailureCounter(window_s, clock=clock)
        self.window_s = window_s
        self.prefix = prefix
        self.retry_s = retry_s
        self._clock = clock
        self._client = redis.Redis.from_url(url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s)
        self._script = self._client.register_script(_COUNT_LUA)
        self._down_until: float | None = None

    def add(self, source: str) -> tuple[int, float]:
        if self._down_until is not None and self._clock() < self._down_until:
            return self.local.add(source)
        try:
            count, ttl = self._script(keys=[self.prefix + source], args=[self.window_s])
        except (redis.RedisError, OSError) as exc:
            if self._down_until is None:
                logger.warning("shared sign-in throttle unavailable (%s); counting per worker until Redis is back",
                               type(exc).__name__)
            self._down_until = self._clock() + self.retry_s
            return self.local.add(source)
        if self._down_until is not None:
            logger.info("shared sign-in throttle available again")
            self._down_until = None
        return int(count), float(ttl)

    def close(self) -> None:
        self._client.close()


class SigninThrottle:
    """Counts failed sign-ins per address and per key id and says how long a throttled source must wait."""

    def __init__(self, limits: ThrottleLimits, counter: LocalFailureCounter | RedisFailureCounter) -> None:
        self.limits = limits
        self.counter = counter

    def failed(self, *, address: str, key_id: str | None) -> int | None:
        """Count one failed sign-in; the seconds to wait (Retry-After) when a counter is past its threshold."""
        if not self.limits.enabled:
            return None
        waits: list[float] = []
        sources = [(f"ip:{address}", self.limits.per_address)]
        if key_id:
            sources.append((f"key:{key_id}", self.limits.per_key))
        for source, threshold in sources:
            if threshold <= 0:
                continue
            count, remaining = self.counter.add(source)
            if count > threshold:
                waits.append(remaining)
        return max(1, math.ceil(max(waits))) if waits else None

    def close(self) -> None:
        if isinstance(self.counter, RedisFailureCounter):
            self.counter.close()


def build_signin_throttle(settings: Any) -> SigninThrottle:
    """From the server settings: `signin_max_failures_per_address`, `_per_key`, `signin_failure_window_s`;
    shared through `rate_limit_redis_url` when it is set."""
    limits = ThrottleLimits(per_address=settings.signin_max_failures_per_address,
                            per_key=settings.signin_max_failures_per_key, window_s=settings.signin_failure_window_s)
    url = settings.rate_limit_redis_url
    counter = RedisFailureCounter(url, limits.window_s) if url else LocalFailureCounter(limits.window_s)
    return SigninThrottle(limits, counter)
