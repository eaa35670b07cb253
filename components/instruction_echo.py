"""Whether a reply recites its prompt instead of answering: docqa's instructions, or the numbered passages.

The reply parsers drop lines that repeat the prompt they answer, but a small model also recites instructions it
saw elsewhere (ReSP's planning instruction copied into its memory, then into the answer) or paraphrases the start
of one ("You are a computer programmer. Please understand the information gap between the currently known
information and ..."). Any run of `RUN_WORDS` words from the fixed text of a packaged prompt marks such a reply;
an answer has no reason to share that many words in a row with an instruction. `copied_share` tells how much of a
text is the passages' own words in their own order (the grounding check's test for a reply that copies out the
prompt's numbered passages).

Usage:
    recites_instructions("Please understand the information gap between the currently known information.")  # True
    copied_share("[1] Kahuku, Hawaii Kahuku is a census-designated place. It lies ...", passage_texts)  # 0.0-1.0
"""

from __future__ import annotations

import re
from functools import lru_cache
from importlib import resources

# Long enough that an answer ("the documents do not say who ...") never matches by chance, short enough to catch a
# paraphrased opening followed by one instruction sentence copied.
RUN_WORDS = 8
_JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.DOTALL)
_WORD = re.compile(r"[a-z0-9]+(?:['’][a-z]+)?")


def _runs(text: str) -> set[tuple[str, ...]]:
    words = _WORD.findall(text.lower())
    return {tuple(words[i : i + RUN_WORDS]) for i in range(len(words) - RUN_WORDS + 1)}


@lru_cache(maxsize=1)
def instruction_runs() -> frozenset[tuple[str, ...]]:
    """Every run of `RUN_WORDS` words in the fixed text (template tags removed) of the packaged prompts, taken
    line by line so that a run never joins an instruction to the passage or question after it."""
    runs: set[tuple[str, ...]] = set()
    folder = resources.files("docqa.components").joinpath("prompts")
    for entry in folder.iterdir():
        if entry.name.endswith(".txt"):
            for line in _JINJA.sub("\n", entry.read_text(encoding="utf-8")).splitlines():
                runs |= _runs(line)
    return frozenset(runs)


def recites_instructions(text: str) -> bool:
    """Whether `text` shares a run of `RUN_WORDS` words with a packaged prompt's instructions."""
    return not _runs(text).isdisjoint(instruction_runs())


def copied_share(text: str, passages: list[str]) -> float:
    """The share of `text`'s runs of `RUN_WORDS` words that occur in `passages` (0.0 for a shorter text)."""
    runs = _runs(text)
    if not runs:
        return 0.0
    stated: set[tuple[str, ...]] = set()
    for passage in passages:
        stated |= _runs(passage)
    return len(runs & stated) / len(runs)
