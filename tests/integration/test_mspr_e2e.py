"""MSPR end to end with the real local LLM on one MuSiQue question split over two collections: bounded, traced.

The main collection holds the question's first supporting passage and distractors, the archive the other
supporting passages. The packaged 270M model answers badly; these tests check termination, bounds, sources,
access filters and the audit trail only.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import AccessScope
from docqa.components.mspr_controller import StopReason
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings

pytestmark = pytest.mark.integration

SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
TENANT = "mspr-e2e"
SOURCES = ("collection:main", "collection:archive")
MAX_STEPS = 3
MAX_REVIEWS = 1


@pytest.fixture(scope="module")
def sample() -> tuple[list, dict[str, list]]:
    if not (SHARED_DATA / "multihop" / "musique_train.json").is_file():
        pytest.skip(f"shared multi-hop data not found under {SHARED_DATA}")
    try:
        from docqa_eval.datasets import load_corpus, load_questions
    except ImportError:  # before the evaluation helpers moved out of the package
        from docqa.datasets import load_corpus, load_questions  # type: ignore[no-redef]

    questions = load_questions("musique", SHARED_DATA)[:1]
    corpus = load_corpus("musique", tenant=TENANT, access=["everyone"], data_dir=SHARED_DATA)
    supporting = list(questions[0].supporting_ids)
    by_id = {d.id: d for d in corpus}
    distractors = [d for d in corpus if d.id not in supporting][:30]

    def tagged(docs: list, collection: str) -> list:
        return [dataclasses.replace(d, meta={**d.meta, "collection": collection}) for d in docs]

    split = {"main": tagged([by_id[supporting[0]], *distractors], "main"),
             "archive": tagged([by_id[i] for i in supporting[1:]], "archive")}
    return questions, split


@pytest.fixture(scope="module")
def runtime(local_llm_settings: Settings, sample: tuple[list, dict[str, list]]) -> Runtime:
    settings = local_llm_settings.model_copy(update={"mspr_sources": ",".join(SOURCES)})
    runtime = Runtime(settings)
    embedder = runtime.document_embedder()
    embedder.warm_up()
    documents = [d for docs in sample[1].values() for d in docs]
    runtime.document_store.write_documents(embedder.run(documents=documents)["documents"],
                                           policy=DuplicatePolicy.OVERWRITE)
    return runtime


def test_terminates_within_the_bounds_and_writes_every_step(runtime: Runtime, sample) -> None:
    from docqa.audit.recorder import TraceRecord, audit_session, models_from_settings, record_answer
    from docqa.server.trace_queries import read_trace

    questions, split = sample
    ids_of = {f"collection:{name}": {d.id for d in docs} for name, docs in split.items()}
    pipeline = build_pipeline("mspr", runtime, max_steps=MAX_STEPS, max_reviews=MAX_REVIEWS, top_k=3)
    scope = AccessScope(TENANT, frozenset({"tester"}))

    for question in questions:
        result = pipeline.run(question.question, scope)

        assert result.stop_reason in set(StopReason)
        retrievals = [s for s in result.steps if s.kind == "retrieval"]
        assert len(retrievals) <= MAX_STEPS - 1 + MAX_REVIEWS
        for step in retrievals:
            assert step.inputs["filters"] == scope.to_filters()
            assert step.outputs["source"] in SOURCES
            # Every passage comes from the collection the step names.
            assert {d["id"] for d in step.outputs["documents"]} <= ids_of[step.outputs["source"]]
        agent_steps = [s for s in result.steps if s.name == "agent"]
        assert 1 <= len(agent_steps) <= (MAX_STEPS + MAX_REVIEWS) * 2
        # Schema-constrained output always parses: every step is JSON naming one of the actions it was offered
        # (its query may still be unusable, and then the question is searched).
        for decision in (s.outputs["decision"] for s in agent_steps):
            assert decision["action"] in decision["offered_actions"], decision
        assert agent_steps[0].outputs["decision"]["offered_actions"] == ["search_primary"]
        assert retrievals and retrievals[0].outputs["source"] == SOURCES[0]
        assert result.totals.llm_calls == sum(len(s.outputs.get("llm_calls", [])) for s in result.steps) > 0
        assert isinstance(result.answer, str)
        json.dumps(result.to_dict())

        trace_id = record_answer(runtime.settings, TraceRecord(asked_by="tester", tenant=TENANT,
                                                               question=question.question, pipeline="mspr",
                                                               models=models_from_settings(runtime.settings),
                                                               result=result))
        with audit_session(runtime.settings) as session:
            trace = read_trace(session, TENANT, trace_id)
        assert trace is not None
        assert trace["stop_reason"] == result.stop_reason
        assert [(s["kind"], s["name"]) for s in trace["steps"]] == [(s.kind, s.name) for s in result.steps]
