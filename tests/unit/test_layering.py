"""Layering of the installed package, read from the sources: the core never imports the HTTP server, installed
code never imports checkout-only helpers, and every package folder is listed for the wheel."""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
SETUPTOOLS = tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
PACKAGE_DIRS: dict[str, str] = SETUPTOOLS["package-dir"]
# Folders a deployer never gets: they may read ../shared, test fixtures and the like.
CHECKOUT_ONLY = ("docqa_eval", "tests", "bench")


def _installed_modules() -> Iterator[tuple[str, Path]]:
    """(dotted package of the file, file) for every .py file the wheel installs."""
    for package, folder in sorted(PACKAGE_DIRS.items()):
        root = CHECKOUT / folder
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).parent.parts
            if "__pycache__" in parts:
                continue
            yield ".".join((package, *parts)), path


def _imported(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.lineno, node.module


def test_only_the_server_imports_the_server() -> None:
    offenders = [f"{path.relative_to(CHECKOUT)}:{line} imports {name}"
                 for package, path in _installed_modules() if not package.startswith("docqa.server")
                 for line, name in _imported(path) if name == "docqa.server" or name.startswith("docqa.server.")]
    assert offenders == []


def test_installed_code_never_imports_checkout_only_helpers() -> None:
    offenders = [f"{path.relative_to(CHECKOUT)}:{line} imports {name}"
                 for _, path in _installed_modules() for line, name in _imported(path)
                 if name.split(".")[0] in CHECKOUT_ONLY]
    assert offenders == []


def test_every_package_folder_is_listed_for_the_wheel() -> None:
    found = {package for package, path in _installed_modules() if path.name == "__init__.py"}
    assert found - set(SETUPTOOLS["packages"]) == set()
    assert {"docqa.audit", "docqa.accounts"} <= found
