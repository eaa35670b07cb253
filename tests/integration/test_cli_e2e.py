"""End to end through the CLI: ingest a multi-hop slice as files, answer through the real local LLM server.

The 270M model's answers are not checked for correctness (see the project notes), only their shape: a
non-empty run, citations that point at ingested chunks, every step recorded, usage totals.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from docqa_eval.datasets import load_corpus, load_questions

pytestmark = pytest.mark.integration

N_QUESTIONS = 2


def _cli(settings, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCQA_")}
    # Same data dir as the fixture: the subprocess reuses its local LLM server instead of starting one.
    env.update(DOCQA_DATA_DIR=str(settings.data_dir), DOCQA_LLM_MAX_TOKENS="48")
    return subprocess.run([sys.executable, "-m", "docqa.cli", *args], capture_output=True, text=True, env=env,
                          timeout=900)


@pytest.fixture(scope="module")
def hotpot_slice(tmp_path_factory) -> tuple[Path, list]:
    try:
        questions = load_questions("hotpotqa")[:N_QUESTIONS]
        corpus = {d.id: d for d in load_corpus("hotpotqa")}
    except FileNotFoundError:
        pytest.skip("../shared/data/multihop is not present")
    wanted = {pid for q in questions for pid in q.supporting_ids}
    # The supporting passages plus distractors, as plain-text files the CLI ingests.
    ids = sorted(wanted) + [pid for pid in sorted(corpus) if pid not in wanted][:40]
    folder = tmp_path_factory.mktemp("hotpot-slice")
    for number, pid in enumerate(ids):
        (folder / f"passage-{number:03d}.txt").write_text(corpus[pid].content, encoding="utf-8")
    return folder, questions


def test_ingest_then_ask_standard_and_no_retrieval(local_llm_settings, hotpot_slice):
    folder, questions = hotpot_slice
    ingest = _cli(local_llm_settings, "ingest", str(folder), "--quiet")
    assert ingest.returncode == 0, ingest.stderr
    n_files = len(list(folder.glob("*.txt")))
    assert f"{n_files} written" in ingest.stdout

    reingest = _cli(local_llm_settings, "ingest", str(folder), "--quiet")
    assert reingest.returncode == 0 and f"{n_files} unchanged" in reingest.stdout

    for question in questions:
        proc = _cli(local_llm_settings, "ask", question.question, "--pipeline", "standard", "--json")
        assert proc.returncode == 0, proc.stderr
        result = json.loads(proc.stdout)
        assert result["pipeline"] == "standard"
        assert isinstance(result["answer"], str)
        # The hybrid retriever's embedder, retrievers and joiner are its child steps (kind `component`).
        # A model answer the grounding check does not find in its passages is followed by the extractive fallback.
        kinds = [s["kind"] for s in result["steps"] if s["kind"] != "component"]
        assert kinds in (["retrieval", "generation", "prompt", "generation", "parse", "grounding"],
                         ["retrieval", "generation", "prompt", "generation", "parse", "grounding", "fallback"]), kinds
        assert {s["parent"] for s in result["steps"] if s["kind"] == "component"} == {0}
        retrieved = [d["id"] for d in result["steps"][0]["outputs"]["documents"]]
        assert 1 <= len(retrieved) <= 5
        assert {c["document_id"] for c in result["citations"]} <= set(retrieved)
        # Named below the folder that was ingested, not by the absolute path.
        assert all((folder / c["source"]).is_file() and "/" not in c["source"] for c in result["citations"])
        generation = next(s for s in result["steps"] if s["name"] == "answer_llm")  # the answer's model call
        assert generation["name"] == "answer_llm" and generation["llm"]["calls"] == 1
        assert generation["outputs"]["llm_calls"][0]["prompt"].count("\n[") >= 1
        assert result["totals"]["llm_calls"] == 1 and result["totals"]["total_tokens"] > 0

    plain = _cli(local_llm_settings, "ask", questions[0].question, "--pipeline", "no_retrieval", "--json")
    assert plain.returncode == 0, plain.stderr
    result = json.loads(plain.stdout)
    assert result["citations"] == [] and [s["kind"] for s in result["steps"]] == [
        "generation", "prompt", "generation", "parse", "grounding"]
