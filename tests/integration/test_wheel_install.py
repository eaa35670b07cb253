"""`pip install .` as a deployer gets it: the wheel, installed into a fresh virtual environment outside the
checkout, migrates its database, ingests and answers (against the scripted OpenAI-compatible server).

Fast and offline: the wheel is built without build isolation from a clean copy of the sources, and the new
environment sees this environment's already-installed dependencies through a `.pth` file instead of
reinstalling them. `.pth` files are not processed recursively, so this environment's editable-install finder
stays inactive there: `docqa` can only come from the wheel, which the test asserts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.scripted_openai_server import MODEL, scripted_openai_server

pytestmark = pytest.mark.integration

CHECKOUT = Path(__file__).resolve().parents[2]
ANSWER = "Expense reports are due within 30 days of purchase [1]."
QUESTION = "Within how many days must expense reports be submitted?"


@dataclass(frozen=True)
class InstalledWheel:
    python: Path
    docqa: Path
    site_packages: Path
    workdir: Path


def _run(command: list[str | Path], *, cwd: Path, env: dict[str, str] | None = None,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(part) for part in command], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _checked(proc: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str]:
    assert proc.returncode == 0, f"{proc.args} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _copy_sources(target: Path) -> Path:
    """What `pip install .` reads, taken from the package-dir mapping so new top-level folders come along.

    Building from a copy keeps build/ and *.egg-info out of the checkout and, above all, keeps stale files
    from an earlier build/lib out of the wheel, where they would hide a file the packaging forgot.
    """
    pyproject = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))
    folders = set(pyproject["tool"]["setuptools"]["package-dir"].values())
    source = target / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "MANIFEST.in"):
        if (CHECKOUT / name).is_file():
            shutil.copy2(CHECKOUT / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in sorted(folders):
        shutil.copytree(CHECKOUT / folder, source / folder, ignore=ignore)
    return source


def _clean_env(**extra: str) -> dict[str, str]:
    # Nothing from the developer's shell may point back at the checkout or at another docqa configuration.
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("DOCQA_") and k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env.update(HAYSTACK_TELEMETRY_ENABLED="False", **extra)
    return env


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InstalledWheel]:
    root = tmp_path_factory.mktemp("wheel-install")
    source = _copy_sources(root)
    dist = root / "dist"
    _checked(_run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-cache-dir",
                   "--quiet", "--wheel-dir", dist, source], cwd=root, timeout=300))
    wheels = list(dist.glob("docqa-*.whl"))
    assert len(wheels) == 1, wheels

    venv = root / "venv"
    # No pip inside: this environment's pip installs into it through --python.
    _checked(_run([sys.executable, "-m", "venv", "--without-pip", venv], cwd=root))
    python = venv / "bin" / "python"
    site_packages = Path(_checked(_run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root)).stdout.strip())
    outer = dict.fromkeys(sysconfig.get_paths()[key] for key in ("purelib", "platlib"))
    (site_packages / "_docqa_test_dependencies.pth").write_text("".join(f"{path}\n" for path in outer),
                                                                  encoding="utf-8")
    _checked(_run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
                   "--quiet", wheels[0]], cwd=root, env=_clean_env()))

    workdir = root / "work"
    workdir.mkdir()
    yield InstalledWheel(python=python, docqa=venv / "bin" / "docqa", site_packages=site_packages, workdir=workdir)


def test_docqa_resolves_to_the_wheel_not_the_checkout(installed_wheel: InstalledWheel):
    probe = (
        "import json, docqa, docqa.schema as schema\n"
        "from docqa.server.routes.ui import STATIC_DIR\n"
        "print(json.dumps({'docqa': docqa.__file__, 'migrations': str(schema.migrations_dir()),"
        " 'static': str(STATIC_DIR)}))\n"
    )
    proc = _checked(_run([installed_wheel.python, "-c", probe], cwd=installed_wheel.workdir, env=_clean_env()))
    where = {name: Path(path) for name, path in json.loads(proc.stdout).items()}
    package = installed_wheel.site_packages / "docqa"
    assert where["docqa"] == package / "__init__.py"
    assert not where["docqa"].resolve().is_relative_to(CHECKOUT)
    assert where["migrations"] == package / "migrations"
    assert (where["migrations"] / "env.py").is_file()
    shipped = sorted(p.name for p in (where["migrations"] / "versions").glob("*.py"))
    assert shipped == sorted(p.name for p in (CHECKOUT / "migrations" / "versions").glob("*.py"))
    assert where["static"] == package / "server" / "static"
    assert (where["static"] / "index.html").is_file()
    # The audit trail and accounts ship in the core; evaluation helpers (they read ../shared) stay in the checkout.
    assert (package / "audit" / "recorder.py").is_file() and (package / "accounts" / "models.py").is_file()
    assert not (installed_wheel.site_packages / "docqa_eval").exists()
    assert not (package / "datasets.py").exists()


def test_upgrade_ingest_and_ask_from_the_wheel(installed_wheel: InstalledWheel, tmp_path: Path):
    data_dir = tmp_path / "data"
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "expenses.md").write_text(
        "# Expense policy\n\nEmployees must submit expense reports within 30 days of purchase, with receipts.\n",
        encoding="utf-8")
    (docs / "travel.txt").write_text("Travel must be booked through the corporate travel portal.\n",
                                     encoding="utf-8")

    with scripted_openai_server(mode="fixed", answer=ANSWER) as llm_url:
        env = _clean_env(DOCQA_DATA_DIR=str(data_dir), DOCQA_LLM_BASE_URL=llm_url, DOCQA_LLM_MODEL=MODEL,
                         DOCQA_LLM_API_KEY="not-needed", DOCQA_LLM_MAX_RETRIES="0")

        def docqa(*args: str) -> subprocess.CompletedProcess[str]:
            return _checked(_run([installed_wheel.docqa, *args], cwd=installed_wheel.workdir, env=env))

        upgrade = docqa("db", "upgrade")
        assert "database at head" in upgrade.stdout
        assert (data_dir / "docqa.sqlite3").is_file()

        ingest = docqa("ingest", str(docs), "--quiet")
        assert "2 written" in ingest.stdout

        result = json.loads(docqa("ask", QUESTION, "--pipeline", "standard", "--json").stdout)

    assert result["answer"] == ANSWER and result["answer_source"] == "model"  # the check found "30 days" in [1]
    # The hybrid retriever's embedder, retrievers and joiner are its child steps (kind `component`).
    assert [step["kind"] for step in result["steps"] if step["kind"] != "component"] == [
        "retrieval", "generation", "prompt", "generation", "parse", "grounding"]
    assert result["citations"], result
    assert result["citations"][0]["source"] == "expenses.md"  # as ingested, not the absolute path
    assert result["trace_id"]
