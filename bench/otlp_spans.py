"""Spans an OTLP receiver gets for one `resp` and one `contregen` question, against the steps of their traces.

docqa's tracer is installed as at server start, with DOCQA_OTEL_EXPORTER_OTLP_ENDPOINT pointing at a small
receiver process on loopback (OTLP/HTTP, protobuf decoded with opentelemetry-proto). Each question runs with a
scripted chat generator over a tiny embedded store (hash embeddings: no model, no network). Printed per question:
the spans of its trace by kind (the run, Haystack pipeline runs, steps, model calls) and whether the step spans
are the trace's steps (same count, same names, same order) and the model-call spans its recorded calls.

    python bench/otlp_spans.py
    python bench/otlp_spans.py --show-names
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from haystack import Document  # noqa: E402

from docqa.access import AccessScope  # noqa: E402
from docqa.pipelines.registry import build_pipeline  # noqa: E402
from docqa.runtime import Runtime  # noqa: E402
from docqa.settings import Settings  # noqa: E402
from docqa.spans import LLM_CALL_SPAN, STEP_INDEX, STEP_NAME  # noqa: E402
from docqa.step_tracer import enable_step_tracing  # noqa: E402
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder  # noqa: E402
from tests.support.resp_fakes import GENERATE, GLOBAL, JUDGE, LOCAL, PLAN  # noqa: E402
from tests.support.scripted_chat import ScriptedChatGenerator  # noqa: E402

SCOPE = AccessScope("acme", frozenset({"alice"}))
QUESTIONS = {
    "resp": "What nationality is the director of Twisted Fortune?",
    "contregen": "What happened to the harbour town during the storm?",
}
CORPUS = [
    ("tf", "Twisted Fortune is a 1997 film directed by Lena Hart."),
    ("lh", "Lena Hart is an American film director born in Ohio."),
    ("storm", "The storm hit the harbour town at night and flooded the docks."),
    ("boats", "Fishing boats were wrecked when storm waves broke over the harbour wall."),
    ("mayor", "The mayor opened shelters in the school after the storm flooded the town."),
]


# ---- the receiver process ---------------------------------------------------------------------------------------

def serve(out: Path) -> None:
    """Receive OTLP/HTTP trace exports on loopback; one JSON line per span to `out`; print the port first."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
        ExportTraceServiceResponse,
    )

    def value(any_value: Any) -> Any:
        kind = any_value.WhichOneof("value")
        return getattr(any_value, kind) if kind else None

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            request = ExportTraceServiceRequest.FromString(body)
            with out.open("a") as sink:
                for resource in request.resource_spans:
                    for scope in resource.scope_spans:
                        for span in scope.spans:
                            sink.write(json.dumps({
                                "path": self.path, "trace_id": span.trace_id.hex(), "span_id": span.span_id.hex(),
                                "parent_span_id": span.parent_span_id.hex(), "name": span.name,
                                "attributes": {a.key: value(a.value) for a in span.attributes},
                            }) + "\n")
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args: Any) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Receiver)
    print(server.server_port, flush=True)
    server.serve_forever()


# ---- the questions ----------------------------------------------------------------------------------------------

class TinyRuntime(Runtime):
    """docqa's runtime over a five-passage embedded store with hash embeddings and one scripted chat generator."""

    def __init__(self, directory: Path, settings: Settings) -> None:
        from docqa.stores.factory import build_document_store

        store = build_document_store(settings)
        docs = [Document(id=doc_id, content=text, meta={"tenant": "acme", "access": ["everyone"],
                                                        "source": f"{doc_id}.md", "title": doc_id})
                for doc_id, text in CORPUS]
        store.write_documents(HashDocumentEmbedder().run(documents=docs)["documents"])
        llm = scripted_llm()
        super().__init__(settings, document_store=store, chat_generator_factory=lambda _role: llm)

    def text_embedder(self) -> Any:
        return HashTextEmbedder()


