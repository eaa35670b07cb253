"""A loopback OpenAI-compatible chat server with scripted answers (tests and benchmarks only).

It runs as a real HTTP server process, so the server under test uses exactly the production client path
(Haystack's OpenAIChatGenerator over HTTP). Answers:
- requests with a JSON-schema `response_format` get the smallest object valid for the schema (first enum
  values, so Yes/No judges say "Yes" and loops end);
- other requests get `--answer` in `fixed` mode, or in `echo` mode the answer followed by the whole prompt,
  so anything retrieval put into a prompt shows up in the answer (what access-control tests look for), or in
  `prompt_first` mode the whole prompt followed by the answer (a base model continuing its prompt);
- `adversarial` mode answers like a model that never lets a loop end: judges say "No", graders fail, and
  every plan, rewrite and answer is new text (what cost-bound tests and the abuse benchmark need).

    python tests/support/scripted_openai_server.py --port 0 --mode echo   # prints "listening on http://..."

Usage from a test:
    with scripted_openai_server(mode="echo") as base_url:   # e.g. http://127.0.0.1:41234/v1
        ...
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "scripted"


def value_for(schema: dict[str, Any], adversarial: bool = False) -> Any:
    """The smallest value valid for a (simple) JSON schema; `adversarial`: the last enum value and never the
    same string twice, so judges say "No", graders fail and every plan or rewrite looks new."""
    if "enum" in schema:
        return schema["enum"][-1 if adversarial else 0]
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object":
        props = schema.get("properties", {})
        return {name: value_for(props.get(name, {}), adversarial) for name in schema.get("required", list(props))}
    if kind == "array":
        return [value_for(schema.get("items", {}), adversarial) for _ in range(schema.get("minItems", 0))]
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    return f"n/a {uuid.uuid4().hex[:8]}" if adversarial else "n/a"


def answer_for(request: dict[str, Any], mode: str, answer: str) -> str:
    adversarial = mode == "adversarial"
    response_format = request.get("response_format") or {}
    if response_format.get("type") == "json_schema":
        return json.dumps(value_for(response_format.get("json_schema", {}).get("schema", {}), adversarial))
    if response_format.get("type") == "json_object":
        schema = response_format.get("schema")
        return json.dumps(value_for(schema, adversarial)) if adversarial and schema else "{}"
    if mode == "fixed":
        return answer
    if adversarial:
        return f"{answer} {uuid.uuid4().hex[:8]}"
    prompt = "\n".join(_text(m.get("content")) for m in request.get("messages", []))
    return f"{prompt}\n{answer}" if mode == "prompt_first" else f"{answer}\n{prompt}"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def make_handler(mode: str, answer: str, delay_s: float, calls_log: str | None = None) -> type[BaseHTTPRequestHandler]:
    log_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_args: Any) -> None:  # quiet: tests read stdout for the address only
            pass

        def _send_json(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path.rstrip("/").endswith("/models"):
                self._send_json(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "created": 0,
                                                                  "owned_by": "tests"}]})
            else:
                self._send_json(404, {"error": {"message": "not found"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                request = json.loads(self.rfile.read(length) or b"{}")
            except json.JSONDecodeError:
                self._send_json(400, {"error": {"message": "invalid JSON"}})
                return
            if not self.path.rstrip("/").endswith("/chat/completions"):
                self._send_json(404, {"error": {"message": "not found"}})
                return
            if calls_log:
                # Arrival time and prompt of every completion request, so tests can tell when a run stopped calling.
                prompt = "\n".join(_text(m.get("content")) for m in request.get("messages", []))
                with log_lock, open(calls_log, "a") as log:
                    log.write(json.dumps({"t": time.time(), "prompt": prompt}) + "\n")
            if delay_s:
                time.sleep(delay_s)
            text = answer_for(request, mode, answer)
            prompt_chars = sum(len(_text(m.get("content"))) for m in request.get("messages", []))
            usage = {"prompt_tokens": max(1, prompt_chars // 4), "completion_tokens": max(1, len(text) // 4)}
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "created": int(time.time()),
                    "model": request.get("model") or MODEL}
            if request.get("stream"):
                self._stream(base, text, usage)
                return
            self._send_json(200, {**base, "object": "chat.completion", "usage": usage, "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                 "logprobs": None}]})

        def _stream(self, base: dict[str, Any], text: str, usage: dict[str, int]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            pieces = [text[i : i + 32] for i in range(0, len(text), 32)] or [""]
            for index, piece in enumerate(pieces):
                delta = {"content": piece, **({"role": "assistant"} if index == 0 else {})}
                chunk = {**base, "object": "chat.completion.chunk",
                         "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            final = {**base, "object": "chat.completion.chunk", "usage": usage,
                     "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
            self.wfile.write(f"data: {json.dumps(final)}\n\ndata: [DONE]\n\n".encode())
            self.close_connection = True

    return Handler


def llm_calls_since(calls_log: str | os.PathLike[str], instant: float, containing: str = "") -> int:
    """Completion requests that arrived after `instant` whose prompt contains `containing`."""
    if not os.path.exists(calls_log):
        return 0
    with open(calls_log) as log:
        calls = [json.loads(line) for line in log if line.strip()]
    return sum(1 for call in calls if call["t"] > instant and containing in call["prompt"])


@contextmanager
def scripted_openai_server(mode: str = "echo", answer: str = "Scripted answer.", delay_ms: int = 0,
                           calls_log: str | None = None) -> Iterator[str]:
    """Run the server in a child process on a free loopback port; yields its `/v1` base URL.

    :param calls_log: a file that gets one JSON line per completion request: `t` (arrival, epoch seconds) and
        `prompt`; `llm_calls_since` reads it.
    """
    process = subprocess.Popen(
        [sys.executable, os.path.abspath(__file__), "--port", "0", "--mode", mode, "--answer", answer,
         "--delay-ms", str(delay_ms), *(["--calls-log", calls_log] if calls_log else [])],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"scripted OpenAI server did not start: {line!r}")
        yield line.split()[-1] + "/v1"
    finally:
        process.terminate()
        process.wait(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--mode", choices=["echo", "prompt_first", "fixed", "adversarial"], default="echo")
    parser.add_argument("--answer", default="Scripted answer.")
    parser.add_argument("--delay-ms", type=int, default=0, dest="delay_ms")
    parser.add_argument("--calls-log", default=None, dest="calls_log")
    args = parser.parse_args()
    handler = make_handler(args.mode, args.answer, args.delay_ms / 1000, args.calls_log)
    server = ThreadingHTTPServer((args.host, args.port), handler)
    server.daemon_threads = True
    print(f"listening on http://{args.host}:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
