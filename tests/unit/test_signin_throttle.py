"""Sign-in throttling in one process: failed sign-ins are counted per address and per key id, and past the
threshold they get 429 with Retry-After, while a credential that verifies is never refused by the counts."""

from __future__ import annotations

from collections import Counter

import pytest
from fastapi.testclient import TestClient

from docqa.server.signin_throttle import LocalFailureCounter, SigninThrottle, ThrottleLimits
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def throttle(per_address: int = 3, per_key: int = 2, window_s: int = 60) -> tuple[SigninThrottle, Clock]:
    clock = Clock()
    limits = ThrottleLimits(per_address=per_address, per_key=per_key, window_s=window_s)
    return SigninThrottle(limits, LocalFailureCounter(window_s, clock=clock)), clock


class TestSigninThrottle:
    def test_past_the_address_threshold_a_failure_must_wait_until_the_window_ends(self):
        limiter, clock = throttle()
        assert [limiter.failed(address="10.0.0.1", key_id=None) for _ in range(3)] == [None] * 3
        clock.now += 20
        assert limiter.failed(address="10.0.0.1", key_id=None) == 40
        assert limiter.failed(address="10.0.0.2", key_id=None) is None  # another address has its own count
        clock.now += 40
        assert limiter.failed(address="10.0.0.1", key_id=None) is None  # a new window

    def test_a_key_id_is_counted_across_addresses(self):
        limiter, _ = throttle(per_address=100, per_key=2)
        waits = [limiter.failed(address=f"10.0.0.{n}", key_id="k" * 16) for n in range(4)]
        assert waits[:2] == [None, None] and all(w == 60 for w in waits[2:])

    def test_zero_turns_a_counter_off(self):
        limiter, _ = throttle(per_address=0, per_key=0)
        assert all(limiter.failed(address="a", key_id="k") is None for _ in range(50))

    def test_the_worker_tracks_a_bounded_number_of_sources(self):
        counter = LocalFailureCounter(60, max_sources=100)
        for n in range(1000):
            counter.add(f"ip:{n}")
        assert len(counter._counts) == 100


@pytest.fixture
def server(tmp_path):
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris."),
                               signin_max_failures_per_address=20, signin_max_failures_per_key=5)
    with TestClient(app) as client:
        yield client, keys


def wrong_key(n: int) -> str:
    return f"dq_{n:016x}_not-a-real-secret-{n}"


def test_two_hundred_wrong_keys_get_429_with_retry_after_and_a_valid_key_still_works(server):
    client, keys = server
    responses = [client.get("/v1/me", headers=auth(wrong_key(n))) for n in range(200)]
    codes = Counter(r.status_code for r in responses)
    assert codes == {401: 20, 429: 180}
    assert [r.status_code for r in responses[:20]] == [401] * 20
    limited = responses[-1]
    assert limited.json()["error"]["code"] == "rate_limited" and 1 <= int(limited.headers["Retry-After"]) <= 300
    # Same client address (the test client's), a valid key: answered, and again after more failures.
    assert client.get("/v1/me", headers=auth(keys["alice"])).status_code == 200
    assert client.get("/v1/me", headers=auth("not even a key")).status_code == 429
    assert client.get("/v1/me", headers=auth(keys["bob"])).status_code == 200


def test_bad_secrets_for_a_key_id_do_not_lock_its_owner_out(tmp_path):
    app, keys = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris."),
                               signin_max_failures_per_address=0, signin_max_failures_per_key=5)
    with TestClient(app) as client:
        key_id = keys["alice"].split("_")[1]
        guesses = [client.get("/v1/me", headers=auth(f"dq_{key_id}_guess{n}")).status_code for n in range(8)]
        assert guesses == [401] * 5 + [429] * 3
        assert client.get("/v1/me", headers=auth(keys["alice"])).status_code == 200
        # Another key id from the same address is not affected by alice's key id's failures.
        assert client.get("/v1/me", headers=auth(wrong_key(1))).status_code == 401


def test_bad_tokens_and_malformed_credentials_count_too(tmp_path):
    app, _ = build_test_app(tmp_path, ScriptedChatGenerator(default="Paris."), signin_max_failures_per_address=3)
    with TestClient(app) as client:
        credentials = ["eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln", "garbage", "dq_short_x", "eyJ.eyJ.x"]
        assert [client.get("/v1/me", headers=auth(c)).status_code for c in credentials] == [401, 401, 401, 429]


def test_an_unreachable_redis_falls_back_to_counting_in_the_worker(caplog):
    import logging

    from docqa.server.signin_throttle import RedisFailureCounter

    # Nothing listens on port 1; the password must not reach the log.
    counter = RedisFailureCounter("redis://:hunter2-signin@127.0.0.1:1/0", window_s=60, timeout_s=0.2)
    limiter = SigninThrottle(ThrottleLimits(per_address=2, per_key=0, window_s=60), counter)
    with caplog.at_level(logging.WARNING, logger="docqa.server.signin_throttle"):
        waits = [limiter.failed(address="10.0.0.9", key_id=None) for _ in range(3)]
    assert waits[:2] == [None, None] and waits[2] is not None
    assert len([r for r in caplog.records if "sign-in throttle unavailable" in r.getMessage()]) == 1
    assert "hunter2" not in caplog.text
