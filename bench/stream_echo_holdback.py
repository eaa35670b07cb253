"""What holding back prompt echoes costs a streamed answer: `EchoHoldback` (docqa.token_stream) fed a reply piece by
piece as the LLM server streams it, for a reply that echoes a 40-passage prompt, a 2,000-word answer on one line,
and both. The run's thread pays this while the model writes; prints time per piece and in total, asserts nothing.

    nice python bench/stream_echo_holdback.py --pieces 4 32
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import docqa.llm.calls  # noqa: F401  (loaded before timing: the server has it loaded)
from docqa.token_stream import EchoHoldback


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pieces", type=int, nargs="+", default=[4, 32], help="characters per streamed piece")
    parser.add_argument("--passages", type=int, default=40)
    parser.add_argument("--words", type=int, default=2000)
    args = parser.parse_args()
    passage = "Passage text about budgets and travel rules number {}. " * 6
    prompt = "\n".join(f"[{i}] " + passage.format(*[i] * 6) for i in range(args.passages))
    prompt += "\nQuestion: What is it?\nAnswer:"
    answer = " ".join(f"word{i}" for i in range(args.words))
    replies = {"prompt echo, then the answer": f"{prompt}\n{answer}", "answer on one line": answer,
               "prompt echo only": prompt}
    print(f"prompt {len(prompt):,} characters")
    for name, reply in replies.items():
        for size in args.pieces:
            pieces = [reply[i : i + size] for i in range(0, len(reply), size)]
            started = time.perf_counter()
            holdback = EchoHoldback(prompt)
            shown = "".join(holdback.feed(piece) for piece in pieces) + holdback.finish()
            took = time.perf_counter() - started
            print(f"{name}: {len(reply):,} chars in {len(pieces):,} pieces of {size}: {took * 1000:.0f} ms, "
                  f"{took / len(pieces) * 1e6:.0f} us/piece, {len(shown):,} chars shown")


if __name__ == "__main__":
    main()
