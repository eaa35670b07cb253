"""The CLI's bad-input contract: one clear line on stderr and a non-zero exit, nothing written."""

import os
import subprocess
import sys
from pathlib import Path

import pytest


def run_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "DOCQA_DATA_DIR": str(tmp_path / "data"), **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "docqa.cli", *args], capture_output=True, text=True, env=full_env, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, fragment: str) -> None:
    assert proc.returncode != 0
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert fragment in lines[0]


class TestCliErrors:
    def test_lists_pipelines(self, tmp_path):
        proc = run_cli(tmp_path, "pipelines")
        assert proc.returncode == 0
        assert "standard" in proc.stdout and "no_retrieval" in proc.stdout

    @pytest.mark.parametrize(("question", "fragment"), [("   ", "question is empty"), ("x" * 5000, "the limit is")])
    def test_rejects_bad_questions(self, tmp_path, question, fragment):
        assert_one_line_error(run_cli(tmp_path, "ask", question, "--pipeline", "no_retrieval"), fragment)

    def test_rejects_unknown_pipeline(self, tmp_path):
        proc = run_cli(tmp_path, "ask", "What?", "--pipeline", "nonsense")
        assert_one_line_error(proc, "unknown pipeline 'nonsense'")
        assert "standard" in proc.stderr

    def test_rejects_invalid_setting(self, tmp_path):
        proc = run_cli(tmp_path, "pipelines", env={"DOCQA_TOP_K": "many"})
        assert_one_line_error(proc, "DOCQA_TOP_K")

    def test_unreachable_llm_endpoint(self, tmp_path):
        # Port 9 (discard) is closed on loopback: the client fails to connect.
        proc = run_cli(
            tmp_path, "ask", "What?", "--pipeline", "no_retrieval",
            env={"DOCQA_LLM_BASE_URL": "http://127.0.0.1:9/v1", "DOCQA_LLM_MAX_RETRIES": "0",
                 "DOCQA_LLM_TIMEOUT_S": "5"},
        )
        assert_one_line_error(proc, "LLM endpoint unreachable")

    def test_missing_local_model_file(self, tmp_path):
        proc = run_cli(
            tmp_path, "ask", "What?", "--pipeline", "no_retrieval",
            env={"DOCQA_LOCAL_LLM_MODEL_PATH": str(tmp_path / "missing.gguf")},
        )
        assert_one_line_error(proc, "missing.gguf")

    def test_ingest_missing_path(self, tmp_path):
        assert_one_line_error(run_cli(tmp_path, "ingest", str(tmp_path / "nope.txt")), "no such file")

    def test_rejects_run_options_a_pipeline_does_not_take(self, tmp_path):
        proc = run_cli(tmp_path, "ask", "What?", "--pipeline", "no_retrieval", "--as-of", "2019-01-01")
        assert_one_line_error(proc, "as_of: not taken by this pipeline")


FHIR_DIR = Path(__file__).resolve().parents[3] / "shared" / "data" / "records" / "synthea_fhir_r4"


class TestRecordsAndTopics:
    def test_records_then_topic_refit(self, tmp_path):
        bundles = sorted(FHIR_DIR.glob("*.json"))
        if not bundles:
            pytest.skip("../shared/data/records is not present")
        smallest = min(bundles, key=lambda p: p.stat().st_size)
        first = run_cli(tmp_path, "records", str(smallest), "--allow", "group:clinicians")
        assert first.returncode == 0, first.stderr
        assert first.stdout.startswith("1 patients: ") and "0 stale records deleted" in first.stdout
        # No topic model yet: one is fitted automatically, and the status says so.
        assert "topic model: fitted v1 automatically (no topic model yet" in first.stdout, first.stdout
        assert "topic model: v1" in first.stdout and "covers all" in first.stdout, first.stdout
        # The same records again: the corpus did not grow, so no new version; they are tagged with v1.
        again = run_cli(tmp_path, "records", str(smallest), "--allow", "group:clinicians")
        assert "automatically" not in again.stdout and "covers all" in again.stdout, again.stdout
        refit = run_cli(tmp_path, "topics", "refit")
        assert refit.returncode == 0, refit.stderr
        assert "topic model version 2" in refit.stdout and "(supervised)" in refit.stdout
        status = run_cli(tmp_path, "topics", "status", "--json")
        assert status.returncode == 0 and '"state": "current"' in status.stdout, status.stderr
        assert '"versions": [1, 2]' in status.stdout, status.stdout

    def test_ingest_points_record_folders_at_the_records_command(self, tmp_path):
        folder = tmp_path / "export"
        folder.mkdir()
        (folder / "patients.csv").write_text("Id,BIRTHDATE\n")
        proc = run_cli(tmp_path, "ingest", "-q", str(folder))
        assert f"docqa records {folder}" in proc.stderr, proc.stderr
        # One file of either kind: the exact command for it.
        bundle = tmp_path / "Max_Kris.json"
        bundle.write_text("{}")
        proc = run_cli(tmp_path, "ingest", "-q", str(bundle), str(folder / "patients.csv"))
        assert f"ingest it with `docqa records {bundle}`" in proc.stderr, proc.stderr
        assert f"ingest the export's folder with `docqa records {folder}`" in proc.stderr, proc.stderr

    def test_records_missing_path(self, tmp_path):
        assert_one_line_error(run_cli(tmp_path, "records", str(tmp_path / "none.json")), "no such file")
