"""The README quick start's own command: `docqa demo` with the packaged model in a fresh data dir.

Whatever the 270M model replies, the user gets an answer line with a citation: the model's answer, or the
retrieved sentence on the expense-report limit labelled as extracted.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.integration


def test_demo_prints_an_answer_line_with_a_citation(local_llm_settings, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCQA_")}
    # Same data dir as the fixture (its local LLM server is reused); the store is empty until the demo ingests.
    env.update(DOCQA_DATA_DIR=str(local_llm_settings.data_dir))
    proc = subprocess.run([sys.executable, "-m", "docqa.cli", "demo"], capture_output=True, text=True, env=env,
                          timeout=900, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    after_question = proc.stdout.split("Question: ", 1)[1].splitlines()[2:]
    answer_lines = [line for line in after_question if line.strip()][:4]
    assert "(no answer)" not in proc.stdout
    cited = [line for line in answer_lines if re.search(r"\[\d\]", line)]
    sources = proc.stdout.split("Sources:", 1)[1]
    assert cited, proc.stdout
    if answer_lines[0].startswith("No answer from the model"):
        assert cited[0].startswith("Extracted: Employees submit expense reports within 30 days"), proc.stdout
    assert "expense_policy.md" in sources, proc.stdout
    # A first run is quiet: no library warnings, advice or progress bars, only docqa's one line for the export.
    noise = [line for line in proc.stderr.splitlines()
             if re.search(r"warn|%\||it/s|Loading weights|advice|Please consider", line, re.IGNORECASE)]
    assert noise == [], proc.stderr
    assert all(line.startswith("preparing the embedding model") or not line.strip()
               for line in proc.stderr.splitlines()), proc.stderr
