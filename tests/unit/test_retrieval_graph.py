"""What runs is a node: AT-RAG's mode router and retrievers, MSPR's source router, and their typed state."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from haystack import Document, Pipeline, component
from haystack.components.routers import ConditionalRouter
from haystack.core.errors import PipelineRuntimeError

from docqa.components.atrag_controller import ATRAGRound, RetrievalMode, StopReason
from docqa.components.atrag_retriever import MODE_ROUTES, RecordRound, RoundQuery
from docqa.components.mspr_state import MSPRState, Phase, SourceSwitch, SourceVerdict
from docqa.components.multi_source_retriever import CollectionScope, MultiSourceRetriever
from docqa.components.record_query_resolver import RecordQuery, RecordQueryResolver
from docqa.components.time_scope_resolver import TimeScope, TimeScopeResolver, resolve_time_scope
from docqa.components.topic_filtered_retriever import TopicMode

ACCESS = {"field": "meta.tenant", "operator": "==", "value": "t"}


@component
class FixedRetriever:
    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self.calls: list[dict[str, Any]] = []

    @component.output_types(documents=list[Document])
    def run(self, query: str, filters: dict[str, Any] | None = None, top_k: int | None = None) -> dict[str, Any]:
        self.calls.append({"query": query, "filters": filters, "top_k": top_k})
        return {"documents": self.documents[: top_k or 5]}


class TestATRAGModeRouter:
    def _route(self, mode: RetrievalMode) -> dict[str, Any]:
        pipeline = Pipeline()
        pipeline.add_component("round_query", RoundQuery())
        pipeline.add_component("mode_router", ConditionalRouter(MODE_ROUTES))
        for name in ("state", "query", "scope_filters", "record_query", "scope", "record_offset", "mode"):
            pipeline.connect(f"round_query.{name}", f"mode_router.{name}")
        state = ATRAGRound(queries=("q",), mode=mode, filters={"field": "meta.patient_id", "operator": "==",
                                                                "value": "p1"})
        return pipeline.run({"round_query": {"state": state, "query": "rewritten", "record_offset": 4}})["mode_router"]

    def test_each_mode_reaches_only_its_retriever_with_the_rewritten_query(self) -> None:
        exact = self._route(RetrievalMode.EXACT)
        assert set(exact) == {"exact_state", "exact_query", "exact_scope_filters", "exact_record_query",
                              "exact_scope", "exact_record_offset"}
        assert exact["exact_query"] == "rewritten" and exact["exact_record_offset"] == 4
        assert exact["exact_state"].queries == ("q", "rewritten")
        assert isinstance(exact["exact_record_query"], RecordQuery) and isinstance(exact["exact_scope"], TimeScope)
        window = self._route(RetrievalMode.WINDOW)
        assert set(window) == {"window_state", "window_query", "window_scope_filters"}
        assert window["window_scope_filters"]["value"] == "p1"
        assert set(self._route(RetrievalMode.RANKED)) == {"ranked_state", "ranked_query", "ranked_scope_filters"}

    def test_a_negative_record_offset_is_refused(self) -> None:
        with pytest.raises(ValueError, match="record_offset"):
            RoundQuery().run(state=ATRAGRound(queries=("q",), mode=RetrievalMode.EXACT), record_offset=-1)

    def test_the_record_round_keeps_its_first_table_and_leads_with_its_summary(self) -> None:
        records = [Document(id="b", content="b", meta={"effective_start_utc": "2019"}),
                   Document(id="a", content="a", meta={"effective_start_utc": "2018"})]
        first = {"description": "2 records", "total": 2}
        state = ATRAGRound(queries=("q",), mode=RetrievalMode.EXACT)
        out = RecordRound().run(state=state, documents=records, table=first, total=2, truncated=False)
        assert [d.id for d in out["prompt_documents"]] == ["record-table-summary", "a", "b"]
        assert out["topic"] == {"mode": TopicMode.EXACT_RECORDS.value, "total": 2, "truncated": False}
        again = RecordRound().run(state=out["state"], documents=records, table={"description": "other"}, total=2,
                                  truncated=False)
        assert again["state"].table is first

    def test_round_state_is_typed_and_copied_like_any_value(self) -> None:
        with pytest.raises(ValueError):
            ATRAGRound(queries=("q",), mode="sideways")
        draft = ATRAGRound(queries=["q"], mode="ranked", stop_reason="max_iterations", table={"rows": []})
        assert (draft.queries, draft.mode, draft.stop_reason) == (("q",), RetrievalMode.RANKED,
                                                                   StopReason.MAX_ITERATIONS)
        copied = copy.deepcopy(draft)
        copied.table["rows"].append("changed")
        assert draft.table == {"rows": []}
        assert draft.to_dict()["mode"] == "ranked" and draft.to_dict()["stop_reason"] == "max_iterations"


class TestTimeScopeWithoutNestedRuns:
    def test_the_record_resolver_reads_the_same_scope_as_the_time_resolver(self) -> None:
        question = "Which lab results were abnormal in the last two years?"
        as_of = "2020-06-01T00:00:00Z"
        direct = TimeScopeResolver().run(question=question, as_of=as_of, patient_id="p1")["scope"]
        assert resolve_time_scope(question, as_of=as_of, patient_id="p1") == direct
        resolved = RecordQueryResolver().run(question=question, as_of=as_of, patient_id="p1")["scope"]
        assert (resolved.kind, resolved.start_utc, resolved.end_utc) == ("relative", direct.start_utc, direct.end_utc)
        assert not hasattr(RecordQueryResolver(), "time_resolver")


class TestMultiSourceGraph:
    def test_a_collection_is_searched_under_the_access_filters_and_the_collection(self) -> None:
        inner = FixedRetriever([Document(id="d", content="x")])
        retriever = MultiSourceRetriever(inner, sources=["collection:main"], top_k=3)
        out = retriever.run(query="q", source="collection:main", filters=ACCESS)
        assert [d.id for d in out["documents"]] == ["d"] and out["source"] == "collection:main"
        assert inner.calls[0]["top_k"] == 3 and inner.calls[0]["filters"]["conditions"][0] == ACCESS
        assert "source_router" in retriever.pipeline.graph.nodes
        assert isinstance(retriever.pipeline.get_component("source_router"), ConditionalRouter)

    def test_a_collection_without_access_filters_fails_closed(self) -> None:
        inner = FixedRetriever([Document(id="d", content="x")])
        with pytest.raises(PipelineRuntimeError, match="access filters"):
            MultiSourceRetriever(inner, sources=["collection:main"]).run(query="q", source="collection:main")
        assert inner.calls == []
        with pytest.raises(ValueError, match="access filters"):
            CollectionScope().run(source="collection:main", filters=None)

    def test_an_unconfigured_source_gives_an_error_and_no_documents(self) -> None:
        inner = FixedRetriever([Document(id="d", content="x")])
        retriever = MultiSourceRetriever(inner, sources=["collection:main"])
        out = retriever.run(query="q", source="collection:secret", filters=ACCESS)
        assert out["documents"] == [] and out["error"] == "source 'collection:secret' is not configured"
        assert inner.calls == []


class TestMSPRState:
    def test_phase_is_checked_where_it_is_set(self) -> None:
        state = MSPRState(question="q", sources=("collection:main",))
        assert state.phase is Phase.START and state.evolve(phase="observed").phase is Phase.OBSERVED
        with pytest.raises(ValueError):
            state.evolve(phase="observd")

    def test_verdicts_and_switches_are_dataclasses_shown_as_before(self) -> None:
        verdict = {"step": 1, "source": "collection:main", "new_document_ids": ["a"], "adds_information": False,
                   "reason": "judged to add nothing that helps", "model_verdict": "no"}
        state = MSPRState(question="q", sources=("collection:main", "web"), verdicts=(verdict,),
                          switches=(SourceSwitch(step=1, from_source="collection:main", to_source="web",
                                                 reason="judged to add nothing that helps"),))
        assert isinstance(state.verdicts[0], SourceVerdict) and state.verdicts[0].adds_information is False
        shown = state.to_dict()
        assert shown["verdicts"] == [verdict] and shown["phase"] == "start"
        assert shown["switches"] == [{"step": 1, "from": "collection:main", "to": "web",
                                      "reason": "judged to add nothing that helps"}]


def test_atrag_exports_its_routers_and_retriever_parts(tmp_path: Path) -> None:
    from docqa.pipelines.yaml_strategies import export_strategy
    from docqa.runtime import Runtime
    from docqa.settings import Settings
    from tests.support.scripted_chat import ScriptedChatGenerator

    llm = ScriptedChatGenerator(default="x")
    text = export_strategy("atrag", Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: llm))
    for shown in ("mode_router:", "haystack.components.routers.conditional_router.ConditionalRouter",
                  "ranked_retriever:", "window_retriever:", "record_retriever:", "record_table_builder:",
                  "docqa.components.topic_filtered_retriever.TopicFilteredRetriever",
                  "docqa.components.hybrid_retriever.HybridRetriever", "bm25_retriever:", "text_embedder:"):
        assert shown in text
    assert "docqa.components.atrag_retriever.ATRAGRetriever" not in text
