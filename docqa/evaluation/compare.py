"""Compare two evaluation runs question by question and flag regressions (a deployment gate).

Records pair on (strategy, question id); only questions both runs answered count. Per strategy and metric: the
old and new means, the delta, a two-sided sign test over the paired questions (ties dropped) and a bootstrap 95%
interval of the mean delta (fixed seed, so the same runs always print the same interval). A regression is the
gated metric's mean falling by more than the threshold for any strategy.

Usage:
    comparison = compare_runs(Path("runs/old"), Path("runs/new"))
    regressions(comparison, metric="f1", threshold=0.02)  # [] when the new run may ship
"""

from __future__ import annotations

import csv
import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from docqa.errors import DocqaError
from docqa.evaluation.report import ANSWER_METRICS, JUDGE_METRICS, SCORE_METRICS
from docqa.evaluation.runner import RESULTS_FILE, EvalRecord, read_results

COMPARED_METRICS = (*SCORE_METRICS, *JUDGE_METRICS, "llm_calls", "wall_s")
BOOTSTRAP_SAMPLES = 2000


@dataclass(frozen=True)
class MetricDelta:
    pipeline: str
    metric: str
    n: int
    old: float
    new: float
    delta: float
    wins: int
    losses: int
    sign_p: float
    ci_low: float
    ci_high: float


def _value(record: EvalRecord, metric: str) -> float | None:
    if metric in ANSWER_METRICS and not record.answers:
        return None  # nothing to match against (a record question), as in the summary
    if record.error is not None:
        return 0.0 if metric in ANSWER_METRICS else None
    value = getattr(record, metric)
    return None if value is None else float(value)


def sign_test(wins: int, losses: int) -> float:
    """Two-sided exact binomial p-value of wins vs losses under p=0.5 (1.0 with no untied pairs)."""
    n = wins + losses
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(wins, losses) + 1)) / 2**n
    return min(1.0, 2 * tail)


def bootstrap_interval(deltas: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean of paired deltas."""
    if not deltas:
        return 0.0, 0.0
    rng = random.Random(seed)
    n = len(deltas)
    means = sorted(sum(rng.choices(deltas, k=n)) / n for _ in range(samples))
    return means[int(0.025 * (samples - 1))], means[int(0.975 * (samples - 1))]


def _load(run_dir: Path) -> dict[tuple[str, str], EvalRecord]:
    path = run_dir / RESULTS_FILE
    if not path.is_file():
        raise DocqaError(f"no evaluation results in {run_dir} (expected {RESULTS_FILE})")
    return {(r.pipeline, r.question_id): r for r in read_results(path)}


def compare_runs(old_dir: Path, new_dir: Path, metrics: Sequence[str] = COMPARED_METRICS) -> list[MetricDelta]:
    old, new = _load(old_dir), _load(new_dir)
    paired = [key for key in new if key in old]
    if not paired:
        raise DocqaError(f"{old_dir} and {new_dir} share no (strategy, question) pairs to compare")
    deltas = []
    for pipeline in dict.fromkeys(p for p, _ in paired):
        keys = [k for k in paired if k[0] == pipeline]
        for metric in metrics:
            pairs = [(a, b) for a, b in ((_value(old[k], metric), _value(new[k], metric)) for k in keys)
                     if a is not None and b is not None]
            if not pairs:
                continue
            diffs = [b - a for a, b in pairs]
            low, high = bootstrap_interval(diffs)
            wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
            n = len(pairs)
            deltas.append(MetricDelta(
                pipeline, metric, n, sum(a for a, _ in pairs) / n, sum(b for _, b in pairs) / n, sum(diffs) / n,
                wins, losses, sign_test(wins, losses), low, high))
    return deltas


def regressions(deltas: Sequence[MetricDelta], metric: str, threshold: float) -> list[MetricDelta]:
    """The gated metric's drops beyond the threshold (higher is better for every score)."""
    return [d for d in deltas if d.metric == metric and d.delta < -threshold]


def format_table(deltas: Sequence[MetricDelta]) -> str:
    lines = [f"{'pipeline':<14} {'metric':<20} {'n':>4} {'old':>9} {'new':>9} {'delta':>9} {'+/-':>7} "
             f"{'sign p':>7} {'95% CI':>20}"]
    for d in deltas:
        lines.append(f"{d.pipeline:<14} {d.metric:<20} {d.n:>4} {d.old:>9.4f} {d.new:>9.4f} {d.delta:>+9.4f} "
                     f"{d.wins:>3}/{d.losses:<3} {d.sign_p:>7.3f} [{d.ci_low:+.4f}, {d.ci_high:+.4f}]")
    return "\n".join(lines)


def write_comparison(path: Path, deltas: Sequence[MetricDelta]) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(MetricDelta.__dataclass_fields__))
        writer.writeheader()
        for d in deltas:
            writer.writerow(asdict(d))
