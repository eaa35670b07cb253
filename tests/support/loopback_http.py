"""A real HTTP server on loopback for tests of code that fetches URLs: each path is answered by a route (a function
writing the reply), every request path is recorded.

Usage:
    with LoopbackSite({"/page.html": reply(b"<p>Hi</p>", "text/html"), "*": reply(b"{}")}) as site:
        httpx.get(site.url("/page.html"))
        assert site.hits == ["/page.html"]
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Route = Callable[[BaseHTTPRequestHandler], None]


def reply(body: bytes, content_type: str = "application/json", status: int = 200) -> Route:
    """Sends `body` whole, with its length."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return route


def delayed(delay_s: float, route: Route) -> Route:
    """`route`, answered only after `delay_s` seconds of silence."""

    def slow(handler: BaseHTTPRequestHandler) -> None:
        time.sleep(delay_s)
        route(handler)

    return slow


def trickle(piece: bytes, times: int, interval_s: float, content_type: str = "text/plain") -> Route:
    """Sends `piece` `times` times, `interval_s` apart, with no length: each read gets bytes, the body never ends
    soon."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        handler.end_headers()
        for _ in range(times):
            handler.wfile.write(piece)
            handler.wfile.flush()
            time.sleep(interval_s)

    return route


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, Route]
    hits: list[str]

    def do_GET(self) -> None:
        type(self).hits.append(self.path)
        route = type(self).routes.get(self.path.split("?")[0]) or type(self).routes.get("*")
        (route or reply(b"not found", "text/plain", status=404))(self)

    # POSTs (an LLM client's completions) are recorded and routed like GETs; their bodies are not read.
    do_POST = do_GET

    def log_message(self, *args: Any) -> None:
        pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True  # closing must not wait for a handler still sleeping or trickling

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients under test hang up on slow and oversized replies on purpose


class LoopbackSite:
    """Serves `routes` (path without query -> route; "*" for any other path, else 404) on `host`, port chosen
    by the system, until `close()` or the end of its `with` block."""

    def __init__(self, routes: dict[str, Route], host: str = "127.0.0.1") -> None:
        self.hits: list[str] = []
        handler = type("Handler", (_Handler,), {"routes": routes, "hits": self.hits})
        self.server = _QuietServer((host, 0), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://{host}:{self.server.server_address[1]}"

    def url(self, path: str) -> str:
        return self.base + path

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self) -> LoopbackSite:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
