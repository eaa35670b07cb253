"""A `haystack.Pipeline` as a docqa strategy: the `QAPipeline` contract around any pipeline graph.

The contract between docqa and a strategy's graph:
- inputs: every open (unconnected) input socket named `question` or `query` receives the question; every
  `filters` socket receives the caller's access filters, built here from the scope (never from the request or
  the YAML); other open sockets may take the strategy's runtime inputs by name (e.g. `as_of`).
- access: a component that holds a document store must take those filters through an open `filters` socket,
  and no `filters` socket may be fed by another component (checked when the strategy is built).
- outputs: exactly one pipeline output named `answer`; optional `cited_documents` (the citations),
  `citations` (ready-made `Citation`s that, when produced, replace those of `cited_documents`) and
  `stop_reason`. A run that produces no answer (e.g. a blocked graph, which Haystack returns as `{}`) is an error.
- grounding: a `GroundingChecker` node (`grounding`, step kind `grounding`) is added between the answer and the
  result unless the graph has one (`docqa.pipelines.grounding`); its `answer`, `cited_documents`,
  `answer_source` and `answer_note` are the result's. An open `principals` socket receives the caller's principals.
- no readable passage: a strategy that reads only docqa's store first counts what the caller may read (a
  one-node graph); with nothing, it answers at once that no passage the caller may read matches, with
  `answer_source` "none" and no model call, and the count is the trace's one step (`readable_passages`, kind
  `access`). Otherwise the count is no step and no span: the trace and OpenTelemetry start at the graph.
- budget: a run the LLM call budget stops after model calls were made answers with what it gathered (the
  extracted sentences of its passages) and `stop_reason` `llm_budget`, never an error; refused before any call,
  it raises `LLMBudgetExceededError`.
- steps: one per step span, from docqa's Haystack tracer (`docqa.step_tracer`): each component run (the step
  kind is the strategy's mapping, else the component's `step_kind` attribute, else a guess from its class name)
  and each `docqa.<kind>` span the components open (tree nodes, summaries); model calls are spans added to their
  step. The budget stop and the extractive fallback are spans too, so OpenTelemetry sees every step.
- config: the pipeline's `to_dict()` plus the models by role; its hash is the config hash of every answer.

Usage:
    strategy = HaystackStrategy("standard", pipeline, models={"generator": "qwen"}, max_question_chars=2000)
    result = strategy.run("What is the hotel limit?", scope)
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping
from typing import Any

from haystack import Document, Pipeline, logging, tracing
from haystack.core.errors import PipelineRuntimeError
from haystack.core.serialization import component_to_dict, generate_qualified_class_name

from docqa.access import AccessScope, restrict
from docqa.components.grounding_checker import REASON_NO_PASSAGE, no_passage_answer
from docqa.components.template_cache import compiling_once
from docqa.errors import ConfigurationError
from docqa.extractive_fallback import LLM_BUDGET_STEP
from docqa.pipelines.base import (
    GroundingOutcome,
    citations_from_documents,
    finish,
    is_validated,
    validate_question,
)
from docqa.pipelines.grounding import (
    PRINCIPALS_SOCKET,
    ReadablePassages,
    attach_grounding,
    readable_store,
)
from docqa.recording import StepRecorder
from docqa.result import PipelineResult
from docqa.run_control import LLMBudgetExceededError, budget_error_behind
from docqa.spans import STEP_OUTPUT, step_span
from docqa.step_tracer import ensure_step_tracing, record_steps, untraced

QUESTION_SOCKETS = ("question", "query")
FILTERS_SOCKET = "filters"
ANSWER_OUTPUT = "answer"
CITATIONS_OUTPUT = "cited_documents"
# Optional: ready-made `docqa.result.Citation`s (e.g. one per record of a record table); when a run produces
# them (not None) they replace the citations built from `cited_documents`.
READY_CITATIONS_OUTPUT = "citations"
STOP_REASON_OUTPUT = "stop_reason"
STOP_LLM_BUDGET = "llm_budget"
RUN_SPAN = "docqa.strategy.run"
RUN_STRATEGY_TAG = "docqa.strategy"

_KIND_BY_SUFFIX = (
    ("Retriever", "retrieval"),
    ("Generator", "generation"),
    ("Embedder", "embedding"),
    ("Joiner", "fusion"),
    ("Ranker", "ranking"),
    ("Router", "routing"),
    ("Builder", "prompt"),
    ("Grader", "grading"),
    ("Summarizer", "summary"),
)


def step_kind_of(instance: Any) -> str:
    """The step kind of a component: its `step_kind` attribute, else a guess from its class name."""
    kind = getattr(instance, "step_kind", None)
    if isinstance(kind, str) and kind:
        return kind
    name = type(instance).__name__
    for suffix, guessed in _KIND_BY_SUFFIX:
        if name.endswith(suffix):
            return guessed
    return "component"


def holds_document_store(data: Any) -> bool:
    """True when a serialized component (or anything nested in its init parameters) has a `document_store`."""
    if isinstance(data, Mapping):
        return "document_store" in data or any(holds_document_store(v) for v in data.values())
    if isinstance(data, list | tuple):
        return any(holds_document_store(v) for v in data)
    return False


def safe_pipeline_dict(pipeline: Pipeline) -> dict[str, Any]:
    """`pipeline.to_dict()`, or, when a component cannot be serialized, the same shape with that component's
    type and the reason (so a run is still hashed and audited)."""
    try:
        return pipeline.to_dict()
    except Exception:  # any component's to_dict may fail; the config must still exist
        pass
    components: dict[str, Any] = {}
    for name, instance in pipeline.walk():
        try:
            components[name] = component_to_dict(instance, name)
        except Exception as exc:
            components[name] = {
                "type": generate_qualified_class_name(type(instance)),
                "init_parameters": {"unserializable": f"{type(exc).__name__}: {exc}"},
            }
    connections = [
        {"sender": f"{sender}.{data['from_socket'].name}", "receiver": f"{receiver}.{data['to_socket'].name}"}
        for sender, receiver, data in pipeline.graph.edges.data()
    ]
    return {"metadata": pipeline.metadata, "max_runs_per_component": pipeline._max_runs_per_component,
            "components": components, "connections": connections}


def check_access_wiring(pipeline: Pipeline, serialized: dict[str, Any] | None = None) -> None:
    """Refuse a graph where retrieval could run without the caller's access filters.

    :raises ConfigurationError: a component with a document store takes no `filters`, or a component's
        `filters` come from another component rather than from docqa.
    """
    serialized = serialized or safe_pipeline_dict(pipeline)
    for name, instance in pipeline.walk():
        sockets = instance.__haystack_input__._sockets_dict  # type: ignore[attr-defined]
        socket = sockets.get(FILTERS_SOCKET)
        if socket is not None and socket.senders:
            raise ConfigurationError(
                f"component {name!r} takes its filters from {', '.join(socket.senders)}; "
                "filters may only come from docqa (the caller's access scope)"
            )
        component_data = serialized.get("components", {}).get(name, {})
        if (holds_document_store(component_data) or hasattr(instance, "document_store")) and socket is None:
            raise ConfigurationError(
                f"component {name!r} reads a document store but takes no `filters` input, "
                "so docqa cannot apply the caller's access filters to it"
            )


logger = logging.getLogger(__name__)


def documents_of(outputs: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """Every Document among a run's outputs, in output order (a graph without a grounding node quotes these)."""
    return [doc for sockets in outputs.values() for value in sockets.values() if isinstance(value, list)
            for doc in value if isinstance(doc, Document)]


