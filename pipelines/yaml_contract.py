"""What a YAML strategy may hold, checked on the parsed file before anything in it is built.

A file strategy keeps docqa's promises only if it cannot bring its own way out of them. So a file is refused,
naming its line, when it holds:
- an LLM client other than `RoleChatGenerator`: every model call goes through the deployment's role client
  (budget, timeout, token caps, scrubbing, audit), never through a Haystack generator pointed anywhere; a prompted
  step is written as `ChatPromptBuilder` -> `docqa.components.llm_generation.ConstrainedGeneration` (holding the
  role generator; it applies the run's LLM budget and token cap) -> a `docqa.components.reply_parsers` parser;
- a fetcher, a web search or a page reader, Haystack's or docqa's: their endpoint and private-address guard
  would be the file's (web sources are the built-in `mspr` strategy's, configured by DOCQA_MSPR_SOURCES);
- an embedder other than the local sentence-transformers/ONNX ones, which are replaced by the deployment's;
- a `Secret` (`{type: env_var}` or `{type: token}`) anywhere: a file names roles, never credentials;
- a Haystack type outside the packages a strategy graph needs (`HAYSTACK_PACKAGES`).
Parts bound to the deployment are resolved at load whatever the file says (the document store, the embedders,
the data directory), and `portable` writes them without parameters, so an export carries no local path.
`refuse_own_clients` checks the built pipeline too, for a client a component builds by default.

Usage:
    check_contract(data, text, "my_rag.yaml")     # StrategyFileError naming file, line and reason
    bind_to_deployment(data, settings, "my_rag.yaml", lambda: runtime.document_store)  # before from_dict
    refuse_own_clients(pipeline, "my_rag.yaml")   # after it
    yaml_text = marshal(portable(pipeline.to_dict()))
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from functools import cache
from typing import Any

import yaml
from haystack import Pipeline
from haystack.core.serialization import generate_qualified_class_name

from docqa.errors import ConfigurationError

ROLE_GENERATOR = "docqa.llm.role_generator.RoleChatGenerator"
ALLOWED_PREFIXES = ("docqa.", "haystack.", "haystack_integrations.components.embedders.sentence_transformers.")
STORE_PREFIX = "docqa.stores."
# The Haystack packages a strategy graph needs: prompts, joins, routing, ranking, retrieval (from docqa's store,
# with docqa's filters), splitting, validation. Generators, fetchers, embedders, converters reading files,
# writers, agents (whose tools run code) and evaluators are not among them.
HAYSTACK_PACKAGES = (*(f"haystack.components.{name}." for name in (
    "builders", "joiners", "routers", "rankers", "retrievers", "preprocessors", "samplers", "validators",
    "query", "extractors.llm_metadata_extractor", "extractors.regex_text_extractor",
    "converters.output_adapter")), "haystack.dataclasses.")
_SENTENCE_TRANSFORMERS = ALLOWED_PREFIXES[2]
# Query and document embedders: whatever the file says, the deployment's own (its model, backend and cache).
QUERY_EMBEDDERS = {"docqa.embedding.OnnxTextEmbedder", "SentenceTransformersTextEmbedder"}
DOCUMENT_EMBEDDERS = {"docqa.embedding.OnnxDocumentEmbedder", "SentenceTransformersDocumentEmbedder"}
_WEB = {
    "docqa.components.searxng_web_search.SearxngWebSearch",
    "docqa.components.haystack_web_search.HaystackWebSearch",
    "docqa.components.web_page_reader.WebPageReader",
}
# Init parameters that are the deployment's data directory.
_DATA_DIR_PARAMS = {"docqa.components.topic_assigner.TenantTopicAssigners": "data_dir"}
_SECRET_TYPES = ("env_var", "token")

_LLM = ("an LLM client: a YAML strategy calls models only through docqa.llm.role_generator.RoleChatGenerator "
        "(an LLM role of the deployment, with its budget, timeout and audit)")
_WEB_ACCESS = ("web access: a YAML strategy may not fetch URLs or search the web (web sources are the built-in "
               "`mspr` strategy's, configured by DOCQA_MSPR_SOURCES)")


class StrategyFileError(ConfigurationError):
    """A strategy file that cannot be served; the message names the file (and the line)."""

    code = "invalid_strategy_file"


def check_contract(data: dict[str, Any], text: str, source: str,
                   allowed: tuple[str, ...] = ALLOWED_PREFIXES) -> None:
    """Refuse a parsed pipeline dict that breaks the contract (see the module docstring).

    :param text: the file's YAML, to name the offending line.
    :param allowed: the module prefixes a type may come from.
    :raises StrategyFileError: the first breach, as `FILE: line N: WHERE ...: REASON`.
    """
    lines = _LineFinder(text)
    for name, component in data["components"].items():
        for path, value in _typed_dicts(component, ("components", name)):
            kind = value["type"]
            where = _where(path)
            if kind in _SECRET_TYPES:
                raise StrategyFileError(
                    f"{source}: line {lines.line(path)}: {where} is a Secret ({kind}): a YAML strategy names LLM "
                    "roles, never credentials"
                )
            reason = refusal(kind, allowed)
            if reason is not None:
                raise StrategyFileError(f"{source}: line {lines.line(path)}: {where} has type {kind!r}, {reason}")
        for path, store in _stores(component, ("components", name)):
            store_type = store.get("type") if isinstance(store, dict) else None
            if not isinstance(store_type, str) or not store_type.startswith(STORE_PREFIX):
                raise StrategyFileError(
                    f"{source}: line {lines.line(path)}: {_where(path)} is {store_type!r}; only docqa's document "
                    "stores are allowed"
                )


def refusal(kind: str, allowed: tuple[str, ...] = ALLOWED_PREFIXES) -> str | None:
    """Why a serialized type may not be in a YAML strategy, or None when it may."""
    if "." not in kind:  # not a class: ComponentDevice's `single`, a Secret (checked apart), ...
        return None
    module, _, name = kind.rpartition(".")
    if not kind.startswith(allowed):
        return f"which is not allow-listed ({', '.join(p + '*' for p in allowed)})"
    if kind == ROLE_GENERATOR:
        return None
    if module.startswith("docqa.llm") or (name.endswith("Generator") and not module.startswith("docqa.components.")):
        return _LLM
    if kind in _WEB or ".fetchers" in module or ".websearch" in module or name.endswith(("Fetcher", "WebSearch")):
        return _WEB_ACCESS
    if name.endswith("Embedder") and module.startswith("haystack") and embedder_kind(kind) is None:
        return ("an embedder other than the deployment's (remote embedders are not allowed; local "
                "sentence-transformers and ONNX embedders are replaced by the deployment's)")
    if kind == "docqa.components.topic_assigner.TopicAssigner":
        return "which reads a model directory the file names (use TenantTopicAssigners: the deployment's models)"
    if module.startswith("haystack.") and not kind.startswith(HAYSTACK_PACKAGES) and not kind.startswith(
            "haystack.document_stores."):  # stores are checked apart, with their own message
        return ("which is not among the Haystack components a YAML strategy may use "
                f"({', '.join(p + '*' for p in HAYSTACK_PACKAGES)})")
    if kind.startswith(_SENTENCE_TRANSFORMERS) and embedder_kind(kind) is None:
        return "which is not one of the sentence-transformers embedders docqa uses"
    return None


def bind_to_deployment(data: dict[str, Any], settings: Any, source: str, store: Callable[[], Any]) -> None:
    """Replace, in place, what the file says about deployment-bound parts by the deployment's own: every store's
    parameters by those of `store()` (called when the file has a store), every embedder by the deployment's, every
    data directory by `settings.data_dir`.

    :raises StrategyFileError: the file's store is not of the deployment's kind.
    """
    embedders: dict[str, Callable[[], dict[str, Any]]] = {
        "query": cache(lambda: _text_embedder_dict(settings)),
        "document": cache(lambda: _document_embedder_dict(settings)),
    }
    for name, component in data["components"].items():
        # Listed first: replacing a dict while walking it would change what the walk iterates over.
        for path, value in list(_typed_dicts(component, ("components", name))):
            kind = value["type"]
            if path[-1] == "document_store":
                deployed = generate_qualified_class_name(type(store()))
                if kind != deployed:
                    raise StrategyFileError(f"{source}: {_where(path)} is {kind!r}, not the deployment's store "
                                            f"({deployed})")
                value["init_parameters"] = copy.deepcopy(store().to_dict()["init_parameters"])
            elif embedder_kind(kind) is not None:
                value.clear()
                value.update(copy.deepcopy(embedders[embedder_kind(kind)]()))  # type: ignore[index]
            elif kind in _DATA_DIR_PARAMS:
                value.setdefault("init_parameters", {})[_DATA_DIR_PARAMS[kind]] = str(settings.data_dir)


def portable(data: dict[str, Any]) -> dict[str, Any]:
    """A pipeline dict without its deployment-bound parameters (store, embedders, data directory): what an
    export writes, and what `bind_to_deployment` fills in again at load."""
    data = copy.deepcopy(data)
    for name, component in data.get("components", {}).items():
        for path, value in list(_typed_dicts(component, ("components", name))):
            kind = value["type"]
            if path[-1] == "document_store" or embedder_kind(kind) is not None:
                value["init_parameters"] = {}
            elif kind in _DATA_DIR_PARAMS:
                value.get("init_parameters", {}).pop(_DATA_DIR_PARAMS[kind], None)
    return data


def refuse_own_clients(pipeline: Pipeline, source: str) -> None:
    """Refuse a built pipeline holding an LLM client that is not a role's, e.g. one a Haystack component builds
    by default when the file gives it none (QueryExpander, LLMRanker). Nothing has been called yet.

    :raises StrategyFileError: naming the component.
    """
    seen: set[int] = set()

    def walk(owner: Any, where: str, depth: int) -> None:
        if id(owner) in seen or depth > 6:
            return
        seen.add(id(owner))
        for attribute, value in list(getattr(owner, "__dict__", {}).items()):
            if attribute.startswith("__") or not (hasattr(value, "__haystack_input__") or hasattr(value, "to_dict")):
                continue
            kind = generate_qualified_class_name(type(value))
            if kind != ROLE_GENERATOR and refusal(kind) == _LLM:
                raise StrategyFileError(f"{source}: {where}.{attribute} builds its own LLM client ({kind}); "
                                        f"{_LLM}")
            walk(value, f"{where}.{attribute}", depth + 1)

    for name, instance in pipeline.walk():
        walk(instance, name, 0)


def marshal(data: dict[str, Any]) -> str:
    """The pipeline dict as YAML, as `Pipeline.dumps()` writes it."""
    from haystack.marshal import YamlMarshaller

    return YamlMarshaller().marshal(data)


def embedder_kind(kind: str) -> str | None:
    """`query` or `document` for the embedder types that stand for the deployment's embedders, else None."""
    name = kind.rpartition(".")[2] if kind.startswith(_SENTENCE_TRANSFORMERS) else kind
    if name in QUERY_EMBEDDERS:
        return "query"
    if name in DOCUMENT_EMBEDDERS:
        return "document"
    return None


