"""The layering contract in pyproject.toml (`[tool.importlinter]`) holds for every import, function-level ones
included: settings/result -> llm/stores -> components -> pipelines -> audit/ingestion -> service -> server/cli.

The checkout maps top-level folders (components/, pipelines/, ...) into `docqa.*`, which import-linter cannot see
through an editable install, so the test lays the sources out as they install and checks that copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _installed_layout(target: Path) -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    for package, folder in config["tool"]["setuptools"]["package-dir"].items():
        shutil.copytree(ROOT / folder, target / package.replace(".", "/"), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "static", "prompts", "data"))


def test_imports_follow_the_layers(tmp_path: Path) -> None:
    _installed_layout(tmp_path / "src")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 kept, 0 broken" in done.stdout, done.stdout


def test_a_lower_layer_importing_a_higher_one_breaks_the_contract(tmp_path: Path) -> None:
    # The check itself must be able to fail: a settings module that imports the server is caught.
    _installed_layout(tmp_path / "src")
    (tmp_path / "src" / "docqa" / "settings.py").write_text(
        (ROOT / "docqa" / "settings.py").read_text(encoding="utf-8") + "\n\ndef _late():\n"
        "    from docqa.server import app  # noqa: F401\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "src")}
    done = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert done.returncode != 0
    assert "docqa.settings -> docqa.server" in done.stdout, done.stdout
