"""How often the grounding check refuses a correct answer, and how often it catches a wrong one.

For each question of the MuSiQue and HotpotQA samples, the gold answer is written the way a model would
("<answer>.", and "The answer is <answer> [n]." citing a supporting passage) and checked by `GroundingChecker`
against the question's supporting passages (numbered in sample order). A correct answer should stay the model's
(`answer_source == "model"`); every other outcome is a false drop, listed by reason. A wrong answer (the next
question's gold answer, written "The answer is <it> [n].") should not: the share replaced is the catch rate; only
numbers, dates and names are checkable, so a wrong common noun passes. Deterministic, no model.

Usage:
    python bench/grounding_false_drops.py [--limit 200]
"""

from __future__ import annotations

import argparse
from collections import Counter
from itertools import pairwise

from haystack import Document

from docqa.components.grounding_checker import GroundingChecker
from docqa_eval.datasets import load_corpus, load_questions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200, help="questions per dataset")
    args = parser.parse_args()
    checker = GroundingChecker()
    for dataset in ("musique", "hotpotqa"):
        corpus = {doc.id: doc for doc in load_corpus(dataset)}
        questions = load_questions(dataset)[: args.limit]
        outcomes: Counter[str] = Counter()
        examples: dict[str, str] = {}
        checked = 0
        for question in questions:
            passages = [corpus[i] for i in question.supporting_ids if i in corpus]
            if not passages:
                continue
            answer = question.answers[0]
            cited = next((n for n, doc in enumerate(passages, 1) if answer.lower() in (doc.content or "").lower()), 1)
            for text in (f"{answer}.", f"The answer is {answer} [{cited}]."):
                out = checker.run(
                    question=question.question,
                    answer=text,
                    documents=[Document(id=d.id, content=d.content, meta=d.meta) for d in passages],
                )
                checked += 1
                key = "kept" if out["answer_source"] == "model" else out["reason"] or out["answer_source"]
                outcomes[key] += 1
                examples.setdefault(key, f"{question.id}: {text!r} -> {out['answer'][:80]!r}")
        caught = wrong = 0
        for question, other in pairwise(questions):
            passages = [corpus[i] for i in question.supporting_ids if i in corpus]
            answer = other.answers[0]
            if not passages or any(
                answer.lower() in a.lower() or a.lower() in answer.lower() for a in question.answers
            ):
                continue
            out = checker.run(
                question=question.question,
                answer=f"The answer is {answer} [1].",
                documents=[Document(id=d.id, content=d.content, meta=d.meta) for d in passages],
            )
            wrong += 1
            caught += out["answer_source"] != "model"
        kept = outcomes["kept"]
        print(
            f"{dataset}: {checked} correct answers checked, {kept} kept as the model's "
            f"({100 * kept / max(checked, 1):.1f}%), false drops by reason: "
            + (", ".join(f"{r} {n}" for r, n in outcomes.most_common() if r != "kept") or "none")
        )
        print(
            f"  wrong answers (another question's gold answer): {caught} of {wrong} replaced "
            f"({100 * caught / max(wrong, 1):.1f}%)"
        )
        for reason, example in examples.items():
            if reason != "kept":
                print(f"  e.g. {reason}: {example}")


if __name__ == "__main__":
    main()
