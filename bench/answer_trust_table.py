"""What users see, side by side for several `docqa eval` runs: the #26 table on the questions every run answered.

For each run folder (a dataset's `results.jsonl`, e.g. `runs/after/musique`) and pipeline, over the questions
that every given run answered with that pipeline: `acc` (a gold answer or alias contained in the shown answer),
citation precision (the share of cited passages that are supporting, averaged over answers that cite any), the
share of answers shown as the model's and their `acc`, and the `acc` of the others (extracted or none). Then the
wrong answers shown as the model's, with their trace ids, for the note.

Usage:
    python bench/answer_trust_table.py before=runs/before/musique after=runs/after/musique \\
        extracted=runs/extracted/musique [--pipelines standard,resp,atrag] [--wrong 3]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any


def read_run(folder: Path) -> dict[tuple[str, str], dict[str, Any]]:
    rows = {}
    for line in (folder / "results.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            if not row.get("error"):
                rows[(row["pipeline"], row["question_id"])] = row
    return rows


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.1f}" if whole else "–"


def summary(rows: list[dict[str, Any]]) -> dict[str, str]:
    model = [r for r in rows if r.get("answer_source") == "model"]
    other = [r for r in rows if r.get("answer_source") != "model"]
    precisions = [r["citation_precision"] for r in rows if isinstance(r.get("citation_precision"), (int, float))]
    return {
        "acc": _pct(sum(bool(r.get("acc")) for r in rows), len(rows)),
        "citation precision": _pct(sum(precisions), len(precisions)),
        "shown as the model's": _pct(len(model), len(rows)),
        "acc of the model's": _pct(sum(bool(r.get("acc")) for r in model), len(model)),
        "acc of the others": _pct(sum(bool(r.get("acc")) for r in other), len(other)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="label=folder holding results.jsonl")
    parser.add_argument("--pipelines", default="standard,resp,atrag")
    parser.add_argument("--wrong", type=int, default=3, help="wrong answers shown as the model's to list, per run")
    args = parser.parse_args(argv)
    runs = {label: read_run(Path(folder)) for label, folder in (item.split("=", 1) for item in args.runs)}
    labels = list(runs)
    columns = ["acc", "citation precision", "shown as the model's", "acc of the model's", "acc of the others"]
    print("| pipeline | n | " + " | ".join(f"{c} ({' / '.join(labels)})" for c in columns) + " |")
    print("|---|---|" + "---|" * len(columns))
    for pipeline in (p.strip() for p in args.pipelines.split(",") if p.strip()):
        common = set.intersection(*({q for p, q in rows if p == pipeline} for rows in runs.values()))
        if not common:
            continue
        tables = {label: summary([rows[(pipeline, q)] for q in sorted(common)]) for label, rows in runs.items()}
        cells = [" / ".join(tables[label][c] for label in labels) for c in columns]
        print(f"| {pipeline} | {len(common)} | " + " | ".join(cells) + " |")
    for label, rows in runs.items():
        wrong = [r for r in rows.values() if r.get("answer_source") == "model" and not r.get("acc")]
        for row in wrong[: args.wrong]:
            print(f"{label} wrong as the model's: {row['pipeline']} trace {row.get('trace_id')} "
                  f"q={row['question']!r} gold={row['answers'][:2]} shown={row['prediction'][:160]!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
