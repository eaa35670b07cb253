"""Embedded LLM figures: server start time (cold and reused), short text generation latency, constrained
Yes/No and JSON latency, through the same client path the pipelines use.

    nice python bench/local_llm_latency.py                 # packaged model, 5 repetitions
    nice python bench/local_llm_latency.py --repeat 10 --threads 1

Each run uses a throwaway data dir (its own server) and stops the server at the end. Figures are printed,
never asserted; they depend on how busy the machine is.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from docqa.llm.calls import generate_json, generate_text, generate_yes_no
from docqa.llm.client import build_chat_generator
from docqa.llm.local_server import ensure_local_llm, stop_local_llm
from docqa.recording import StepRecorder
from docqa.settings import Settings

PROMPT_CONTEXT = (
    "Passage 1: The Eiffel Tower was completed in 1889 for the World's Fair in Paris.\n"
    "Passage 2: Gustave Eiffel's company designed and built the tower.\n\n"
)
PLAN_SCHEMA = {
    "type": "object",
    "properties": {"sub_questions": {"type": "array", "items": {"type": "string", "maxLength": 80},
                                     "minItems": 1, "maxItems": 2}},
    "required": ["sub_questions"],
    "additionalProperties": False,
}


def timed(call: Callable[[], object], repeat: int) -> tuple[list[float], list[int], list[object]]:
    """Latencies (s), completion tokens and results of `repeat` calls, each recorded in its own step."""
    seconds, tokens, results = [], [], []
    for _ in range(repeat):
        recorder = StepRecorder()
        with recorder.step("bench", "bench"):
            start = time.perf_counter()
            results.append(call())
            seconds.append(time.perf_counter() - start)
        tokens.append(recorder.steps[0].llm.completion_tokens)
    return seconds, tokens, results


def report(name: str, seconds: list[float], tokens: list[int], valid: int) -> None:
    print(f"{name:28} median {statistics.median(seconds) * 1000:7.0f} ms  min {min(seconds) * 1000:7.0f} ms  "
          f"max {max(seconds) * 1000:7.0f} ms  completion tokens median {statistics.median(tokens):4.0f}  "
          f"valid {valid}/{len(seconds)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads (DOCQA_LOCAL_LLM_THREADS)")
    parser.add_argument("--ctx", type=int, default=4096)
    args = parser.parse_args()

    settings = Settings(data_dir=Path(tempfile.mkdtemp(prefix="docqa-llm-bench-")),
                        local_llm_threads=args.threads, local_llm_ctx=args.ctx)
    try:
        start = time.perf_counter()
        local = ensure_local_llm(settings)
        cold = time.perf_counter() - start
        start = time.perf_counter()
        ensure_local_llm(settings)
        reused = time.perf_counter() - start
        print(f"{local}; n_threads={args.threads} n_ctx={args.ctx}")
        print(f"server start (cold, model assembled): {cold:.2f} s; reuse of the running server: "
              f"{reused * 1000:.0f} ms")

        generator = build_chat_generator(settings, "generator")
        # The first request pays one-off costs (client set-up, the rejected json_schema probe); not measured.
        generate_yes_no(generator, "Warm-up. Answer Yes or No.")

        question = PROMPT_CONTEXT + "When was the Eiffel Tower completed?"
        seconds, tokens, texts = timed(lambda: generate_text(generator, question, max_tokens=16), args.repeat)
        report("text, max 16 tokens", seconds, tokens, sum(isinstance(t, str) for t in texts))

        judge = PROMPT_CONTEXT + "Do the passages say when the tower was completed? Answer Yes or No."
        seconds, tokens, verdicts = timed(lambda: generate_yes_no(generator, judge), args.repeat)
        report("Yes/No, constrained", seconds, tokens, sum(v is not None for v in verdicts))

        plan = "Split into sub-questions: Who designed the tower completed in 1889 in Paris?"
        seconds, tokens, plans = timed(
            lambda: generate_json(generator, plan, PLAN_SCHEMA, name="plan", max_tokens=96), args.repeat
        )
        report("JSON plan, constrained", seconds, tokens, sum(p is not None for p in plans))
    finally:
        stop_local_llm(settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
