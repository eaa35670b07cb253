"""How often the grounding check refuses a correct answer, and how often it catches a wrong one.

For each question of the MuSiQue and HotpotQA samples, the gold answer is written the way a model would
("<answer>.", and "The answer is <answer> [n]." citing a supporting passage) and checked by `GroundingChecker`
against the question's supporting passages (numbered in sample order). A correct answer should stay the model's
(`answer_source == "model"`); every other outcome is a false drop, listed by reason. A wrong answer (the next
question's gold answer, written "The answer is <it> [n].") should not: the share replaced is the catch rate; only
numbers, dates and names are checkable, so a wrong common noun passes. Deterministic, no model.

The answer-kind rule (a yes/no question needs a yes or no, a Who question a name, a When question a date, a How
many question a number; `docqa.checkable_facts.question_kind`) is counted on its own: every gold answer and alias
of a question it applies to, in both forms, and each one it would drop is listed. With `--run`, the answers an
earlier `docqa eval` run showed as the model's (the shown text, after that run's fact check) are checked by the rule
too: how many it would replace, and how many of those were wrong (gold answer not contained, its `acc`). Without
`--run`, the issue's packaged HotpotQA run is read when it exists.

Usage:
    python bench/grounding_false_drops.py [--limit 200] [--run RUN/hotpotqa/results.jsonl]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from itertools import pairwise
from pathlib import Path

from haystack import Document

from docqa.checkable_facts import gives_kind, question_kind
from docqa.components.grounding_checker import GroundingChecker, split_answer
from docqa.extractive_fallback import split_sentences
from docqa_eval.datasets import load_corpus, load_questions

DEFAULT_RUN = Path("/tmp/g26-eval/runs/packaged/hotpotqa/results.jsonl")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=200, help="questions per dataset")
    parser.add_argument(
        "--run",
        type=Path,
        action="append",
        default=None,
        help="an eval run's results.jsonl whose model answers the answer-kind rule checks "
        f"(default: {DEFAULT_RUN} when it exists)",
    )
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
        answer_kinds(dataset, questions)
        quoted_sentences(checker, dataset, questions, corpus)
    runs = args.run if args.run is not None else [DEFAULT_RUN] if DEFAULT_RUN.exists() else []
    for run in runs:
        model_answers(run)


def quoted_sentences(checker: GroundingChecker, dataset: str, questions: list, corpus: dict) -> None:
    """A correct answer that quotes the passage sentence stating the gold answer word for word (as small models
    write): kept as the model's, or replaced and why; for a replaced one, does the extracted answer still hold the
    gold answer? Three ways of writing it: the marker after the sentence, the marker first (as the prompt lists
    passages), and the marker first with the passage's next sentence too (which the passage-list copy rule takes for
    a copy of the prompt). (A rule replacing verbatim copies that the extractor would not quote was measured with
    this and dropped: it replaced 55 of 95 MuSiQue and 36 of 96 HotpotQA correct quotes, 50 and 31 by wrong
    sentences.)"""
    forms = {
        "gold sentence quoted word for word": lambda n, s, _: f"{s.rstrip('.')} [{n}].",
        "the same with its marker first": lambda n, s, _: f"[{n}] {s}",
        "marker first, the next sentence too": lambda n, s, following: f"[{n}] {s} {following}" if following else "",
    }
    for label, write in forms.items():
        outcomes: Counter[str] = Counter()
        harmed = []
        for question in questions:
            passages = [corpus[i] for i in question.supporting_ids if i in corpus]
            answer = question.answers[0]
            found = [(n, sentences[i], sentences[i + 1] if i + 1 < len(sentences) else "")
                     for n, doc in enumerate(passages, 1)
                     for sentences in [split_sentences(doc.content or "")] for i in range(len(sentences))
                     if answer.lower() in sentences[i].lower()]
            text = write(*found[0]) if found else ""
            if not text:
                continue
            out = checker.run(
                question=question.question,
                answer=text,
                documents=[Document(id=d.id, content=d.content, meta=d.meta) for d in passages],
            )
            if out["answer_source"] == "model":
                outcomes["kept"] += 1
            else:
                still = any(a.lower() in out["answer"].lower() for a in question.answers)
                verdict = "still right" if still else "wrong"
                outcomes[f"{out['reason'] or out['answer_source']}, extracted {verdict}"] += 1
                if not still:
                    harmed.append(f"{question.id}: {text[:90]!r} -> {out['answer'][:90]!r}")
        print(f"  {label} ({sum(outcomes.values())} questions): "
              + ", ".join(f"{k} {n}" for k, n in outcomes.most_common()))
        for line in harmed[:3]:
            print(f"    replaced, answer lost: {line}")


def _kept(question: str, text: str) -> bool:
    """Whether the answer-kind rule keeps an answer (True when no rule applies)."""
    kind = question_kind(question)
    return kind is None or gives_kind(kind, question, [s.text for s in split_answer(text)])


def answer_kinds(dataset: str, questions: list) -> None:
    """Gold answers (every alias, both forms) of the questions a rule applies to, and those it would drop."""
    asked: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    drops = []
    for question in questions:
        kind = question_kind(question.question)
        if kind is None:
            continue
        asked[kind] += 1
        for answer in question.answers:
            for text in (f"{answer}.", f"The answer is {answer} [1]."):
                if not _kept(question.question, text):
                    dropped[kind] += 1
                    drops.append(f"{question.id} ({kind}): {question.question!r} -> {text!r}")
    checked = sum(len(q.answers) * 2 for q in questions if question_kind(q.question))
    print(
        f"  answer-kind rule: {sum(asked.values())} of {len(questions)} questions ruled "
        f"({', '.join(f'{k} {n}' for k, n in asked.most_common())}); gold answers dropped: "
        f"{sum(dropped.values())} of {checked}"
        + (f" ({', '.join(f'{k} {n}' for k, n in dropped.items())})" if dropped else "")
    )
    for drop in drops:
        print(f"    dropped: {drop}")


def model_answers(run: Path) -> None:
    """The answers a run showed as the model's that the answer-kind rule would replace, and how many were wrong."""
    rows = [json.loads(line) for line in run.read_text(encoding="utf-8").splitlines() if line.strip()]
    shown = [r for r in rows if r.get("answer_source") == "model"]
    replaced = [r for r in shown if not _kept(r["question"], r["prediction"] or "")]
    wrong = [r for r in replaced if not r.get("acc")]
    right_left = sum(bool(r.get("acc")) for r in shown if r not in replaced)
    print(
        f"{run}: {len(shown)} of {len(rows)} answers shown as the model's, {sum(bool(r.get('acc')) for r in shown)}"
        f" right; the answer-kind rule replaces {len(replaced)}, {len(wrong)} of them wrong; left as the model's: "
        f"{len(shown) - len(replaced)}, {right_left} right"
    )
    for row in replaced:
        print(
            f"  replaced ({'wrong' if not row.get('acc') else 'RIGHT'}, {row['trace_id']}): {row['question']!r} -> "
            f"{row['prediction'][:100]!r}"
        )


if __name__ == "__main__":
    main()
