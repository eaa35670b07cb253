"""Strategies as Haystack YAML: export a built-in one, and serve each `NAME.yaml` of `DOCQA_PIPELINES_DIR`.

Loading is allow-listed: only `docqa.*` and `haystack.*` types (and the sentence-transformers embedders docqa
uses) are deserialized (Haystack's `allowed_modules`, never `unsafe`). A document store may only be docqa's, and
it is always the deployment's store (the store a file names is replaced); `RoleChatGenerator`s use the
deployment's model of their role. The access contract of `HaystackStrategy` applies: retrievers take docqa's
filters, built from the caller's scope. A file strategy takes no caller options, answers with the same result
contract and is audited like the built-ins.

Usage:
    print(export_strategy("standard", runtime))            # docqa pipelines export standard
    errors = load_pipelines_dir(settings)                  # at start-up; each error names its file
    build_pipeline("my_rag", runtime).run(question, scope)
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from haystack import Pipeline
from haystack.core.errors import DeserializationError

from docqa.errors import ConfigurationError
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import StrategyOptions
from docqa.pipelines.registry import PipelineSpec, build_pipeline, set_file_strategies
from docqa.runtime import Runtime

logger = logging.getLogger(__name__)

# docqa's and Haystack's own types, and the sentence-transformers embedders docqa itself uses for queries.
_ALLOWED_PREFIXES = ("docqa.", "haystack.", "haystack_integrations.components.embedders.sentence_transformers.")
ALLOWED_MODULES = [prefix + "*" for prefix in _ALLOWED_PREFIXES]
_STORE_PREFIX = "docqa.stores."
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_FILE_BYTES = 1_000_000


class StrategyFileError(ConfigurationError):
    """A strategy file that cannot be served; the message names the file (and the line for bad YAML)."""

    code = "invalid_strategy_file"


class FileStrategyOptions(StrategyOptions):
    """A YAML strategy takes no caller options: what it does is what its file says."""


def export_strategy(name: str, runtime: Runtime, **options: Any) -> str:
    """The strategy as Haystack YAML (`Pipeline.dumps()`).

    :raises ConfigurationError: the strategy is not (yet) a Haystack pipeline, or a component cannot be serialized.
    """
    strategy = build_pipeline(name, runtime, **options)
    if not isinstance(strategy, HaystackStrategy):
        raise ConfigurationError(f"pipeline {name!r} is not a Haystack pipeline yet and cannot be exported")
    try:
        return strategy.dumps()
    except Exception as exc:  # a component's to_dict can raise anything
        raise ConfigurationError(f"pipeline {name!r} cannot be serialized: {type(exc).__name__}: {exc}") from exc


def parse_strategy_yaml(text: str, source: str) -> dict[str, Any]:
    """The YAML as a pipeline dict, after the checks that need no deserialization.

    :raises StrategyFileError: malformed YAML (with its line), not a pipeline, a component type outside
        `docqa.*`/`haystack.*`, or a document store that is not docqa's.
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
        for where, value in _typed_dicts(component, str(name)):
            type_name = value["type"]
            if "." in type_name and not type_name.startswith(_ALLOWED_PREFIXES):
                raise StrategyFileError(
                    f"{source}: {where} has type {type_name!r}, which is not allow-listed "
                    f"({', '.join(p + '*' for p in _ALLOWED_PREFIXES)})"
                )
        for where, store in _stores(component, str(name)):
            store_type = store.get("type") if isinstance(store, dict) else None
            if not isinstance(store_type, str) or not store_type.startswith(_STORE_PREFIX):
                raise StrategyFileError(
                    f"{source}: {where} is {store_type!r}; only docqa's document stores are allowed"
                )
    return data


def load_strategy(text: str, *, name: str, source: str, runtime: Runtime | None = None) -> HaystackStrategy:
    """Deserialize and check a YAML strategy; with `runtime`, bind it to the deployment's store and models.

    :raises StrategyFileError: anything that keeps the file from being served, naming the file.
    """
    data = parse_strategy_yaml(text, source)
    try:
        pipeline = Pipeline.from_dict(data, allowed_modules=list(ALLOWED_MODULES))
    except DeserializationError as exc:
        raise StrategyFileError(f"{source}: {_one_line(exc)}") from None
    except Exception as exc:  # a component's from_dict/__init__ may raise anything
        problem = f"{type(exc).__name__}: {_one_line(exc)}"
        raise StrategyFileError(f"{source}: cannot build the pipeline: {problem}") from None
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
    settings = runtime.settings if runtime is not None else None
    models = {role: settings.endpoint_for(role).model if settings else None for role in sorted(roles)}
    try:
        return HaystackStrategy(name, pipeline, models=models,
                                max_question_chars=settings.max_question_chars if settings else 2000)
    except ConfigurationError as exc:
        raise StrategyFileError(f"{source}: {exc.message}") from None


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
                    load_strategy(_read(path), name=name, source=str(path))
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


def _typed_dicts(value: Any, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    if isinstance(value, dict):
        if isinstance(value.get("type"), str):
            yield where, value
        for key, item in value.items():
            yield from _typed_dicts(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _typed_dicts(item, f"{where}[{index}]")


def _stores(value: Any, where: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "document_store":
                yield f"{where}.document_store", item
            yield from _stores(item, f"{where}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _stores(item, f"{where}[{index}]")


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
