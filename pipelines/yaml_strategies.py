"""Strategies as Haystack YAML: export a built-in one, and serve each `NAME.yaml` of `DOCQA_PIPELINES_DIR`.

Loading is allow-listed: only `docqa.*` and `haystack.*` types (and the sentence-transformers embedders docqa
uses) are deserialized (Haystack's `allowed_modules`, never `unsafe`), and `yaml_contract` refuses, before anything
is built, any LLM client but `RoleChatGenerator`, fetchers, web search, remote embedders and Secrets. The store,
the embedders and the data directory are always the deployment's (what a file says of them is replaced);
`RoleChatGenerator`s use the deployment's model of their role. The access contract of `HaystackStrategy` applies:
retrievers take docqa's filters, built from the caller's scope. A file strategy takes no caller options, answers
with the same result contract and is audited like the built-ins; a component that raises makes the run fail with
`strategy_failed` (502) naming the strategy, and a `failed` trace.

Usage:
    print(export_strategy("standard", runtime))            # docqa pipelines export standard
    errors = load_pipelines_dir(settings)                  # at start-up; each error names its file
    build_pipeline("my_rag", runtime).run(question, scope)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError
from haystack.core.serialization import generate_qualified_class_name

from docqa.access import AccessScope
from docqa.components.prompted_llm import inner_step_kinds
from docqa.errors import ConfigurationError, DocqaError
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import StrategyOptions
from docqa.pipelines.registry import PipelineSpec, build_pipeline, set_file_strategies
from docqa.pipelines.yaml_contract import (
    ALLOWED_PREFIXES,
    StrategyFileError,
    bind_to_deployment,
    check_contract,
    embedder_kind,
    marshal,
    portable,
    refuse_own_clients,
)
from docqa.result import PipelineResult
from docqa.run_control import RunStopped
from docqa.runtime import Runtime

logger = logging.getLogger(__name__)

# Module prefixes a file's types may come from (tests widen both to load their own components).
_ALLOWED_PREFIXES = ALLOWED_PREFIXES
ALLOWED_MODULES = [prefix + "*" for prefix in ALLOWED_PREFIXES]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_FILE_BYTES = 1_000_000


class StrategyFailedError(DocqaError):
    """A YAML strategy's component raised: the strategy's fault, not the caller's (a 502, as from a gateway)."""

    code = "strategy_failed"
    http_status = 502


class FileStrategyOptions(StrategyOptions):
    """A YAML strategy takes no caller options: what it does is what its file says."""


class FileStrategy(HaystackStrategy):
    """A strategy loaded from a YAML file: a component that raises fails the run with `StrategyFailedError`."""

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None,
            **inputs: Any) -> PipelineResult:
        try:
            return super().run(question, scope, filters, **inputs)
        except (DocqaError, RunStopped):  # the LLM, the budget, the deadline: callers already handle these
            raise
        except Exception as exc:
            # The exception's text is for operators (logged as the error's detail; the trace's failed step
            # holds it too): a caller learns what failed, not the internals of a file they did not write.
            raise StrategyFailedError(
                f"strategy {self.name!r} failed: one of its components raised {type(exc).__name__}",
                detail=f"strategy {self.name!r}: {type(exc).__name__}: {_one_line(exc)}",
            ) from exc


def export_strategy(name: str, runtime: Runtime, **options: Any) -> str:
    """The strategy as Haystack YAML a `DOCQA_PIPELINES_DIR` file may hold: the pipeline's dict without its
    deployment-bound parameters (store, embedders, data directory: resolved again at load, so no local path is
    written), LLMs named by role.

    :raises ConfigurationError: the strategy is not (yet) a Haystack pipeline, a component cannot be serialized,
        or it uses what a YAML strategy may not (e.g. `mspr` with a web source).
    """
    strategy = build_pipeline(name, runtime, **options)
    if not isinstance(strategy, HaystackStrategy):
        raise ConfigurationError(f"pipeline {name!r} is not a Haystack pipeline yet and cannot be exported")
    try:
        text = marshal(portable(strategy.pipeline.to_dict()))
    except Exception as exc:  # a component's to_dict can raise anything
        raise ConfigurationError(f"pipeline {name!r} cannot be serialized: {type(exc).__name__}: {exc}") from exc
    try:
        parse_strategy_yaml(text, f"pipeline {name!r}")
    except StrategyFileError as exc:
        raise ConfigurationError(f"cannot be exported as a YAML strategy: {exc.message}") from None
    return text


def parse_strategy_yaml(text: str, source: str) -> dict[str, Any]:
    """The YAML as a pipeline dict, after the checks that need no deserialization.

    :raises StrategyFileError: malformed YAML (with its line), not a pipeline, or (with the line) what the
        contract refuses: see `docqa.pipelines.yaml_contract`.
    """
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise StrategyFileError(f"{source}:{where}: malformed YAML: {problem}") from None
    if not isinstance(data, dict) or not isinstance(data.get("components"), dict) or not data["components"]:
        raise StrategyFileError(f"{source}: not a Haystack pipeline (no `components` mapping)")
    for name, component in data["components"].items():
        if not isinstance(component, dict) or not isinstance(component.get("type"), str):
            raise StrategyFileError(f"{source}: component {name!r} has no `type`")
    check_contract(data, text, source, _ALLOWED_PREFIXES)
    return data


