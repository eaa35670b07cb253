"""Prompt templates: packaged defaults in `prompts/`, overridable per file by a deployer's directory.

Templates are Jinja2 (sandboxed). A deployer copies e.g. `resp_judge.txt` into `DOCQA_PROMPTS_DIR` and edits it.

Usage:
    template = load_prompt("standard_answer", override_dir=settings.prompts_dir)
    prompt = render_prompt(template, question="...", documents=docs)
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import StrictUndefined
from jinja2.sandbox import SandboxedEnvironment

_ENV = SandboxedEnvironment(undefined=StrictUndefined, keep_trailing_newline=False, autoescape=False)


def load_prompt(name: str, override_dir: Path | None = None) -> str:
    """The text of template `name` (without `.txt`), from `override_dir` when it holds that file."""
    if override_dir is not None:
        candidate = Path(override_dir) / f"{name}.txt"
        if candidate.is_file():
            return candidate.read_text(encoding="utf-8")
    packaged = resources.files("docqa.components").joinpath("prompts", f"{name}.txt")
    if not packaged.is_file():
        raise FileNotFoundError(f"no prompt template named {name!r}")
    return packaged.read_text(encoding="utf-8")


@lru_cache(maxsize=128)
def _compile(template: str) -> Any:
    return _ENV.from_string(template)


def render_prompt(template: str, **variables: Any) -> str:
    return _compile(template).render(**variables).strip()


def prompt_fingerprint(template: str) -> str:
    """Short hash recorded in pipeline configs so auditors can tell which prompt text produced an answer."""
    return hashlib.sha256(template.encode()).hexdigest()[:16]
