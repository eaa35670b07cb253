"""No component calls another component's `run` except a `SuperComponent` (#27): composition is a graph, so an
exported YAML shows every node that runs and a trace has a span for each.

A scan of the source of `docqa.components`: a call `<x>.run(...)` or `<x>.run_async(...)` is fine when `<x>` is the
component itself (`self.run`, `super().run`, `Base.run(self, ...)`) or when the calling class is a
`SuperComponent` (its inner pipeline is how it composes); any other is a component hidden inside another.
"""

from __future__ import annotations

import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

from haystack.core.super_component import SuperComponent
from haystack.core.super_component.super_component import _SuperComponent

COMPONENTS = Path(__file__).resolve().parents[2] / "components"
RUN_METHODS = ("run", "run_async")


@dataclass(frozen=True)
class Call:
    module: str
    cls: str | None
    line: int
    code: str


def _own_run(call: ast.Call) -> bool:
    receiver = call.func.value  # type: ignore[attr-defined]
    if isinstance(receiver, ast.Name) and receiver.id == "self":
        return True
    if isinstance(receiver, ast.Call) and isinstance(receiver.func, ast.Name) and receiver.func.id == "super":
        return True
    # `Base.run(self, ...)`: the component's own run, as its base class defines it.
    return (
        isinstance(receiver, ast.Name)
        and receiver.id.lstrip("_")[:1].isupper()
        and bool(call.args)
        and isinstance(call.args[0], ast.Name)
        and call.args[0].id == "self"
    )


def run_calls(source: str, module: str) -> list[Call]:
    """Every call of another object's `run`/`run_async` in the source, with the class it is made from."""
    found: list[Call] = []

    def visit(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name)
                continue
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Attribute)
                and child.func.attr in RUN_METHODS
                and not _own_run(child)
            ):
                found.append(Call(module, cls, child.lineno, ast.get_source_segment(source, child.func) or ""))
            visit(child, cls)

    visit(ast.parse(source), None)
    return found


def _is_super_component(module: str, cls: str | None) -> bool:
    if cls is None:
        return False
    value = getattr(importlib.import_module(f"docqa.components.{module}"), cls, None)
    return isinstance(value, type) and issubclass(value, SuperComponent | _SuperComponent)


def hidden_runs() -> list[Call]:
    calls = [
        call
        for path in sorted(COMPONENTS.glob("*.py"))
        for call in run_calls(path.read_text(encoding="utf-8"), path.stem)
    ]
    return [call for call in calls if not _is_super_component(call.module, call.cls)]


def test_no_component_runs_another_component_except_a_super_component() -> None:
    assert [(call.module, call.cls, call.code) for call in hidden_runs()] == []


def test_the_scan_finds_a_component_hidden_inside_another() -> None:
    source = '''
class Expander:
    """Usage: `Expander(retriever).run(query="q")` (a docstring is not a call)."""

    def run(self, query):
        return self.retriever.run(query=query)["documents"]

    def _embed(self, text):
        return embedder.run_async(text=text), helper.run(self)

    def warm(self):
        return self.run(query="x"), super().run(query="y"), Base.run(self, query="z")
'''
    assert [(c.cls, c.code) for c in run_calls(source, "expander")] == [
        ("Expander", "self.retriever.run"),
        ("Expander", "embedder.run_async"),
        ("Expander", "helper.run"),
    ]