def _text_embedder_dict(settings: Any) -> dict[str, Any]:
    from docqa.embedding import build_text_embedder

    return build_text_embedder(settings).to_dict()


def _document_embedder_dict(settings: Any) -> dict[str, Any]:
    from docqa.embedding import build_document_embedder

    return build_document_embedder(settings).to_dict()


Path = tuple[Any, ...]


def _typed_dicts(value: Any, path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every dict with a string `type` (a component, a nested one, a Secret) and its path from the file's root."""
    if isinstance(value, dict):
        if isinstance(value.get("type"), str):
            yield path, value
        for key, item in value.items():
            yield from _typed_dicts(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _typed_dicts(item, (*path, index))


def _stores(value: Any, path: Path) -> Iterator[tuple[Path, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "document_store":
                yield (*path, key), item
            yield from _stores(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _stores(item, (*path, index))


def _where(path: Path) -> str:
    """`answerer.init_parameters.chat_generator` for ("components", "answerer", "init_parameters", ...)."""
    where = str(path[1])
    for key in path[2:]:
        where += f"[{key}]" if isinstance(key, int) else f".{key}"
    return where


class _LineFinder:
    """Lines of a YAML text by path, from its node tree (composed once, only when a line is asked for)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._root: yaml.Node | None = None

    def line(self, path: Path) -> int | str:
        if self._root is None:
            self._root = yaml.compose(self.text, Loader=yaml.SafeLoader)
        node = self._root
        for key in path:
            node = _child(node, key)
            if node is None:
                return "?"
        # A mapping's line is its `type:` line, where the offending type (or Secret kind) is written.
        typed = _child(node, "type")
        return (typed or node).start_mark.line + 1


def _child(node: Any, key: Any) -> Any:
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and key_node.value == str(key):
                return value_node
    elif isinstance(node, yaml.SequenceNode) and isinstance(key, int) and key < len(node.value):
        return node.value[key]
    return None
