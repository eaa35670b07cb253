"""Registry `name -> builder` of the question-answering strategies.

Usage:
    from docqa.pipelines.registry import build_pipeline, available_pipelines
    pipeline = build_pipeline("standard", runtime, top_k=5)
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from docqa.errors import UnknownPipelineError
from docqa.pipelines.base import QAPipeline
from docqa.runtime import Runtime

Builder = Callable[..., QAPipeline]

# Modules that register strategies when imported; a new strategy adds its module here.
_STRATEGY_MODULES = ("docqa.pipelines.baselines", "docqa.pipelines.resp", "docqa.pipelines.atrag")


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    builder: Builder


_REGISTRY: dict[str, PipelineSpec] = {}
_loaded = False


def register(name: str, description: str) -> Callable[[Builder], Builder]:
    def decorator(builder: Builder) -> Builder:
        if name in _REGISTRY and _REGISTRY[name].builder is not builder:
            raise ValueError(f"pipeline {name!r} is registered twice")
        _REGISTRY[name] = PipelineSpec(name=name, description=description, builder=builder)
        return builder

    return decorator


def _load() -> None:
    global _loaded
    if not _loaded:
        for module in _STRATEGY_MODULES:
            importlib.import_module(module)
        _loaded = True


def available_pipelines() -> list[PipelineSpec]:
    _load()
    return sorted(_REGISTRY.values(), key=lambda spec: spec.name)


def build_pipeline(name: str, runtime: Runtime, **options: Any) -> QAPipeline:
    _load()
    spec = _REGISTRY.get(name)
    if spec is None:
        known = ", ".join(sorted(_REGISTRY))
        raise UnknownPipelineError(f"unknown pipeline {name!r}; available: {known}")
    return spec.builder(runtime, **options)
