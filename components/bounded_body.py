"""The body of a streamed HTTP response, read within a byte cap and a deadline for the whole read."""

from __future__ import annotations

import time

import httpx


class BodyTooLarge(Exception):
    """The body went over its byte cap; the rest was not read."""


def read_bounded(response: httpx.Response, max_bytes: int, deadline: float, what: str) -> bytes:
    """
    Reads `response` chunk by chunk and stops as soon as either bound is passed.

    httpx's timeout bounds each read, so a server trickling bytes would keep a request alive forever; the deadline
    bounds the whole read instead.

    :param response: A streamed response (`client.stream(...)`) whose body has not been read.
    :param max_bytes: Largest body accepted; a larger one raises `BodyTooLarge("<what> larger than N bytes")`.
    :param deadline: A `time.monotonic()` instant; reading past it raises `httpx.ReadTimeout`.
    :param what: Names the body in the `BodyTooLarge` message ("page", "response").
    :returns: The whole body.

    Usage example:
    ```python
    deadline = time.monotonic() + 5.0
    with httpx.Client(timeout=5.0) as client, client.stream("GET", url) as response:
        body = read_bounded(response, 1_000_000, deadline, "page")
    ```
    """
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        size += len(chunk)
        if size > max_bytes:
            raise BodyTooLarge(f"{what} larger than {max_bytes} bytes")
        if time.monotonic() > deadline:
            raise httpx.ReadTimeout("deadline passed", request=response.request)
        chunks.append(chunk)
    return b"".join(chunks)
