"""`docqa pipelines`: the built-in and file strategies, and `docqa pipelines export NAME` as Haystack YAML."""

from __future__ import annotations

from pathlib import Path

from docqa.pipelines.yaml_strategies import load_strategy
from docqa.settings import Settings
from tests.unit.test_cli import run_cli
from tests.unit.test_haystack_strategies import BM25_RAG

# Building a strategy resolves its LLM endpoint; a configured URL keeps the embedded server from starting.
NO_LOCAL_LLM = {"DOCQA_LLM_BASE_URL": "http://127.0.0.1:9/v1"}


def _loaded(tmp_path: Path, text: str):
    """The export as docqa's file loader reads it: no local path in it, the deployment's store bound back."""
    assert str(tmp_path) not in text and str(Path.home()) not in text
    return load_strategy(text, name="copy", source="copy.yaml", settings=Settings(data_dir=tmp_path / "data")).pipeline


def test_export_prints_yaml_that_haystack_loads_back(tmp_path):
    proc = run_cli(tmp_path, "pipelines", "export", "standard", env=NO_LOCAL_LLM)
    assert proc.returncode == 0, proc.stderr
    pipeline = _loaded(tmp_path, proc.stdout)
    assert set(dict(pipeline.walk())) == {"hybrid_retriever", "cited_answer_generator", "grounding"}
    assert "api_key" not in proc.stdout and "127.0.0.1:9" not in proc.stdout


def test_resp_exports_as_yaml_that_haystack_loads_back(tmp_path):
    proc = run_cli(tmp_path, "pipelines", "export", "resp", env=NO_LOCAL_LLM)
    assert proc.returncode == 0, proc.stderr
    pipeline = _loaded(tmp_path, proc.stdout)
    assert set(dict(pipeline.walk())) == {"resp_controller", "loop_state", "hybrid_retriever",
                                          "dual_function_summarizer", "resp_judge", "resp_planner",
                                          "memory_answer_generator", "grounding"}
    assert "api_key" not in proc.stdout and "127.0.0.1:9" not in proc.stdout

def test_atrag_exports_as_yaml_that_haystack_loads_back(tmp_path):
    proc = run_cli(tmp_path, "pipelines", "export", "atrag", env=NO_LOCAL_LLM)
    assert proc.returncode == 0, proc.stderr
    pipeline = _loaded(tmp_path, proc.stdout)
    assert set(dict(pipeline.walk())) == {"record_query_resolver", "controller", "round_joiner", "round_query",
                                          "mode_router", "record_retriever", "record_table_builder",
                                          "record_round", "window_retriever", "ranked_retriever", "prompt_joiner",
                                          "retrieved_joiner", "cot_answer_generator", "answer_grader",
                                          "query_rewriter", "rewrite_router", "final_joiner", "record_table",
                                          "grounding"}
    assert pipeline._max_runs_per_component == 4  # max_iterations (3) + 1: the controller's first visit
    assert "api_key" not in proc.stdout and "127.0.0.1:9" not in proc.stdout


def test_export_of_an_unknown_pipeline_is_one_error_line(tmp_path):
    proc = run_cli(tmp_path, "pipelines", "export", "nonsense", env=NO_LOCAL_LLM)
    assert proc.returncode == 2 and proc.stderr.startswith("error: unknown pipeline 'nonsense'")


def test_lists_file_strategies_and_names_the_skipped_files(tmp_path):
    directory = tmp_path / "strategies"
    directory.mkdir()
    (directory / "bm25_rag.yaml").write_text(BM25_RAG)
    (directory / "bad.yaml").write_text("components:\n  a: {type: os.system}\n")
    proc = run_cli(tmp_path, "pipelines", env={"DOCQA_PIPELINES_DIR": str(directory)})
    assert proc.returncode == 0, proc.stderr
    names = [line.split()[0] for line in proc.stdout.splitlines()]
    assert "bm25_rag" in names and "standard" in names and "bad" not in names
    assert "bad.yaml" in proc.stderr and "os.system" in proc.stderr
