"""Summaries and reports of an evaluation run: summary.csv, report.md, PNG plots and a self-contained report.html.

A failed answer scores 0 on EM, F1, acc and ROUGE-L (it gave the user nothing) and is left out of the other scores
and the cost figures (it may have stopped early); the `errors` column counts them. `model_share` and
`extracted_share` are the shares of the answers shown as the model's and as sentences extracted from the passages
(the rest had none), `acc_model` and `acc_extracted` the acc of each group. report.md and report.html leave out
the columns no strategy has a value for (a dataset without supporting passages has no citation precision);
summary.csv keeps them all.

Usage:
    rows = summarize(read_results(out / "results.jsonl"))
    write_reports(out, rows, records)  # summary.csv, report.md, *.png, report.html
"""

from __future__ import annotations

import base64
import csv
import html
import json
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from docqa.evaluation.runner import RUN_FILE, EvalRecord
from docqa.extractive_fallback import ANSWER_SOURCE_EXTRACTED, ANSWER_SOURCE_MODEL

# summary.csv's columns, in order: the task's headline scores first, then the optional scores, then cost.
SUMMARY_COLUMNS = (
    "pipeline", "n", "em", "f1", "acc", "rouge_l", "short_answer_recall", "support_recall", "citation_precision",
    "record_precision", "record_recall", "model_share", "extracted_share", "acc_model", "acc_extracted",
    "judge_correctness", "judge_completeness", "judge_relevance", "llm_calls", "prompt_tokens",
    "completion_tokens", "iterations", "words_retrieved",
    "words_to_generator", "compression", "wall_p50_s", "wall_p95_s", "errors", "stop_reasons",
)
ANSWER_METRICS = ("em", "f1", "acc", "rouge_l")
SCORE_METRICS = ("em", "f1", "acc", "rouge_l", "short_answer_recall", "support_recall", "citation_precision",
                 "record_precision", "record_recall")
# Who wrote the answers shown (answer_source) and how right each group was: per strategy, not per answer.
SOURCE_METRICS = ("model_share", "extracted_share", "acc_model", "acc_extracted")
# LLM-as-judge means on their own 0-10 scale, over the answers the judge scored.
JUDGE_METRICS = ("judge_correctness", "judge_completeness", "judge_relevance")
COST_METRICS = ("llm_calls", "prompt_tokens", "completion_tokens", "iterations", "words_retrieved",
                "words_to_generator")
PLOTS = ("scores.png", "cost.png", "wall_time.png")


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), q in [0, 100]; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(records: Sequence[EvalRecord]) -> list[dict[str, Any]]:
    """One row per strategy, in the order they first appear."""
    rows = []
    for name in dict.fromkeys(r.pipeline for r in records):
        mine = [r for r in records if r.pipeline == name]
        ok = [r for r in mine if r.error is None]
        row: dict[str, Any] = {"pipeline": name, "n": len(mine), "errors": len(mine) - len(ok)}
        # A record question has no reference answer: EM/F1/ROUGE-L mean nothing there (its records are scored).
        answered = [r for r in mine if r.answers]
        for metric in ANSWER_METRICS:
            row[metric] = _mean([getattr(r, metric) if r.error is None else 0.0 for r in answered])
        for metric in SCORE_METRICS[len(ANSWER_METRICS):]:
            # Scores a dataset does not define (no supporting ids, no record sets) stay empty, never 0.
            row[metric] = _mean([getattr(r, metric) for r in ok if getattr(r, metric) is not None])
        row.update(source_scores(ok))
        for metric in JUDGE_METRICS:
            row[metric] = _mean([getattr(r, metric) for r in ok if getattr(r, metric) is not None])
        for metric in COST_METRICS:
            row[metric] = _mean([getattr(r, metric) for r in ok])
        given = sum(r.words_to_generator for r in ok)
        row["compression"] = sum(r.words_retrieved for r in ok) / given if given else None
        walls = [r.wall_s for r in ok]
        row["wall_p50_s"], row["wall_p95_s"] = percentile(walls, 50), percentile(walls, 95)
        row["stop_reasons"] = dict(sorted(Counter(r.stop_reason or "-" for r in ok).items()))
        rows.append(row)
    return rows