def load_strategy(text: str, *, name: str, source: str, runtime: Runtime | None = None,
                  settings: Any = None) -> HaystackStrategy:
    """Check and deserialize a YAML strategy with the deployment's store, embedders and data directory (from
    `runtime`, else from `settings`, else from the environment); with `runtime`, bind its roles and store too.

    :raises StrategyFileError: anything that keeps the file from being served, naming the file.
    """
    data = parse_strategy_yaml(text, source)
    if runtime is not None:
        settings = runtime.settings
    elif settings is None:
        from docqa.settings import get_settings

        settings = get_settings()
    bind_to_deployment(data, settings, source, _deployment_store(runtime, settings))
    try:
        pipeline = Pipeline.from_dict(data, allowed_modules=list(ALLOWED_MODULES))
    except DeserializationError as exc:
        raise StrategyFileError(f"{source}: {_one_line(exc)}") from None
    except Exception as exc:  # a component's from_dict/__init__ may raise anything
        problem = f"{type(exc).__name__}: {_one_line(exc)}"
        raise StrategyFileError(f"{source}: cannot build the pipeline: {problem}") from None
    refuse_own_clients(pipeline, source)
    roles: set[str] = set()
    for component, attribute, value in _nested(pipeline):
        if isinstance(value, RoleChatGenerator):
            roles.add(value.role)
            if runtime is not None:
                value.bind(runtime.chat_generator(value.role))
        elif attribute == "document_store" and runtime is not None:
            store = runtime.document_store
            if type(store) is not type(value):
                raise StrategyFileError(
                    f"{source}: {type(value).__name__} does not match the deployment's store "
                    f"({type(store).__name__})"
                )
            setattr(component, attribute, store)
        elif runtime is not None and (kind := embedder_kind(generate_qualified_class_name(type(value)))):
            # The runtime's own embedders (the same model and backend as the store's embeddings).
            setattr(component, attribute, runtime.text_embedder() if kind == "query" else runtime.document_embedder())
    models = {role: settings.endpoint_for(role).model for role in sorted(roles)}
    try:
        return FileStrategy(name, pipeline, models=models, max_question_chars=settings.max_question_chars,
                            kinds=inner_step_kinds(pipeline))
    except ConfigurationError as exc:
        raise StrategyFileError(f"{source}: {exc.message}") from None


def _deployment_store(runtime: Runtime | None, settings: Any) -> Callable[[], Any]:
    """The deployment's store, built (lazily, once) only if the file has a store."""

    @cache
    def store() -> Any:
        if runtime is not None:
            return runtime.document_store
        from docqa.stores.factory import build_document_store

        return build_document_store(settings)

    return store


def strategy_files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.glob("*.yaml") if p.is_file())


def _read(path: Path) -> str:
    if path.stat().st_size > MAX_FILE_BYTES:
        raise StrategyFileError(f"{path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StrategyFileError(f"{path}: unreadable: {exc}") from None


def load_pipelines_dir(settings: Any) -> list[str]:
    """Register every valid `*.yaml` of `settings.pipelines_dir` as a strategy; returns the errors (logged).

    Each file is checked completely here (parsed, deserialized, contract-checked), so a bad file never
    reaches a caller; valid ones are re-read and bound to the runtime when a pipeline is built.
    """
    directory = getattr(settings, "pipelines_dir", None)
    specs: list[PipelineSpec] = []
    errors: list[str] = []
    if directory is not None:
        directory = Path(directory)
        if not directory.is_dir():
            errors.append(f"{directory}: DOCQA_PIPELINES_DIR is not a directory")
        else:
            from docqa.pipelines.registry import available_pipelines

            builtin = {spec.name for spec in available_pipelines() if spec.source is None}
            for path in strategy_files(directory):
                name = path.stem
                try:
                    if not _NAME.match(name):
                        raise StrategyFileError(f"{path}: {name!r} is not a valid strategy name")
                    if name in builtin:
                        raise StrategyFileError(f"{path}: {name!r} is a built-in strategy's name")
                    load_strategy(_read(path), name=name, source=str(path), settings=settings)
                except StrategyFileError as exc:
                    errors.append(exc.message)
                    continue
                specs.append(PipelineSpec(name=name, description=f"Haystack YAML strategy ({path.name})",
                                          builder=_file_builder(path, name), options=FileStrategyOptions,
                                          source=str(path)))
    for error in errors:
        logger.error("strategy file skipped: %s", error)
    set_file_strategies(specs)
    return errors


def _file_builder(path: Path, name: str) -> Any:
    def build(runtime: Runtime) -> HaystackStrategy:
        return load_strategy(_read(path), name=name, source=str(path), runtime=runtime)

    return build


def _nested(pipeline: Pipeline) -> Iterator[tuple[Any, str, Any]]:
    """(owner, attribute, value) for every component-like object reachable from the pipeline's components."""
    seen: set[int] = set()

    def walk(owner: Any, depth: int) -> Iterator[tuple[Any, str, Any]]:
        if id(owner) in seen or depth > 6:
            return
        seen.add(id(owner))
        for attribute, value in list(getattr(owner, "__dict__", {}).items()):
            if attribute.startswith("__"):
                continue
            if hasattr(value, "__haystack_input__") or (hasattr(value, "to_dict") and hasattr(value, "from_dict")):
                yield owner, attribute, value
                yield from walk(value, depth + 1)

    for _, instance in pipeline.walk():
        yield from walk(instance, 0)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:500]
