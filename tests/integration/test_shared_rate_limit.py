"""The per-key rate limit shared through a real Redis on loopback: across limiter instances (one per worker),
across the workers of a real gunicorn server, and degraded to per-worker limits while Redis is unreachable."""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from docqa.server.api_errors import ApiError
from docqa.server.limits import RedisRateLimiter
from tests.support.celery_workers import redis_broker_url
from tests.support.server_stack import Stack, server_stack

pytestmark = pytest.mark.integration

REDIS_DB = 12


@pytest.fixture
def redis_url() -> str:
    return redis_broker_url(REDIS_DB)


def limiter(url: str, prefix: str, *, per_minute: int = 1, burst: int = 3) -> RedisRateLimiter:
    return RedisRateLimiter(url, per_minute=per_minute, burst=burst, prefix=prefix)


def outcome(limiter_: RedisRateLimiter, key: str) -> str:
    try:
        limiter_.check(key)
    except ApiError as exc:
        assert (exc.status, exc.code) == (429, "rate_limited")
        assert int(exc.headers["Retry-After"]) >= 1
        return "limited"
    return "allowed"


class TestRedisRateLimiter:
    def test_workers_share_one_bucket_per_key(self, redis_url):
        prefix = f"test:{uuid.uuid4().hex}:"
        workers = [limiter(redis_url, prefix), limiter(redis_url, prefix)]
        outcomes = [outcome(workers[i % 2], "key-a") for i in range(6)]
        assert outcomes == ["allowed"] * 3 + ["limited"] * 3
        assert outcome(workers[1], "key-b") == "allowed"

    def test_bucket_refills_at_the_configured_rate(self, redis_url):
        prefix = f"test:{uuid.uuid4().hex}:"
        shared = limiter(redis_url, prefix, per_minute=600, burst=1)
        assert [outcome(shared, "k"), outcome(shared, "k")] == ["allowed", "limited"]
        time.sleep(0.25)  # 600/min is one token per 0.1 s
        assert outcome(shared, "k") == "allowed"

    def test_idle_buckets_expire(self, redis_url):
        prefix = f"test:{uuid.uuid4().hex}:"
        shared = limiter(redis_url, prefix, per_minute=60, burst=2)
        shared.check("k")
        ttl = redis.Redis.from_url(redis_url).ttl(prefix + "k")
        assert 0 < ttl <= 3

    def test_unreachable_redis_falls_back_to_the_worker_bucket(self, caplog):
        # Nothing listens on port 1; the password must not reach the log.
        unreachable = "redis://:hunter2-rate-secret@127.0.0.1:1/0"
        degraded = RedisRateLimiter(unreachable, per_minute=1, burst=2, timeout_s=0.2)
        with caplog.at_level(logging.WARNING, logger="docqa.server.limits"):
            outcomes = [outcome(degraded, "k") for _ in range(3)]
        assert outcomes == ["allowed", "allowed", "limited"]
        warnings = [r for r in caplog.records if "shared rate limit unavailable" in r.getMessage()]
        assert len(warnings) == 1
        assert "hunter2" not in caplog.text

    def test_after_a_failure_redis_is_asked_again_only_after_the_retry_interval(self, redis_url):
        prefix = f"test:{uuid.uuid4().hex}:"
        clock = ManualClock()
        shared = RedisRateLimiter(redis_url, per_minute=60, burst=100, prefix=prefix, retry_s=5, clock=clock)
        working, attempts = shared._script, []

        def down(**_kwargs: object) -> None:
            attempts.append(clock.now)
            raise redis.ConnectionError("connection refused")

        shared._script = down
        for _ in range(3):
            shared.check("k")
        assert attempts == [0.0]
        assert not redis.Redis.from_url(redis_url).exists(prefix + "k")
        clock.now = 6.0
        shared._script = working
        shared.check("k")
        assert redis.Redis.from_url(redis_url).exists(prefix + "k")


class ManualClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def limited_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    url = redis_broker_url(REDIS_DB)
    redis.Redis.from_url(url).flushdb()
    env = {"DOCQA_RATE_LIMIT_REDIS_URL": url, "DOCQA_RATE_LIMIT_BURST": "4", "DOCQA_RATE_LIMIT_PER_MINUTE": "1"}
    workdir: Path = tmp_path_factory.mktemp("rate-limited-server")
    with server_stack(workdir, workers=2, extra_env=env) as running:
        yield running


def test_two_gunicorn_workers_enforce_one_rate(limited_stack):
    statuses: Counter[int] = Counter()
    for _ in range(12):
        # A fresh connection per request, so that both workers take requests.
        response = httpx.get(f"{limited_stack.base_url}/v1/me", headers=limited_stack.auth("alice"), timeout=30)
        statuses[response.status_code] += 1
        if response.status_code == 429:
            assert response.json()["error"]["code"] == "rate_limited"
            assert int(response.headers["Retry-After"]) >= 1
    assert statuses == Counter({200: 4, 429: 8})