def source_scores(answered: Sequence[EvalRecord]) -> dict[str, float | None]:
    """`model_share`, `extracted_share`, `acc_model`, `acc_extracted` of the answers given (errors left out);
    the acc groups count only questions with reference answers."""
    n = len(answered)
    model = [r for r in answered if r.answer_source == ANSWER_SOURCE_MODEL]
    extracted = [r for r in answered if r.answer_source == ANSWER_SOURCE_EXTRACTED]
    return {
        "model_share": len(model) / n if n else None,
        "extracted_share": len(extracted) / n if n else None,
        "acc_model": _mean([r.acc for r in model if r.answers]),
        "acc_extracted": _mean([r.acc for r in extracted if r.answers]),
    }


def shown_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The summary columns some strategy has a value for (the strategy and its count always)."""
    return [c for c in SUMMARY_COLUMNS
            if c in ("pipeline", "n") or any(row.get(c) is not None and row.get(c) != {} for row in rows)]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, dict):
        return " ".join(f"{k}={v}" for k, v in value.items())
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def write_summary_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(SUMMARY_COLUMNS)
        for row in rows:
            writer.writerow([_cell(row.get(c)) for c in SUMMARY_COLUMNS])


def _display(column: str, value: Any) -> str:
    if value is None:
        return "–"
    if column in SCORE_METRICS or column in SOURCE_METRICS:
        return f"{value * 100:.1f}"
    if isinstance(value, float):
        return f"{value:.2f}"
    return _cell(value)


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    columns = shown_columns(rows)
    header = "| " + " | ".join(columns) + " |"
    lines = [header, "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_display(c, row.get(c)) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def _run_info(out_dir: Path) -> dict[str, Any]:
    path = out_dir / RUN_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def _worst(records: Sequence[EvalRecord], limit: int = 10) -> list[EvalRecord]:
    """Failed answers, then wrong ones (acc 0) by F1, the first place to look (each with its trace id); an answer
    that holds the gold one but says more (low F1, acc 1) comes after every wrong one."""
    return sorted(records, key=lambda r: (r.error is None, r.acc, r.f1))[:limit]


def write_report_md(path: Path, rows: Sequence[dict[str, Any]], records: Sequence[EvalRecord],
                    info: dict[str, Any]) -> None:
    lines = ["# docqa evaluation", "",
             f"Strategies {', '.join(r['pipeline'] for r in rows)} on {info.get('questions', '?')} questions as "
             f"tenant `{info.get('tenant', '?')}`, principals {info.get('principals', [])}; "
             f"models {info.get('models', {})}.", "",
             "Scores in percent; failed answers score 0; cost columns are means per answered question.", "",
             markdown_table(rows), "", "## Lowest-scoring answers", "",
             "| pipeline | question | prediction | source | gold | F1 | trace |", "|---|---|---|---|---|---|---|"]
    for r in _worst(records):
        answer = (r.error or r.prediction).replace("|", "/").replace("\n", " ")[:120]
        gold = " / ".join(r.answers)[:80].replace("|", "/")
        lines.append(f"| {r.pipeline} | {r.question[:100].replace('|', '/')} | {answer} | {r.answer_source} | "
                     f"{gold} | {r.f1 * 100:.0f} | {r.trace_id or '–'} |")
    lines += ["", *[f"![{name}]({name})" for name in PLOTS], ""]
    path.write_text("\n".join(lines), encoding="utf-8")


def write_plots(out_dir: Path, rows: Sequence[dict[str, Any]], records: Sequence[EvalRecord]) -> list[Path]:
    """Bar charts of the scores and costs and a box plot of wall time, one PNG each."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers and CI
    import matplotlib.pyplot as plt

    names = [r["pipeline"] for r in rows]
    paths = []

    def bars(filename: str, metrics: Sequence[str], title: str, scale: float) -> None:
        shown = [m for m in metrics if any(r.get(m) is not None for r in rows)]
        fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
        width = 0.8 / max(len(names), 1)
        for i, row in enumerate(rows):
            xs = [j + i * width for j in range(len(shown))]
            ax.bar(xs, [(row.get(m) or 0.0) * scale for m in shown], width, label=row["pipeline"])
        ax.set_xticks([j + width * (len(names) - 1) / 2 for j in range(len(shown))], shown)
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out_dir / filename)
        plt.close(fig)
        paths.append(out_dir / filename)

    bars("scores.png", SCORE_METRICS, "Scores (%)", 100.0)
    bars("cost.png", ("llm_calls", "iterations"), "Cost per question", 1.0)
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=100)
    ax.boxplot([[r.wall_s for r in records if r.pipeline == n and r.error is None] or [0.0] for n in names])
    ax.set_xticks(range(1, len(names) + 1), names)
    ax.set_title("Wall time per question (s)")
    fig.tight_layout()
    fig.savefig(out_dir / "wall_time.png")
    plt.close(fig)
    paths.append(out_dir / "wall_time.png")
    return paths


