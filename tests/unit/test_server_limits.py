"""Rate limiting, query slots and the auto pipeline selection, without a server."""

from __future__ import annotations

import asyncio

import pytest

from docqa.questions.strategy_choice import choose_pipeline, classify
from docqa.server.api_errors import ApiError
from docqa.server.limits import QuerySlots, RateLimiter


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TestRateLimiter:
    def test_burst_then_refill(self):
        clock = FakeClock()
        limiter = RateLimiter(per_minute=60, burst=2, clock=clock)
        limiter.check("k")
        limiter.check("k")
        with pytest.raises(ApiError) as caught:
            limiter.check("k")
        assert (caught.value.status, caught.value.code) == (429, "rate_limited")
        assert caught.value.headers["Retry-After"] == "1"
        clock.now = 1.0
        limiter.check("k")

    def test_keys_have_separate_buckets(self):
        limiter = RateLimiter(per_minute=1, burst=1, clock=FakeClock())
        limiter.check("a")
        limiter.check("b")
        with pytest.raises(ApiError):
            limiter.check("a")

    def test_rejects_nonsense_limits(self):
        with pytest.raises(ValueError):
            RateLimiter(per_minute=0, burst=1)


class TestQuerySlots:
    async def test_waits_for_a_free_slot_then_gives_up_with_503(self):
        slots = QuerySlots(limit=1, wait_s=0.05, retry_after_s=3)
        await slots.take()
        with pytest.raises(ApiError) as caught:
            await slots.take()
        assert (caught.value.status, caught.value.headers["Retry-After"]) == (503, "3")
        slots.give_back()
        async with slots.acquire():
            assert slots.in_use == 1
        assert slots.in_use == 0

    async def test_a_waiting_query_gets_the_slot_when_it_frees(self):
        slots = QuerySlots(limit=1, wait_s=5, retry_after_s=1)
        await slots.take()
        waiter = asyncio.create_task(slots.take())
        await asyncio.sleep(0.01)
        assert not waiter.done()
        slots.give_back()
        await asyncio.wait_for(waiter, timeout=1)
        assert slots.in_use == 1

    def test_give_back_without_take_is_an_error(self):
        with pytest.raises(RuntimeError):
            QuerySlots(limit=1, wait_s=0, retry_after_s=1).give_back()


class TestAutoSelection:
    @pytest.mark.parametrize("question,kind", [
        ("Who wrote Hamlet?", "simple"),
        ("Which film came out first, Alien or Heat?", "multi_hop"),
        ("Were both bands formed in London?", "multi_hop"),
        ("Who is the mother of the director of the film Heat?", "multi_hop"),
        ("Summarize the expense policy.", "summary"),
        (" ".join(["word"] * 20) + "?", "multi_hop"),
    ])
    def test_question_types(self, question, kind):
        assert classify(question)[0] == kind

    def test_prefers_registered_strategies_and_says_why(self):
        choice = choose_pipeline("Which film came out first, Alien or Heat?", ["standard", "resp"])
        assert choice.name == "resp"
        assert "multi-hop cue 'which'" in choice.reason
        fallback = choose_pipeline("Which film came out first?", ["standard"])
        assert fallback.name == "standard"
        assert choose_pipeline("Who wrote Hamlet?", ["no_retrieval"]).name == "no_retrieval"
        with pytest.raises(ValueError):
            choose_pipeline("q", [])
