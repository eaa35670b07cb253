"""Against a real gunicorn server with two workers sharing Redis: failed sign-ins are throttled across workers
(one count in Redis, 429 with Retry-After past the threshold) while valid keys keep working, and the audit
endpoints answer out-of-range times with a 422, never a 500."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.support.celery_workers import redis_broker_url
from tests.support.server_stack import Stack, server_stack

pytestmark = pytest.mark.integration

REDIS_DB = 13
THRESHOLD = 30


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    url = redis_broker_url(REDIS_DB)
    redis.Redis.from_url(url).flushdb()
    env = {"DOCQA_RATE_LIMIT_REDIS_URL": url, "DOCQA_SIGNIN_MAX_FAILURES_PER_ADDRESS": str(THRESHOLD),
           "DOCQA_SIGNIN_MAX_FAILURES_PER_KEY": "10", "DOCQA_SIGNIN_FAILURE_WINDOW_S": "300"}
    workdir: Path = tmp_path_factory.mktemp("signin-throttle")
    with server_stack(workdir, workers=2, extra_env=env) as running:
        yield running


def fresh_get(stack: Stack, path: str, headers: dict[str, str], **params: str) -> httpx.Response:
    # A new connection per request, so both workers take requests.
    return httpx.get(f"{stack.base_url}{path}", headers=headers, params=params, timeout=30)


@pytest.mark.parametrize("edge", ["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"])
def test_access_at_an_out_of_range_time_is_a_422_with_a_message(stack, edge):
    response = fresh_get(stack, "/v1/audit/access", stack.auth("audrey"), principal="user:alice",
                         document="quillfeather.txt", at=edge)
    assert response.status_code == 422, response.text
    assert "out of range" in response.json()["error"]["message"]
    for name in ("since", "until"):
        assert fresh_get(stack, "/v1/traces", stack.auth("audrey"), **{name: edge}).status_code == 422


def test_two_hundred_wrong_keys_are_throttled_across_both_workers_and_valid_keys_keep_working(stack):
    client = redis.Redis.from_url(redis_broker_url(REDIS_DB))
    statuses: Counter[int] = Counter()
    retry_after: set[int] = set()
    for n in range(200):
        response = fresh_get(stack, "/v1/me", {"Authorization": f"Bearer dq_{n:016x}_wrong-secret-{n}"})
        statuses[response.status_code] += 1
        if response.status_code == 429:
            assert response.json()["error"]["code"] == "rate_limited"
            retry_after.add(int(response.headers["Retry-After"]))
        if n % 50 == 0:
            # A valid key from the same address is answered at every point of the flood.
            assert fresh_get(stack, "/v1/me", stack.auth("alice")).status_code == 200
    # One count for both workers: per-worker counts would let up to twice the threshold through.
    assert statuses == Counter({401: THRESHOLD, 429: 200 - THRESHOLD})
    assert retry_after and all(1 <= wait <= 300 for wait in retry_after)
    assert int(client.get("docqa:signin:ip:127.0.0.1")) == 200
    assert [fresh_get(stack, "/v1/me", stack.auth(user)).status_code for user in ("alice", "bob", "audrey")] == [
        200, 200, 200]