def scripted_llm() -> ScriptedChatGenerator:
    def verify(prompt: str) -> str:
        sub_question = re.search(r"^Sub-question: (.*)$", prompt, re.MULTILINE)
        return json.dumps({"needed": "Yes", "query": sub_question.group(1) if sub_question else ""})

    def relevance(prompt: str) -> str:
        return json.dumps({"relevant": [int(n) for n in re.findall(r"^\[(\d+)\]", prompt, re.MULTILINE)]})

    return ScriptedChatGenerator(rules=[
        # ConTReGen: plan two sub-questions at the root, none below; keep every passage.
        (r"You plan the research", ['{"sub_questions": ["How were the boats damaged?", "What did the mayor do?"]}',
                                    '{"sub_questions": []}']),
        (r"Decide whether a sub-question is needed", verify),
        (r"Which of the numbered passages", relevance),
        (r"Summarise what the numbered passages", "The storm wrecked the boats [1]."),
        (r"Write a complete, detailed answer", "The storm flooded the town [1].\n\nThe mayor opened shelters [2]."),
        # ReSP: not sufficient at first, one plan, then sufficient.
        (JUDGE, ['{"answer": "No"}', '{"answer": "Yes"}']),
        (PLAN, "Where was Lena Hart born?"),
        (GLOBAL, "Twisted Fortune was directed by Lena Hart, an American director. [DONE]"),
        (LOCAL, "Lena Hart is American."),
        (GENERATE, "American"),
    ], default="American")


def received(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.is_file() else []


def report(name: str, result: Any, spans: list[dict[str, Any]], show_names: bool) -> bool:
    runs = [s for s in spans if s["name"] == "docqa.strategy.run" and s["attributes"].get("docqa.strategy") == name]
    trace_id = runs[-1]["trace_id"]
    mine = [s for s in spans if s["trace_id"] == trace_id]
    steps = sorted((s for s in mine if STEP_NAME in s["attributes"]), key=lambda s: s["attributes"][STEP_INDEX])
    calls = [s for s in mine if s["name"] == LLM_CALL_SPAN]
    kinds = Counter("step" if STEP_NAME in s["attributes"] else s["name"] for s in mine)
    span_names = [s["attributes"][STEP_NAME] for s in steps]
    step_names = [step.name for step in result.steps]
    recorded_calls = sum(len(step.outputs.get("llm_calls", [])) for step in result.steps)
    same = span_names == step_names and len(calls) == recorded_calls == result.totals.llm_calls
    print(f"{name}: {len(mine)} spans received in its trace "
          f"({', '.join(f'{count} {kind}' for kind, count in sorted(kinds.items()))})")
    print(f"  step spans {len(steps)} vs trace steps {len(step_names)}; names and order equal: "
          f"{span_names == step_names}")
    print(f"  model-call spans {len(calls)} vs calls recorded on the steps {recorded_calls} "
          f"(totals {result.totals.llm_calls})")
    if show_names or not same:
        print(f"  span names: {', '.join(span_names)}")
        print(f"  step names: {', '.join(step_names)}")
    return same


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--show-names", action="store_true", help="print every step's name")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "spans.jsonl"
        receiver = subprocess.Popen([sys.executable, __file__, "--serve", str(out)], stdout=subprocess.PIPE,
                                    text=True)
        try:
            port = int(receiver.stdout.readline())  # type: ignore[union-attr]
            settings = Settings(data_dir=Path(tmp) / "data", otel_exporter_otlp_endpoint=f"http://127.0.0.1:{port}")
            tracer = enable_step_tracing(settings)
            runtime = TinyRuntime(Path(tmp), settings)
            results = {"resp": build_pipeline("resp", runtime, max_iterations=3, top_k=2),
                       "contregen": build_pipeline("contregen", runtime, top_k=1, max_depth=1, max_breadth=3)}
            results = {name: strategy.run(QUESTIONS[name], SCOPE) for name, strategy in results.items()}
            tracer.delegate.provider.force_flush()  # type: ignore[union-attr]
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and sum(
                    s["name"] == "docqa.strategy.run" for s in received(out)) < len(results):
                time.sleep(0.05)
            spans = received(out)
        finally:
            receiver.terminate()
            receiver.wait(5)
        print(f"OTLP/HTTP receiver on 127.0.0.1:{port} got {len(spans)} spans "
              f"(paths: {', '.join(sorted({s['path'] for s in spans}))})")
        same = [report(name, result, spans, args.show_names) for name, result in results.items()]
    return 0 if all(same) else 1


if __name__ == "__main__":
    sys.exit(main())
