"""Registry `name -> builder` of the question-answering strategies.

Usage:
    from docqa.pipelines.registry import build_pipeline, available_pipelines
    pipeline = build_pipeline("standard", runtime, top_k=5)
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from docqa.errors import UnknownPipelineError
from docqa.pipelines.base import QAPipeline
from docqa.pipelines.options import StrategyInputs, StrategyOptions, validate_inputs, validate_options
from docqa.runtime import Runtime
from docqa.settings import Settings

Builder = Callable[..., QAPipeline]

# Modules that register strategies when imported; a new strategy adds its module here.
_STRATEGY_MODULES = ("docqa.pipelines.baselines", "docqa.pipelines.resp", "docqa.pipelines.atrag",
                     "docqa.pipelines.mspr", "docqa.pipelines.contregen")


@dataclass(frozen=True)
class PipelineSpec:
    name: str
    description: str
    builder: Builder
    options: type[StrategyOptions]
    inputs: type[StrategyInputs] = StrategyInputs
    # The YAML file of a strategy loaded from DOCQA_PIPELINES_DIR (None for the built-ins).
    source: str | None = None


_REGISTRY: dict[str, PipelineSpec] = {}
# Strategies from DOCQA_PIPELINES_DIR, replaced as a whole by `set_file_strategies`.
_FILE_STRATEGIES: dict[str, PipelineSpec] = {}
_loaded = False


def register(name: str, description: str, options: type[StrategyOptions],
             inputs: type[StrategyInputs] = StrategyInputs) -> Callable[[Builder], Builder]:
    """Register a builder; `options` (build) and `inputs` (run) are the typed models callers are checked against."""

    def decorator(builder: Builder) -> Builder:
        if name in _REGISTRY and _REGISTRY[name].builder is not builder:
            raise ValueError(f"pipeline {name!r} is registered twice")
        _REGISTRY[name] = PipelineSpec(name=name, description=description, builder=builder, options=options,
                                       inputs=inputs)
        return builder

    return decorator


def _load() -> None:
    global _loaded
    if not _loaded:
        for module in _STRATEGY_MODULES:
            importlib.import_module(module)
        _loaded = True


def set_file_strategies(specs: list[PipelineSpec]) -> None:
    """Replace the strategies loaded from files; a file may not take a built-in strategy's name."""
    _load()
    clashing = sorted(spec.name for spec in specs if spec.name in _REGISTRY)
    if clashing:
        raise ValueError(f"strategy files may not replace built-in strategies: {', '.join(clashing)}")
    _FILE_STRATEGIES.clear()
    _FILE_STRATEGIES.update({spec.name: spec for spec in specs})


def available_pipelines() -> list[PipelineSpec]:
    _load()
    return sorted([*_REGISTRY.values(), *_FILE_STRATEGIES.values()], key=lambda spec: spec.name)


def pipeline_spec(name: str) -> PipelineSpec:
    """:raises UnknownPipelineError: no strategy of that name."""
    _load()
    spec = _REGISTRY.get(name) or _FILE_STRATEGIES.get(name)
    if spec is None:
        known = ", ".join(sorted([*_REGISTRY, *_FILE_STRATEGIES]))
        raise UnknownPipelineError(f"unknown pipeline {name!r}; available: {known}")
    return spec


def check_options(name: str, options: dict[str, Any] | None, runtime: Runtime) -> StrategyOptions:
    """The strategy's typed options; raises `InvalidOptionsError` naming a wrong or out-of-range option."""
    return validate_options(name, options, runtime.settings, pipeline_spec(name).options)


def resolve_options(name: str, options: dict[str, Any] | None, settings: Settings) -> StrategyOptions:
    """The strategy's typed options with every default filled in: equal models build equal pipelines.

    :raises UnknownPipelineError: no strategy of that name.
    :raises InvalidOptionsError: an unknown, mistyped or out-of-range option.
    """
    spec = pipeline_spec(name)
    return validate_options(name, options, settings, spec.options).resolved(settings, _builder_defaults(spec))


@functools.cache
def _builder_defaults(spec: PipelineSpec) -> dict[str, Any]:
    try:
        parameters = inspect.signature(spec.builder).parameters.values()
    except (TypeError, ValueError):  # a builder without a readable signature keeps its options as given
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def build_from_options(name: str, runtime: Runtime, options: StrategyOptions) -> QAPipeline:
    """Build a strategy from options its model already validated (`resolve_options`), without checking again."""
    spec = pipeline_spec(name)
    if not isinstance(options, spec.options):
        raise TypeError(f"pipeline {name!r} takes {spec.options.__name__}, not {type(options).__name__}")
    return spec.builder(runtime, **options.build_kwargs())


def check_inputs(name: str, inputs: dict[str, Any] | None) -> dict[str, Any]:
    """The strategy's runtime inputs as `run` keyword arguments; raises `InvalidOptionsError` when not taken."""
    return validate_inputs(name, inputs, pipeline_spec(name).inputs).run_kwargs()


def build_pipeline(name: str, runtime: Runtime, **options: Any) -> QAPipeline:
    """Build a strategy from caller options, validated by its options model (every entry point comes here)."""
    return pipeline_spec(name).builder(runtime, **check_options(name, options, runtime).build_kwargs())
