"""The built-in strategies' names and descriptions, read from their modules' `@register(...)` calls unimported.

Importing a strategy module imports Haystack, which imports PyTorch: seconds before `docqa pipelines` could
print a line. Listing reads the registry's module list and each module's `register("name", "description", ...)`
decorators from the source instead, so it loads no model and no framework. A test keeps it equal to
`available_pipelines()`; building or exporting a strategy still goes through the registry.

Usage:
    for name, description in builtin_strategies():
        print(f"{name:14} {description}")
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

_REGISTRY_MODULE = "registry.py"
_MODULES_CONSTANT = "_STRATEGY_MODULES"


def builtin_strategies() -> list[tuple[str, str]]:
    """(name, description) of every built-in strategy, sorted by name.

    :raises LookupError: the sources cannot be read as expected (the caller then imports the registry).
    """
    spec = importlib.util.find_spec("docqa.pipelines")
    if spec is None or not spec.submodule_search_locations:
        raise LookupError("docqa.pipelines is not installed")
    folder = Path(next(iter(spec.submodule_search_locations)))
    found: list[tuple[str, str]] = []
    for module in _strategy_modules(folder / _REGISTRY_MODULE):
        found += _registered(folder / f"{module.rsplit('.', 1)[-1]}.py")
    if not found:
        raise LookupError("no @register call found in the strategy modules")
    return sorted(found)


def _tree(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, SyntaxError) as exc:
        raise LookupError(f"cannot read {path}: {exc}") from exc


def _strategy_modules(registry: Path) -> list[str]:
    for node in _tree(registry).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        if any(isinstance(t, ast.Name) and t.id == _MODULES_CONSTANT for t in targets) and node.value is not None:
            value = ast.literal_eval(node.value)
            if isinstance(value, tuple | list) and all(isinstance(v, str) for v in value):
                return list(value)
    raise LookupError(f"{registry} defines no {_MODULES_CONSTANT}")


def _registered(module: Path) -> list[tuple[str, str]]:
    found = []
    for node in ast.walk(_tree(module)):
        if not isinstance(node, ast.FunctionDef | ast.ClassDef):
            continue
        for decorator in node.decorator_list:
            if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Name)
                    and decorator.func.id == "register" and len(decorator.args) >= 2
                    and all(isinstance(a, ast.Constant) and isinstance(a.value, str) for a in decorator.args[:2])):
                found.append((decorator.args[0].value, decorator.args[1].value))
    return found
