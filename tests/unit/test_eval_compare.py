"""`docqa eval compare`: paired deltas, the sign test and the regression gate; and the `docqa eval` command."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from docqa.evaluation.compare import bootstrap_interval, compare_runs, regressions, sign_test
from docqa.evaluation.runner import RESULTS_FILE, EvalRecord
from tests.support.scripted_openai_server import scripted_openai_server


def _write_run(run_dir: Path, f1s: list[float], pipeline: str = "standard", errors: tuple[int, ...] = ()) -> Path:
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / RESULTS_FILE).open("w") as handle:
        for i, f1 in enumerate(f1s):
            record = EvalRecord(pipeline, f"q{i}", f"question {i}?", ["x"], prediction="x", f1=f1, em=float(f1 == 1),
                                rouge_l=f1, llm_calls=1, wall_s=1.0, error="boom" if i in errors else None)
            handle.write(json.dumps(asdict(record)) + "\n")
    return run_dir


def test_sign_test_hand_computed():
    # 8 wins, 2 losses: P(X<=2 | n=10) = (1 + 10 + 45) / 1024, doubled
    assert sign_test(8, 2) == pytest.approx(2 * 56 / 1024)
    assert sign_test(5, 5) == 1.0
    assert sign_test(0, 0) == 1.0
    assert sign_test(0, 6) == pytest.approx(2 / 64)


def test_bootstrap_interval_brackets_the_mean_and_is_reproducible():
    deltas = [0.1, -0.2, 0.0, 0.3, -0.1, 0.2]
    low, high = bootstrap_interval(deltas)
    assert low < sum(deltas) / len(deltas) < high
    assert bootstrap_interval(deltas) == (low, high)
    assert bootstrap_interval([0.5] * 4) == (0.5, 0.5)


def test_an_unchanged_run_passes(tmp_path):
    old = _write_run(tmp_path / "old", [1.0, 0.5, 0.0, 1.0])
    new = _write_run(tmp_path / "new", [1.0, 0.5, 0.0, 1.0])
    deltas = compare_runs(old, new)
    f1 = next(d for d in deltas if d.metric == "f1")
    assert (f1.n, f1.delta, f1.wins, f1.losses, f1.sign_p) == (4, 0.0, 0, 0, 1.0)
    assert regressions(deltas, "f1", 0.02) == []


def test_a_planted_regression_is_flagged_on_paired_questions_only(tmp_path):
    old = _write_run(tmp_path / "old", [1.0, 1.0, 0.5, 0.5, 1.0])
    # q4 fails in the new run (scores 0); q5 exists only in the new run and is not paired
    new = _write_run(tmp_path / "new", [1.0, 0.5, 0.5, 0.0, 1.0, 0.0], errors=(4,))
    deltas = compare_runs(old, new)
    f1 = next(d for d in deltas if d.metric == "f1")
    assert f1.n == 5
    assert f1.old == pytest.approx(0.8) and f1.new == pytest.approx(0.4)
    assert (f1.wins, f1.losses) == (0, 3)
    assert [d.metric for d in regressions(deltas, "f1", 0.02)] == ["f1"]
    assert regressions(deltas, "f1", 0.5) == []
    # llm_calls of a failed answer is not a figure: that pair is left out, not counted as 0
    assert next(d for d in deltas if d.metric == "llm_calls").n == 4


def _cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DOCQA_DATA_DIR": str(tmp_path / "data"), "HAYSTACK_TELEMETRY_ENABLED": "False",
                **(env or {})}
    return subprocess.run([sys.executable, "-m", "docqa.cli", *args], capture_output=True, text=True,
                          env=full_env, timeout=180)


def test_compare_command_exit_codes_and_output(tmp_path):
    old = _write_run(tmp_path / "old", [1.0, 1.0, 1.0, 1.0])
    same = _write_run(tmp_path / "same", [1.0, 1.0, 1.0, 1.0])
    worse = _write_run(tmp_path / "worse", [1.0, 0.0, 0.0, 1.0])

    passed = _cli(tmp_path, "eval", "compare", str(old), str(same))
    assert passed.returncode == 0, passed.stderr
    assert "f1" in passed.stdout and (same / "compare.csv").is_file()

    failed = _cli(tmp_path, "eval", "compare", str(old), str(worse), "--metric", "f1", "--threshold", "0.02")
    assert failed.returncode == 1
    assert "regression: standard f1 1.0000 -> 0.5000" in failed.stderr
    with (worse / "compare.csv").open() as handle:
        row = next(r for r in csv.DictReader(handle) if r["metric"] == "f1")
    assert float(row["delta"]) == -0.5 and row["losses"] == "2"

    bad = _cli(tmp_path, "eval", "compare", str(old), str(tmp_path / "missing"))
    assert bad.returncode == 2 and bad.stderr.startswith("error: no evaluation results")


def test_eval_command_writes_every_report_and_resumes(tmp_path):
    dataset = tmp_path / "questions.csv"
    dataset.write_text("question,answer\nWhat is the capital of France?,Paris\nWho wrote Hamlet?,Shakespeare\n"
                       "What colour is the sky?,blue\n")
    out = tmp_path / "run"
    with scripted_openai_server(mode="fixed", answer="Paris [1]") as base_url:
        env = {"DOCQA_LLM_BASE_URL": base_url, "DOCQA_LLM_MODEL": "scripted", "DOCQA_LLM_API_KEY": "x"}
        first = _cli(tmp_path, "eval", "--dataset", str(dataset), "--pipelines", "no_retrieval", "--out", str(out),
                     "--limit", "2", "-q", env=env)
        assert first.returncode == 0, first.stderr
        again = _cli(tmp_path, "eval", "--dataset", str(dataset), "--pipelines", "no_retrieval", "--out", str(out),
                     "-q", env=env)
        assert again.returncode == 2 and "--resume" in again.stderr
        resumed = _cli(tmp_path, "eval", "--dataset", str(dataset), "--pipelines", "no_retrieval", "--out",
                       str(out), "--resume", "-q", env=env)
        assert resumed.returncode == 0, resumed.stderr

    lines = [json.loads(line) for line in (out / RESULTS_FILE).read_text().splitlines()]
    assert [r["question"] for r in lines] == ["What is the capital of France?", "Who wrote Hamlet?",
                                             "What colour is the sky?"]
    assert [r["em"] for r in lines] == [1.0, 0.0, 0.0] and all(r["trace_id"] for r in lines)
    with (out / "summary.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert row["pipeline"] == "no_retrieval" and row["n"] == "3" and float(row["em"]) == pytest.approx(1 / 3, abs=1e-4)
    assert "| no_retrieval | 3 | 33.3 |" in resumed.stdout
    for name in ("report.md", "report.html", "scores.png", "cost.png", "wall_time.png", "run.json"):
        assert (out / name).is_file(), name
    assert json.loads((out / "run.json").read_text())["asked_by"] == "eval:run"