def retrieved_before(error: PipelineRuntimeError, grounding: str | None) -> list[Any]:
    """The passages that had reached the grounding node's `retrieved` input when the run failed, read from the
    pipeline's snapshot of its pending inputs (empty without a grounding node or a snapshot that holds them)."""
    snapshot = getattr(error, "pipeline_snapshot", None)
    if grounding is None or snapshot is None:
        return []
    # Only the Documents are read back (public `Document.from_dict`), never the other pending inputs (docqa's
    # state objects, which a snapshot may hold only in part).
    data = (snapshot.pipeline_state.inputs or {}).get("serialized_data") or {}
    entries = (data.get(grounding) or {}).get("retrieved") or []
    passages: list[Any] = []
    for entry in entries:
        for doc in (entry.get("value") or []) if isinstance(entry, dict) else []:
            try:
                passages.append(Document.from_dict(doc))
            except (TypeError, ValueError, AttributeError):
                logger.warning("a passage of a stopped run could not be read back from its snapshot")
    return passages


class HaystackStrategy:
    """Runs a `haystack.Pipeline` as a docqa strategy (see the module docstring for the contract).

    :param name: the strategy name (registry name, or the YAML file's stem).
    :param pipeline: the graph; checked here for its inputs, outputs and access wiring.
    :param models: model name per LLM role, recorded in the config.
    :param max_question_chars: questions longer than this are refused before any work.
    :param kinds: step kind per component name (overrides `step_kind_of`).
    :param summary: extra config entries (e.g. `top_k`) shown next to the pipeline's `to_dict()`.
    :param input_names: runtime inputs (beside question and filters) the strategy takes by socket name.
    :param grounding: whether to add the grounding node (off only for a strategy that generates nothing).
    :param require_passages: whether answers need passages (off for a model answering alone).
    :param grounding_inputs: grounding input -> "component.socket", where the defaults would be wrong.
    :raises ConfigurationError: the graph breaks the contract.
    """

    def __init__(
        self,
        name: str,
        pipeline: Pipeline,
        *,
        models: Mapping[str, str | None] | None = None,
        max_question_chars: int,
        kinds: Mapping[str, str] | None = None,
        summary: Mapping[str, Any] | None = None,
        input_names: tuple[str, ...] = (),
        grounding: bool = True,
        require_passages: bool = True,
        grounding_inputs: Mapping[str, str] | None = None,
    ) -> None:
        self.name = name
        self.pipeline = pipeline
        self.grounding = attach_grounding(pipeline, require_passages=require_passages,
                                          inputs=grounding_inputs) if grounding else None
        store = readable_store(pipeline) if require_passages else None
        self._readable = Pipeline()
        if store is not None:
            self._readable.add_component("readable_passages", ReadablePassages(store))
        self.models = dict(models or {})
        self.max_question_chars = max_question_chars
        self.input_names = input_names
        self.summary = dict(summary or {})
        self.kinds = {n: step_kind_of(c) for n, c in pipeline.walk()} | dict(kinds or {})
        for _, node in pipeline.walk():
            compiling_once(node)
        self._config: dict[str, Any] | None = None
        self._lock = threading.Lock()
        check_access_wiring(pipeline, self._pipeline_dict())
        self._plan_inputs()
        self._plan_outputs()

    # ---- contract checks ------------------------------------------------------------------------------------

    def _plan_inputs(self) -> None:
        self._question_sockets: list[tuple[str, str]] = []
        self._filter_sockets: list[tuple[str, str]] = []
        self._input_sockets: list[tuple[str, str]] = []
        self._principal_sockets: list[tuple[str, str]] = []
        missing = []
        for component_name, sockets in self.pipeline.inputs(include_components_with_connected_inputs=False).items():
            connected = self.pipeline.get_component(component_name).__haystack_input__._sockets_dict  # type: ignore
            for socket, spec in sockets.items():
                if connected[socket].senders:  # a variadic socket fed by other components
                    continue
                if socket in QUESTION_SOCKETS:
                    self._question_sockets.append((component_name, socket))
                elif socket == FILTERS_SOCKET:
                    self._filter_sockets.append((component_name, socket))
                elif socket == PRINCIPALS_SOCKET:
                    self._principal_sockets.append((component_name, socket))
                elif socket in self.input_names:
                    self._input_sockets.append((component_name, socket))
                elif spec.get("is_mandatory"):
                    missing.append(f"{component_name}.{socket}")
        if missing:
            raise ConfigurationError(
                f"pipeline {self.name!r} needs inputs docqa does not provide: {', '.join(sorted(missing))} "
                f"(docqa provides {', '.join((*QUESTION_SOCKETS, FILTERS_SOCKET, *self.input_names))})"
            )
        if not self._question_sockets:
            raise ConfigurationError(f"pipeline {self.name!r} has no open `question` or `query` input")

    def _plan_outputs(self) -> None:
        found: dict[str, list[str]] = {ANSWER_OUTPUT: [], CITATIONS_OUTPUT: [], READY_CITATIONS_OUTPUT: [],
                                       STOP_REASON_OUTPUT: []}
        for component_name, sockets in self.pipeline.outputs().items():
            for socket in sockets:
                if socket in found:
                    found[socket].append(component_name)
        for socket, owners in found.items():
            if len(owners) > 1:
                raise ConfigurationError(
                    f"pipeline {self.name!r} has several `{socket}` outputs ({', '.join(sorted(owners))}); "
                    "connect all but one"
                )
        if not found[ANSWER_OUTPUT]:
            raise ConfigurationError(f"pipeline {self.name!r} has no unconnected `{ANSWER_OUTPUT}` output")
        self._outputs = {socket: owners[0] for socket, owners in found.items() if owners}

    # ---- QAPipeline -----------------------------------------------------------------------------------------

    def _pipeline_dict(self) -> dict[str, Any]:
        return safe_pipeline_dict(self.pipeline)

    def config(self) -> dict[str, Any]:
        """The pipeline's `to_dict()`, the models by role and the summary; computed once (a shallow copy: treat
        nested values as read-only)."""
        with self._lock:
            if self._config is None:
                self._config = copy.deepcopy({**self._pipeline_dict(), **self.summary, "pipeline": self.name,
                                              "models": dict(self.models)})
            return dict(self._config)

    def pipeline_data(self, question: str, filters: dict[str, Any], inputs: Mapping[str, Any],
                      principals: list[str] | None = None) -> dict[str, Any]:
        """The `Pipeline.run` data: the question, the access filters, the caller's principals and the runtime
        inputs, per socket."""
        unknown = sorted(set(inputs) - set(self.input_names))
        if unknown:
            raise ConfigurationError(f"pipeline {self.name!r} does not take {', '.join(unknown)}")
        data: dict[str, dict[str, Any]] = {}
        for component_name, socket in self._question_sockets:
            data.setdefault(component_name, {})[socket] = question
        for component_name, socket in self._filter_sockets:
            data.setdefault(component_name, {})[socket] = filters
        for component_name, socket in self._principal_sockets:
            data.setdefault(component_name, {})[socket] = list(principals or [])
        for component_name, socket in self._input_sockets:
            if inputs.get(socket) is not None:
                data.setdefault(component_name, {})[socket] = inputs[socket]
        return data

    def run(self, question: str, scope: AccessScope, filters: dict[str, Any] | None = None,
            **inputs: Any) -> PipelineResult:
        if not is_validated(question, self.max_question_chars):  # a direct caller, not the question service
            question = validate_question(question, self.max_question_chars)
        question = str(question)
        access_filters = restrict(scope, filters)
        data = self.pipeline_data(question, access_filters, inputs, scope.effective_principals)
        ensure_step_tracing()
        # One trace per run: the graph's spans and those of the steps around it (budget stop, fallback).
        with tracing.tracer.trace(RUN_SPAN, tags={RUN_STRATEGY_TAG: self.name}):
            return self._run(question, scope, access_filters, data)

    def _run(self, question: str, scope: AccessScope, access_filters: dict[str, Any],
             data: dict[str, Any]) -> PipelineResult:
        recorder = StepRecorder()
        out_of_budget: LLMBudgetExceededError | None = None
        gathered: list[Any] = []
        if self._readable.graph.nodes:
            with untraced():
                readable = self._readable.run({"readable_passages": {"filters": access_filters}})
            if not readable["readable_passages"]["readable"]:
                # The count is the trace of an answer without passages; otherwise the trace starts at the graph.
                with record_steps(recorder), step_span("access", "readable_passages",
                                                       inputs={"filters": access_filters}) as span:
                    span.set_content_tag(STEP_OUTPUT, {"readable": False})
                return self._answer_without_passages(question, scope, recorder)
        with record_steps(recorder, self.kinds):
            try:
                outputs = self.pipeline.run(data)
            except PipelineRuntimeError as exc:
                out_of_budget = budget_error_behind(exc)
                if out_of_budget is None or not recorder.totals().llm_calls:
                    # The component's own error (LLM unavailable, run stopped, a budget that refused the very
                    # first call, so nothing was gathered) is what callers handle.
                    if exc.__cause__ is not None:
                        raise exc.__cause__ from None
                    raise
                gathered = retrieved_before(exc, self.grounding)
        if out_of_budget is not None:
            return self._answer_out_of_budget(question, recorder, out_of_budget, gathered)
        answer_of = self._outputs[ANSWER_OUTPUT]
        if ANSWER_OUTPUT not in outputs.get(answer_of, {}):
            raise ConfigurationError(
                f"pipeline {self.name!r} produced no answer (the graph may be blocked); outputs: "
                f"{', '.join(sorted(outputs)) or 'none'}"
            )
        answer = outputs[answer_of][ANSWER_OUTPUT]
        cited = outputs.get(self._outputs.get(CITATIONS_OUTPUT, ""), {}).get(CITATIONS_OUTPUT) or []
        ready = outputs.get(self._outputs.get(READY_CITATIONS_OUTPUT, ""), {}).get(READY_CITATIONS_OUTPUT)
        stop_reason = outputs.get(self._outputs.get(STOP_REASON_OUTPUT, ""), {}).get(STOP_REASON_OUTPUT)
        citations = list(ready) if isinstance(ready, list) else citations_from_documents(cited)
        checked = outputs.get(self.grounding or "", {})
        outcome = GroundingOutcome(checked["answer_source"], checked.get("answer_note"), checked.get("reason")) \
            if "answer_source" in checked else None
        return finish(self, question, answer if isinstance(answer, str) else str(answer),
                      citations, recorder, stop_reason=stop_reason or None, grounding=outcome,
                      passages=documents_of(outputs))

    def _answer_without_passages(self, question: str, scope: AccessScope, recorder: StepRecorder) -> PipelineResult:
        """Nothing the caller may read: say so at once, naming who asked and nothing of other documents."""
        text = no_passage_answer(scope.effective_principals)
        return finish(self, question, text, [], recorder, stop_reason=REASON_NO_PASSAGE,
                      grounding=GroundingOutcome("none", text, REASON_NO_PASSAGE))

    def _answer_out_of_budget(self, question: str, recorder: StepRecorder, error: LLMBudgetExceededError,
                              gathered: list[Any]) -> PipelineResult:
        """The run's answer when the LLM call budget stopped it after model calls were made: what it gathered.

        The graph raised mid-run, so its outputs are lost; the passages it retrieved are not (`gathered`, the
        grounding node's pending inputs: `finish` quotes their best-matching sentences, labelled extracted).
        Never an error after calls the caller pays for.
        """
        with record_steps(recorder), step_span("control", LLM_BUDGET_STEP,
                                               inputs={"llm_calls": recorder.totals().llm_calls}) as span:
            span.set_content_tag(STEP_OUTPUT, {"stop_reason": STOP_LLM_BUDGET, "reason": error.message})
        return finish(self, question, "", [], recorder, stop_reason=STOP_LLM_BUDGET, passages=gathered)

    def dumps(self) -> str:
        """The strategy as Haystack YAML (`Pipeline.dumps()`)."""
        return self.pipeline.dumps()
