"""A recording OpenAI-compatible proxy: the same request twice gets the same reply, asked of the model once.

Before/after comparisons of answer handling (e.g. the grounding check) need both runs to see the same model
replies. At temperature 0 a llama.cpp server's replies are deterministic, so a reply recorded for a byte-identical
request body is the reply the model would give again: the second run costs only the requests whose prompt
changed. Replies are appended to a JSON-lines file, so an interrupted run resumes with what it had; `--seed`
adds recorded files (plain or gzipped JSON lines, e.g. `bench/recorded/*.jsonl.gz`) read but never written.

Usage:
    python bench/llm_replay_proxy.py --upstream http://127.0.0.1:8081 --cache /tmp/replies.jsonl --port 8090 \
        [--seed bench/recorded/gemma3-270m-multihop-musique.jsonl.gz]
    DOCQA_LLM_BASE_URL=http://127.0.0.1:8090/v1 DOCQA_LLM_MODEL=local DOCQA_LLM_API_KEY=x \\
        python bench/eval_multihop.py ...
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class ReplyCache:
    """Recorded replies by request digest, appended to a JSON-lines file as they arrive."""

    def __init__(self, path: Path, seeds: list[Path] | None = None) -> None:
        self.path = path
        self.replies: dict[str, dict[str, Any]] = {}
        self.lock = threading.Lock()
        self.hits = 0
        self.misses = 0
        for source in [*(seeds or []), path]:
            if source.exists():
                data = source.read_bytes()
                text = (gzip.decompress(data) if source.suffix == ".gz" else data).decode("utf-8")
                for line in text.splitlines():
                    if line.strip():
                        entry = json.loads(line)
                        self.replies[entry["key"]] = entry

    @staticmethod
    def key(path: str, body: bytes) -> str:
        return hashlib.sha256(path.encode() + b"\0" + body).hexdigest()

    def get(self, key: str) -> dict[str, Any] | None:
        with self.lock:
            entry = self.replies.get(key)
            if entry is None:
                self.misses += 1
            else:
                self.hits += 1
            return entry

    def put(self, entry: dict[str, Any]) -> None:
        with self.lock:
            self.replies[entry["key"]] = entry
            with self.path.open("a", encoding="utf-8") as file:
                file.write(json.dumps(entry) + "\n")


def make_handler(upstream: str, cache: ReplyCache, timeout_s: float) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return

        def _send(self, status: int, content_type: str, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _forward(self, method: str, body: bytes | None) -> tuple[int, str, bytes]:
            request = urllib.request.Request(upstream.rstrip("/") + self.path, data=body, method=method)
            request.add_header("Content-Type", self.headers.get("Content-Type", "application/json"))
            try:
                with urllib.request.urlopen(request, timeout=timeout_s) as response:
                    return response.status, response.headers.get("Content-Type", ""), response.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.headers.get("Content-Type", ""), exc.read()

        def do_GET(self) -> None:
            self._send(*self._forward("GET", None))

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            key = cache.key(self.path, body)
            entry = cache.get(key)
            if entry is None:
                status, content_type, reply = self._forward("POST", body)
                if status != 200:  # an error is the upstream's state, not the model's reply: never recorded
                    self._send(status, content_type, reply)
                    return
                entry = {"key": key, "content_type": content_type, "body": reply.decode("utf-8")}
                cache.put(entry)
            self._send(200, entry["content_type"], entry["body"].encode("utf-8"))

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", required=True, help="the OpenAI-compatible server, e.g. http://127.0.0.1:8081")
    parser.add_argument("--cache", type=Path, required=True, help="JSON-lines file of recorded replies")
    parser.add_argument("--seed", type=Path, action="append", default=[],
                        help="recorded replies to replay too, never written (JSON lines, may be gzipped)")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to wait for the upstream")
    args = parser.parse_args(argv)
    cache = ReplyCache(args.cache, args.seed)
    server = ThreadingHTTPServer(("127.0.0.1", args.port), make_handler(args.upstream, cache, args.timeout))
    print(f"replaying {len(cache.replies)} recorded replies on http://127.0.0.1:{args.port}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        print(f"hits {cache.hits}, misses {cache.misses}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
