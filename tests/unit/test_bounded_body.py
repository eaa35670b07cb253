"""read_bounded against a real server on loopback: the byte cap is exact and the deadline bounds the whole read,
even while every single read gets bytes in time."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from docqa.components.bounded_body import BodyTooLarge, read_bounded
from tests.support.loopback_http import LoopbackSite, reply, trickle

BODY = bytes(range(256)) * 40  # 10,240 bytes, more than one chunk


@pytest.fixture(scope="module")
def site() -> Iterator[LoopbackSite]:
    routes = {
        "/body": reply(BODY, "application/octet-stream"),
        "/trickle": trickle(b"0123456789", 40, 0.1),
        "/short-trickle": trickle(b"0123456789", 4, 0.05),
    }
    with LoopbackSite(routes) as served:
        yield served


def _read(url: str, max_bytes: int, within_s: float, read_timeout_s: float = 5.0) -> bytes:
    deadline = time.monotonic() + within_s
    with httpx.Client(timeout=read_timeout_s) as client, client.stream("GET", url) as response:
        return read_bounded(response, max_bytes, deadline, "page")


def test_a_body_up_to_the_cap_is_read_whole(site):
    assert _read(site.url("/body"), len(BODY), 5.0) == BODY


def test_one_byte_over_the_cap_is_refused_with_what_it_is(site):
    with pytest.raises(BodyTooLarge) as refused:
        _read(site.url("/body"), len(BODY) - 1, 5.0)
    assert str(refused.value) == f"page larger than {len(BODY) - 1} bytes"


def test_a_trickling_body_is_cut_at_the_deadline_though_no_single_read_times_out(site):
    # 40 pieces 0.1 s apart: each read waits far less than the client's 2 s timeout, the whole body takes 4 s.
    started = time.monotonic()
    with pytest.raises(httpx.ReadTimeout):
        _read(site.url("/trickle"), 1_000_000, 0.5, read_timeout_s=2.0)
    assert 0.5 <= time.monotonic() - started < 1.5


def test_a_trickle_that_ends_before_the_deadline_is_read_whole(site):
    assert _read(site.url("/short-trickle"), 1_000_000, 5.0) == b"0123456789" * 4