_STYLE = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}th{background:#f3f3f3}td:first-child{text-align:left}
img{max-width:100%;display:block;margin:1em 0}code{font-size:90%}"""


def write_report_html(path: Path, rows: Sequence[dict[str, Any]], records: Sequence[EvalRecord],
                      info: dict[str, Any], plots: Sequence[Path]) -> None:
    """One file a browser opens offline: styles inline and plots as data: URIs, nothing fetched from elsewhere."""
    esc = html.escape
    columns = shown_columns(rows)
    head = "".join(f"<th>{esc(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{esc(_display(c, row.get(c)))}</td>" for c in columns) + "</tr>"
                   for row in rows)
    worst = "".join(
        f"<tr><td>{esc(r.pipeline)}</td><td>{esc(r.question[:160])}</td><td>{esc((r.error or r.prediction)[:200])}"
        f"</td><td>{esc(r.answer_source)}</td><td>{esc(' / '.join(r.answers)[:100])}</td><td>{r.f1 * 100:.0f}</td>"
        f"<td><code>{esc(r.trace_id or '–')}</code></td></tr>" for r in _worst(records))
    images = "".join(
        f'<img alt="{esc(p.stem)}" src="data:image/png;base64,{base64.b64encode(p.read_bytes()).decode()}">'
        for p in plots)
    document = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>docqa evaluation</title><style>{_STYLE}</style></head>
<body><h1>docqa evaluation</h1>
<p>{esc(str(info.get('questions', '?')))} questions as tenant <code>{esc(str(info.get('tenant', '?')))}</code>,
principals {esc(str(info.get('principals', [])))}; models {esc(str(info.get('models', {})))}.
Scores in percent; failed answers score 0.</p>
<table id="summary"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>
<h2>Plots</h2>{images}
<h2>Lowest-scoring answers</h2>
<table id="worst"><thead><tr><th>pipeline</th><th>question</th><th>answer</th><th>source</th><th>gold</th><th>F1</th>
<th>trace</th>
</tr></thead><tbody>{worst}</tbody></table>
</body></html>
"""
    path.write_text(document, encoding="utf-8")


def write_reports(out_dir: Path, records: Sequence[EvalRecord]) -> list[dict[str, Any]]:
    """Every report of a run from its records; returns the summary rows."""
    rows = summarize(records)
    info = {"questions": len({r.question_id for r in records}), **_run_info(out_dir)}
    write_summary_csv(out_dir / "summary.csv", rows)
    write_report_md(out_dir / "report.md", rows, records, info)
    plots = write_plots(out_dir, rows, records) if rows else []
    write_report_html(out_dir / "report.html", rows, records, info, plots)
    return rows
