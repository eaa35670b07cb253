"""AT-RAG end to end with the real local LLM on one Synthea patient: topic model fitted, time-scoped question
resolved, bounded grade/rewrite loop, every step recorded.

The packaged 270M model answers badly; these tests check termination, structure and scoping only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import AccessScope
from docqa.pipelines import atrag
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.topics import refit_topic_model

pytestmark = pytest.mark.integration

BUNDLE = (Path(__file__).resolve().parents[3] / "shared" / "data" / "records" / "synthea_fhir_r4"
          / "Dannie_Schmitt_22d6efc6-2dc7-4f36-9d27-84fc6609c469.json")
TENANT = "atrag-e2e"
MAX_ITERATIONS = 2
AS_OF = "2019-06-01T00:00:00Z"
# Small prompts keep each call of the CPU model short on a busy machine.
SMALL_PROMPTS = {"max_prompt_documents": 4, "max_document_chars": 200}
STOP_REASONS = set(atrag.StopReason)


@pytest.fixture(scope="module")
def patient_runtime(local_llm_settings: Settings) -> tuple[Runtime, str, list]:
    if not BUNDLE.is_file():
        pytest.skip(f"shared Synthea data not found at {BUNDLE}")
    from docqa.ingestion.records import parse_fhir_bundle

    documents = parse_fhir_bundle(BUNDLE, tenant=TENANT, access=["clinicians"])
    runtime = Runtime(local_llm_settings)
    embedder = runtime.document_embedder()
    embedder.warm_up()
    runtime.document_store.write_documents(embedder.run(documents=documents)["documents"],
                                           policy=DuplicatePolicy.OVERWRITE)
    info = refit_topic_model(runtime, TENANT)
    assert info.mode == "supervised" and info.n_topics >= 2
    return runtime, documents[0].meta["patient_id"], documents


def _check_run(result, scope: AccessScope) -> list:
    assert result.stop_reason in STOP_REASONS
    # The work of the graph's own nodes, in order (the routing between them and the steps inside a node aside).
    kinds = [s.kind for s in result.steps if s.parent is None and s.kind not in ("control", "routing")]
    assert kinds[:4] == ["time_scope", "retrieval", "reasoning", "grading"]
    retrievals = [s for s in result.steps if s.kind == "retrieval"]
    assert 1 <= len(retrievals) <= MAX_ITERATIONS
    for step in retrievals:
        assert all(c in step.inputs["filters"]["conditions"] for c in scope.to_filters()["conditions"])
        assert step.outputs["topic"]["mode"] in {"topic_filter", "fallback_uncertain_topic",
                                                 "fallback_too_few_results"}
    assert result.totals.llm_calls == sum(len(s.outputs.get("llm_calls", [])) for s in result.steps) > 0
    assert isinstance(result.answer, str)
    json.dumps(result.to_dict())
    return retrievals


def test_time_scoped_question_stays_in_the_window(patient_runtime: tuple[Runtime, str, list]) -> None:
    runtime, patient, documents = patient_runtime
    scope = AccessScope(TENANT, frozenset({"clinicians"}))
    pipeline = build_pipeline("atrag", runtime, max_iterations=MAX_ITERATIONS, **SMALL_PROMPTS)
    result = pipeline.run("What happened to the patient in the last two years?", scope, as_of=AS_OF,
                          patient_id=patient)
    retrievals = _check_run(result, scope)
    in_window = {d.id for d in documents if "2017-06-01T00:00:00Z" <= d.meta["effective_start_utc"] <= AS_OF}
    assert in_window
    for step in retrievals:
        assert {d["id"] for d in step.outputs["documents"]} <= in_window
    assert result.steps[0].outputs["scope"]["kind"] == "relative"


def test_unscoped_question_and_other_principals(patient_runtime: tuple[Runtime, str, list]) -> None:
    runtime, _, _ = patient_runtime
    pipeline = build_pipeline("atrag", runtime, max_iterations=MAX_ITERATIONS, **SMALL_PROMPTS)
    scope = AccessScope(TENANT, frozenset({"clinicians"}))
    _check_run(pipeline.run("Which vaccines has the patient received?", scope), scope)
    outsider = AccessScope(TENANT, frozenset({"billing"}))
    result = pipeline.run("Which vaccines has the patient received?", outsider)
    assert all(not s.outputs["documents"] for s in result.steps if s.kind == "retrieval")
