"""ConTReGen end to end with the real local LLM on an ODSum-Story query: bounded, tree-shaped, fully traced.

The packaged 270M model writes poor summaries; this checks termination, the budget, access filters in every
branch, the tree's parent links and the audit trace, not answer quality.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import AccessScope
from docqa.pipelines import contregen
from docqa.pipelines.registry import build_pipeline
from docqa.runtime import Runtime
from docqa.settings import Settings

pytestmark = pytest.mark.integration

ODSUM = Path(__file__).resolve().parents[3] / "shared" / "data" / "longform" / "odsum_story"
TENANT = "contregen-e2e"
STORIES = 3
BUDGET = 8


@pytest.fixture(scope="module")
def sample() -> tuple[str, str, list[Document]]:
    """One query, its gold story's title, and the chunks of that story and two others."""
    if not (ODSUM / "queries.jsonl").is_file():
        pytest.skip(f"ODSum-Story data not found under {ODSUM}")
    stories = {}
    for split in ("test", "dev", "train"):
        for line in (ODSUM / f"{split}.jsonl").read_text(encoding="utf-8").splitlines():
            story = json.loads(line)
            stories[story["title"].strip()] = story["divided_document"]
    queries = json.loads((ODSUM / "queries.jsonl").read_text(encoding="utf-8").splitlines()[0])
    query = queries[0]
    gold = query["title"].strip()
    titles = [gold, *[t for t in stories if t != gold][: STORIES - 1]]
    documents = [
        Document(id=f"{title}#{i}", content=" ".join(chunk.split()),
                 meta={"title": title, "tenant": TENANT, "access": ["everyone"], "source": title})
        for title in titles for i, chunk in enumerate(stories[title])
    ]
    return query["question_text"], gold, documents


@pytest.fixture(scope="module")
def runtime(local_llm_settings: Settings, sample: tuple[str, str, list[Document]]) -> Runtime:
    # Short passages in prompts keep each call affordable on a shared CPU and inside the model's context.
    runtime = Runtime(local_llm_settings.model_copy(update={"max_document_chars": 500}))
    embedder = runtime.document_embedder()
    embedder.warm_up()
    runtime.document_store.write_documents(embedder.run(documents=sample[2])["documents"],
                                           policy=DuplicatePolicy.OVERWRITE)
    return runtime


def test_a_long_form_query_builds_a_bounded_tree_and_a_cited_answer(runtime: Runtime, sample) -> None:
    from docqa.audit.recorder import TraceRecord, audit_session, models_from_settings, record_answer
    from docqa.server.trace_queries import read_trace

    question, gold, documents = sample
    known = {d.id for d in documents}
    scope = AccessScope(TENANT, frozenset({"tester"}))
    pipeline = build_pipeline("contregen", runtime, top_k=2, max_depth=1, max_breadth=2, max_llm_calls=BUDGET,
                              summary_tokens=64, answer_tokens=128)

    result = pipeline.run(question, scope)

    assert result.stop_reason in {contregen.STOP_TREE_COMPLETE, contregen.STOP_LLM_BUDGET}
    assert 1 <= result.totals.llm_calls <= BUDGET
    assert result.totals.llm_calls == sum(len(s.outputs.get("llm_calls", [])) for s in result.steps)
    nodes = [s for s in result.steps if s.kind == "tree_node"]
    root = next(s for s in nodes if s.name == "contre_node 0")
    assert root.inputs["filters"] == scope.to_filters()
    assert all(s.inputs["filters"] == scope.to_filters() for s in nodes if "query" in s.inputs)
    by_index = {s.index: s for s in result.steps}
    assert all(by_index[s.parent].kind in {"tree_node", "tree_expansion"} for s in nodes)
    tree = next(s for s in result.steps if s.name == "contregen_synthesizer").outputs["tree"]
    assert {p["id"] for p in tree["passages"]} <= known
    assert any(p["id"].startswith(f"{gold}#") for p in tree["passages"])
    assert isinstance(result.answer, str) and result.answer
    assert {c.document_id for c in result.citations} <= known
    json.dumps(result.to_dict())

    trace_id = record_answer(runtime.settings, TraceRecord(asked_by="tester", tenant=TENANT, question=question,
                                                           pipeline="contregen",
                                                           models=models_from_settings(runtime.settings),
                                                           result=result))
    with audit_session(runtime.settings) as session:
        trace = read_trace(session, TENANT, trace_id)
    assert trace is not None and trace["stop_reason"] == result.stop_reason
    assert [(s["kind"], s["name"], s["parent"]) for s in trace["steps"]] == [
        (s.kind, s.name, s.parent) for s in result.steps]
