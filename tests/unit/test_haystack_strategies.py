"""Strategies as Haystack pipelines: steps from the tracer, YAML round-trips, allow-listed file strategies."""

from __future__ import annotations

import textwrap

import pytest
from fastapi.testclient import TestClient
from haystack import Document, Pipeline, component
from haystack.components.writers import DocumentWriter

from docqa.access import AccessScope
from docqa.components.cited_answer_generator import CitedAnswerGenerator
from docqa.components.embedded_bm25_retriever import EmbeddedBM25Retriever
from docqa.components.hybrid_retriever import HybridRetriever
from docqa.components.prompt_templates import load_prompt
from docqa.components.prompted_llm import inner_step_kinds
from docqa.components.store_retrievers import build_retrievers
from docqa.errors import ConfigurationError, InvalidOptionsError, LLMUnavailableError
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines import resp
from docqa.pipelines.baselines import NoRetrievalPipeline, StandardRAGPipeline
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.registry import available_pipelines, build_pipeline, set_file_strategies
from docqa.pipelines.yaml_strategies import StrategyFileError, export_strategy, load_pipelines_dir, load_strategy
from docqa.runtime import Runtime
from docqa.settings import Settings
from docqa.stores.factory import build_document_store
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder
from tests.support.scripted_chat import ScriptedChatGenerator
from tests.support.server_app import auth, build_test_app
from tests.support.yaml_strategy_files import bm25_rag_yaml

ALICE = AccessScope("acme", frozenset({"alice"}))
TEST_MODULES = ["docqa.*", "tests.support.*"]


def _doc(doc_id: str, text: str, tenant: str = "acme", access: tuple[str, ...] = ("everyone",)) -> Document:
    return Document(id=doc_id, content=text, meta={"tenant": tenant, "access": list(access), "source": f"{doc_id}.md"})


DOCS = [
    _doc("hotel", "Hotel costs are reimbursed up to 180 euros per night in major cities."),
    _doc("bonus", "The hotel bonus pool for finance is 5000 euros.", access=("group:finance",)),
    _doc("board", "The hotel budget for the board retreat is 900 euros per night.", access=("group:board",)),
    _doc("globex", "Hotel costs at Globex are reimbursed up to 400 euros.", tenant="globex"),
]


@pytest.fixture(autouse=True)
def _no_file_strategies():
    yield
    set_file_strategies([])


@pytest.fixture
def store(tmp_path):
    store = build_document_store(Settings(data_dir=tmp_path))
    store.write_documents(HashDocumentEmbedder().run(documents=DOCS)["documents"])
    return store


def _standard(store, llm, top_k: int = 3) -> StandardRAGPipeline:
    bm25, dense = build_retrievers(store, Settings())
    retriever = HybridRetriever(bm25, dense, HashTextEmbedder(), top_k=top_k, candidates=10)
    generator = CitedAnswerGenerator(llm, prompt_template=load_prompt("standard_answer"), max_tokens=64)
    return StandardRAGPipeline(retriever, generator, top_k=top_k, max_question_chars=500, model="scripted")


def _no_retrieval(llm) -> NoRetrievalPipeline:
    return NoRetrievalPipeline(llm, prompt_template=load_prompt("no_retrieval_answer"), max_tokens=16,
                               max_question_chars=100, model="scripted")


def _shape(result) -> list[tuple[str, str, int]]:
    return [(s.kind, s.name, s.llm.calls) for s in result.steps]


class TestStepsFromTheTracer:
    def test_standard_steps_are_its_component_runs(self, store):
        llm = ScriptedChatGenerator(default="Up to 180 euros [1].")
        result = _standard(store, llm).run("hotel limit per night?", ALICE)
        # The hybrid retriever's parts are steps inside it; the generator is a prompted LLM step: its prompt,
        # model call and parser are steps inside it.
        assert _shape(result) == [("retrieval", "hybrid_retriever", 0), ("component", "request", 0),
                                  ("component", "bm25_retriever", 0), ("component", "text_embedder", 0),
                                  ("component", "embedding_retriever", 0), ("component", "fusion", 0),
                                  ("generation", "cited_answer_generator", 0),
                                  ("prompt", "answer_prompt", 0), ("generation", "answer_llm", 1),
                                  ("parse", "answer_parser", 0), ("grounding", "grounding", 0)]
        assert [s.parent for s in result.steps[1:6]] == [0, 0, 0, 0, 0]
        assert [s.parent for s in result.steps[7:10]] == [6, 6, 6]
        retrieval, generation, _, call, _, grounding = result.steps[0], *result.steps[6:]
        assert [v["verdict"] for v in grounding.outputs["verdicts"]] == ["kept"]
        assert retrieval.inputs["query"] == "hotel limit per night?"
        assert retrieval.inputs["filters"]["conditions"][0]["value"] == "acme"
        assert all(set(d) == {"id", "score", "source", "snippet"} for d in retrieval.outputs["documents"])
        assert generation.outputs["answer"] == "Up to 180 euros [1]."
        assert call.outputs["llm_calls"][0]["response"] == "Up to 180 euros [1]."
        assert generation.duration_s > 0 and generation.error is None
        assert result.totals.llm_calls == 1

    def test_no_retrieval_has_one_generation_step(self):
        result = _no_retrieval(ScriptedChatGenerator(default="Paris")).run("Capital of France?", ALICE)
        assert result.answer == "Paris"
        assert _shape(result) == [("generation", "generator", 0), ("prompt", "answer_prompt", 0),
                                  ("generation", "answer_llm", 1), ("parse", "answer_parser", 0),
                                  ("grounding", "grounding", 0)]
        assert result.steps[0].inputs == {"question": "Capital of France?"}

    def test_a_failing_component_raises_its_own_error_and_its_step_records_it(self, store):
        def down(_prompt: str) -> str:
            raise LLMUnavailableError("the language model is unavailable")

        pipeline = _standard(store, ScriptedChatGenerator(rules=[(".", down)]))
        from docqa.recording import capture_recorders

        with capture_recorders() as recorders, pytest.raises(LLMUnavailableError):
            pipeline.run("hotel?", ALICE)
        steps = recorders[0].steps
        steps = [s for s in steps if s.parent is None or steps[s.parent].name != "hybrid_retriever"]
        assert [s.name for s in steps] == ["hybrid_retriever", "cited_answer_generator", "answer_prompt", "answer_llm"]
        assert steps[1].error.startswith("LLMUnavailableError") and steps[3].error.startswith("LLMUnavailableError")

    def test_config_is_the_pipeline_dict_plus_models_and_its_hash(self, store):
        pipeline = _standard(store, ScriptedChatGenerator(default="x"))
        config = pipeline.config()
        assert set(config["components"]) == {"hybrid_retriever", "cited_answer_generator", "grounding"}
        assert {"sender": "hybrid_retriever.documents", "receiver": "cited_answer_generator.documents"} in \
            config["connections"]
        assert {"sender": "hybrid_retriever.documents", "receiver": "grounding.documents"} in config["connections"]
        assert config["models"] == {"generator": "scripted"} and config["top_k"] == 3
        result = pipeline.run("hotel?", ALICE)
        assert len(result.config["config_hash"]) == 64

    def test_an_unserializable_component_still_gives_a_config(self):
        llm = ScriptedChatGenerator(rules=[("x", lambda prompt: "y")])
        config = _no_retrieval(llm).config()
        generator = config["components"]["generator"]
        assert generator["type"].endswith("AnswerGenerator") and "unserializable" in generator["init_parameters"]


class TestRoundTrip:
    def test_standard_round_trips_through_yaml_and_runs(self, store):
        original = _standard(store, ScriptedChatGenerator(default="Up to 180 euros [1]."))
        loaded = Pipeline.loads(original.dumps(), allowed_modules=TEST_MODULES)
        expected, got = original.pipeline.to_dict(), loaded.to_dict()
        assert got["components"] == expected["components"]
        assert sorted(map(str, got["connections"])) == sorted(map(str, expected["connections"]))
        again = HaystackStrategy("standard", loaded, max_question_chars=500,
                                 kinds={**inner_step_kinds(loaded), "hybrid_retriever": "retrieval",
                                        "cited_answer_generator": "generation"})
        first, second = original.run("hotel limit?", ALICE), again.run("hotel limit?", ALICE)
        assert second.answer == first.answer
        assert [c.document_id for c in second.citations] == [c.document_id for c in first.citations]
        assert _shape(second) == _shape(first)

    def test_no_retrieval_round_trips_through_yaml_and_runs(self):
        original = _no_retrieval(ScriptedChatGenerator(default="Paris"))
        loaded = Pipeline.loads(original.dumps(), allowed_modules=TEST_MODULES)
        outputs = loaded.run({"question": "Capital of France?"})
        assert outputs["grounding"]["answer"] == "Paris" and outputs["grounding"]["answer_source"] == "model"

    def test_registry_strategies_export_role_generators_and_load_back_bound_to_the_runtime(self, tmp_path):
        runtime = Runtime(Settings(data_dir=tmp_path),
                          chat_generator_factory=lambda role: ScriptedChatGenerator(default=f"{role} says hi"))
        text = export_strategy("no_retrieval", runtime, max_tokens=8)
        assert "docqa.llm.role_generator.RoleChatGenerator" in text and "api_key" not in text
        strategy = load_strategy(text, name="copy", source="copy.yaml", runtime=runtime)
        assert strategy.run("Hello?", ALICE).answer == "generator says hi"

    def test_the_standard_export_loads_with_the_file_allow_list(self, tmp_path):
        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: ScriptedChatGenerator())
        text = export_strategy("standard", runtime, top_k=2)
        strategy = load_strategy(text, name="copy", source="copy.yaml", runtime=runtime)
        retriever = strategy.pipeline.get_component("hybrid_retriever")
        assert retriever.bm25_retriever.document_store is runtime.document_store
        assert retriever.top_k == 2


class _HashRuntime(Runtime):
    """A runtime whose retrievers embed queries with the hash embedder (no model to load)."""

    def text_embedder(self):
        return HashTextEmbedder()

    def retriever(self, top_k=None):
        bm25, dense = build_retrievers(self.document_store, self.settings)
        return HybridRetriever(bm25, dense, HashTextEmbedder(), top_k=top_k or 5, candidates=10)


RESP_SCRIPT = [
    (r"completely and accurately respond to the question", "No"),
    (r"\[Your thought\]", "What is the hotel bonus pool for finance?"),
    (r"professional writer", "Hotel costs are reimbursed up to 180 euros. [DONE]"),
    (r"respond completely and accurately to the question", "No"),
]


class TestReSPRoundTrip:
    def test_the_resp_export_loads_back_and_runs_like_the_built_in(self, store, tmp_path, monkeypatch):
        from docqa.pipelines import yaml_strategies

        # The hash embedder lives in tests/: allow it for this round trip only.
        monkeypatch.setattr(yaml_strategies, "_ALLOWED_PREFIXES", (*yaml_strategies._ALLOWED_PREFIXES, "tests."))
        monkeypatch.setattr(yaml_strategies, "ALLOWED_MODULES", [*TEST_MODULES, "haystack.*"])

        def runtime() -> Runtime:
            llm = ScriptedChatGenerator(rules=RESP_SCRIPT, default="Up to 180 euros")
            return _HashRuntime(Settings(data_dir=tmp_path), document_store=store,
                                chat_generator_factory=lambda role: llm)

        built = build_pipeline("resp", runtime(), top_k=1, max_iterations=3)
        loaded = load_strategy(export_strategy("resp", runtime(), top_k=1, max_iterations=3), name="resp",
                               source="resp.yaml", runtime=runtime()).pipeline
        restored, original = loaded.to_dict(), built.pipeline.to_dict()
        assert restored["components"] == original["components"]
        # A cycle's edges come back in another order: compare them as a set.
        assert {tuple(c.values()) for c in restored["connections"]} == {
            tuple(c.values()) for c in original["connections"]}
        assert restored["max_runs_per_component"] == original["max_runs_per_component"] == 1 + 3 * 5
        llm = ScriptedChatGenerator(rules=RESP_SCRIPT, default="Up to 180 euros")
        for _, instance in loaded.walk():
            if isinstance(getattr(instance, "chat_generator", None), RoleChatGenerator):
                instance.chat_generator.bind(llm)
        again = HaystackStrategy("resp", loaded, max_question_chars=500,
                                 kinds={**inner_step_kinds(loaded), **resp.KINDS})

        first, second = built.run("hotel limit per night?", ALICE), again.run("hotel limit per night?", ALICE)
        # The plan asks about the finance bonus, which Alice may not read: the retrieval brings nothing new.
        assert first.stop_reason == second.stop_reason == resp.STOP_NO_NEW_EVIDENCE
        assert second.answer == first.answer == "Up to 180 euros"
        assert [c.document_id for c in second.citations] == [c.document_id for c in first.citations] == ["hotel"]
        assert _shape(second) == _shape(first)
        retrievals = [s for s in second.steps if s.kind == "retrieval"]
        assert [s.inputs["query"] for s in retrievals] == ["hotel limit per night?",
                                                           "What is the hotel bonus pool for finance?"]
        assert all(s.inputs["filters"] == ALICE.to_filters() for s in retrievals)
        assert len(llm.calls) == 4  # summary, judgement, plan, answer

    def test_the_resp_export_loads_with_the_file_allow_list(self, tmp_path):
        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: ScriptedChatGenerator())
        text = export_strategy("resp", runtime, top_k=2, max_iterations=4)
        assert "api_key" not in text
        strategy = load_strategy(text, name="copy", source="copy.yaml", runtime=runtime)
        assert set(strategy.models) == {"generator", "reasoner", "summarizer"}
        assert strategy.pipeline.get_component("hybrid_retriever").top_k == 2
        assert strategy.pipeline.get_component("resp_controller").max_iterations == 4
        assert strategy.pipeline._max_runs_per_component == 1 + 4 * 5
        assert set(strategy._outputs) == {"answer", "stop_reason", "cited_documents"}


class TestATRAGRoundTrip:
    def test_atrag_exports_loads_back_and_runs_with_its_record_table(self, tmp_path):
        from docqa.pipelines import atrag

        llm = ScriptedChatGenerator(rules=[(r"supported by the documents", "Yes"), (r"answer the question", "Yes")],
                                    default="Answer: HbA1c was 6.1 % [3].")
        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda role: llm)
        runtime.document_store.write_documents([Document(id=f"a1c-{year}", content=f"HbA1c {value} %", meta={
            "tenant": "acme", "access": ["everyone"], "patient_id": "p1", "record_type": "lab_result",
            "code": "4548-4", "value": value, "unit": "%", "effective_start_utc": f"{year}-01-01T00:00:00Z"})
            for year, value in ((2018, 5.4), (2019, 6.1))])
        original = build_pipeline("atrag", runtime, max_iterations=2)
        text = export_strategy("atrag", runtime, max_iterations=2)
        assert "api_key" not in text
        loaded = load_strategy(text, name="atrag", source="atrag.yaml", runtime=runtime).pipeline
        expected, got = original.pipeline.to_dict(), loaded.to_dict()
        assert got["components"] == expected["components"]
        assert sorted(map(str, got["connections"])) == sorted(map(str, expected["connections"]))
        for _, instance in loaded.walk():  # the YAML names roles; bind them to this runtime's model
            generator = getattr(instance, "chat_generator", None)
            if generator is not None:
                generator.bind(llm)
        again = HaystackStrategy("atrag", loaded, max_question_chars=500,
                                 kinds={**inner_step_kinds(loaded), **atrag.KINDS},
                                 input_names=atrag.INPUT_NAMES)
        inputs = {"as_of": "2020-06-01T00:00:00Z", "patient_id": "p1"}
        first, second = (s.run("HbA1c since 2018?", ALICE, **inputs) for s in (original, again))
        assert (second.answer, second.stop_reason) == (first.answer, first.stop_reason) == (
            "HbA1c was 6.1 %.", atrag.StopReason.ACCEPTED)
        assert [c.document_id for c in second.citations] == ["a1c-2018", "a1c-2019"]
        assert second.citations[1].record["value"] == 6.1
        assert _shape(second) == _shape(first)
        table = next(s for s in second.steps if s.kind == "record_table")
        assert table.outputs["table"]["total"] == 2 and second.steps[-1].kind == "grounding"


BM25_RAG = bm25_rag_yaml(top_k=5)


class TestFileStrategies:
    def _load(self, text: str, tmp_path, runtime=None) -> HaystackStrategy:
        return load_strategy(textwrap.dedent(text), name="custom", source=str(tmp_path / "custom.yaml"),
                             runtime=runtime, settings=Settings(data_dir=tmp_path))

    def test_a_class_outside_the_allow_list_is_refused(self, tmp_path):
        text = BM25_RAG.replace("docqa.llm.role_generator.RoleChatGenerator", "tests.support.scripted_chat."
                                "ScriptedChatGenerator")
        with pytest.raises(StrategyFileError, match=r"custom\.yaml: line 13: answerer\.init_parameters\."
                                                    r"chat_generator has type "
                                                    r"'tests\.support\.scripted_chat\.ScriptedChatGenerator'"):
            self._load(text, tmp_path)

    def test_os_level_types_are_refused_before_any_import(self, tmp_path):
        text = BM25_RAG.replace("docqa.components.cited_answer_generator.CitedAnswerGenerator", "os.system")
        with pytest.raises(StrategyFileError, match="not allow-listed"):
            self._load(text, tmp_path)

    def test_malformed_yaml_names_the_file_and_line(self, tmp_path):
        with pytest.raises(StrategyFileError, match=r"custom\.yaml: line 5: malformed YAML"):
            self._load("components:\n  a:\n    type: x\n    init_parameters: {a: 1\n  b: 2\n", tmp_path)

    def test_a_store_that_is_not_docqas_is_refused(self, tmp_path):
        text = BM25_RAG.replace("docqa.stores.embedded.EmbeddedDocumentStore",
                                "haystack.document_stores.in_memory.InMemoryDocumentStore")
        with pytest.raises(StrategyFileError, match="only docqa's document stores are allowed"):
            self._load(text, tmp_path)

    def test_filters_fed_by_another_component_are_refused(self, tmp_path):
        text = BM25_RAG.replace("components:\n", textwrap.dedent("""\
            components:
              filter_maker:
                type: haystack.components.converters.output_adapter.OutputAdapter
                init_parameters:
                  template: '{{ {"field": "meta.tenant", "operator": "==", "value": "globex"} }}'
                  output_type: dict[str, typing.Any]
            """), 1) + "  - sender: filter_maker.output\n    receiver: retriever.filters\n"
        with pytest.raises(StrategyFileError, match="'retriever' takes its filters from filter_maker"):
            self._load(text, tmp_path)

    def test_a_store_component_without_filters_is_refused(self, store):
        pipeline = Pipeline()
        pipeline.add_component("writer", DocumentWriter(document_store=store))
        pipeline.add_component("answerer", _AnswerEcho())
        with pytest.raises(ConfigurationError, match="'writer' reads a document store but takes no `filters`"):
            HaystackStrategy("w", pipeline, max_question_chars=100)

    def test_a_pipeline_without_an_answer_output_is_refused(self, store):
        pipeline = Pipeline()
        pipeline.add_component("retriever", EmbeddedBM25Retriever(document_store=store))
        with pytest.raises(ConfigurationError, match="no unconnected `answer` output"):
            HaystackStrategy("r", pipeline, max_question_chars=100)

    def test_a_blocked_run_is_an_error_not_an_empty_answer(self):
        pipeline = Pipeline()
        pipeline.add_component("silent", _Silent())
        pipeline.add_component("answerer", _AnswerFromDocuments())
        pipeline.connect("silent.documents", "answerer.documents")
        strategy = HaystackStrategy("blocked", pipeline, max_question_chars=100)
        with pytest.raises(ConfigurationError, match="'blocked' produced no answer"):
            strategy.run("hi?", ALICE)

    def test_the_directory_registers_valid_files_and_reports_the_others(self, tmp_path):
        directory = tmp_path / "pipelines"
        directory.mkdir()
        (directory / "bm25_rag.yaml").write_text(BM25_RAG)
        (directory / "broken.yaml").write_text("components: [\n")
        (directory / "standard.yaml").write_text(BM25_RAG)
        errors = load_pipelines_dir(Settings(data_dir=tmp_path, pipelines_dir=directory))
        assert len(errors) == 2
        assert any("broken.yaml" in e and "line" in e for e in errors)
        assert any("standard.yaml" in e and "built-in" in e for e in errors)
        names = {spec.name for spec in available_pipelines()}
        assert "bm25_rag" in names and "broken" not in names

        runtime = Runtime(Settings(data_dir=tmp_path), chat_generator_factory=lambda r: ScriptedChatGenerator())
        with pytest.raises(InvalidOptionsError, match="top_k"):
            build_pipeline("bm25_rag", runtime, top_k=3)


@component
class _Silent:
    @component.output_types(documents=list[Document])
    def run(self, question: str) -> dict:
        return {}


@component
class _AnswerFromDocuments:
    @component.output_types(answer=str)
    def run(self, question: str, documents: list[Document]) -> dict:
        return {"answer": question}


@component
class _AnswerEcho:
    def __init__(self, give_answer: bool = True) -> None:
        self.give_answer = give_answer

    @component.output_types(answer=str)
    def run(self, question: str) -> dict:
        return {"answer": question} if self.give_answer else {}


class TestFileStrategyOverHTTP:
    @pytest.fixture
    def served(self, tmp_path):
        directory = tmp_path / "pipelines"
        directory.mkdir()
        (directory / "bm25_rag.yaml").write_text(BM25_RAG)
        (directory / "evil.yaml").write_text(BM25_RAG.replace("docqa.llm.role_generator.RoleChatGenerator",
                                                              "subprocess.Popen"))
        llm = ScriptedChatGenerator(default="Here is what I found [1].")
        app, keys = build_test_app(tmp_path, llm, pipelines_dir=directory)
        store = build_document_store(Settings(data_dir=tmp_path / "data"))
        store.write_documents(DOCS)
        with TestClient(app) as client:
            yield client, keys, llm

    def _ask(self, client, key: str, **extra):
        body = {"question": "What is the hotel budget?", "pipeline": "bm25_rag", **extra}
        return client.post("/v1/query", json=body, headers=auth(key))

    def test_listed_as_a_model_and_the_invalid_file_is_not(self, served):
        client, keys, _ = served
        ids = {m["id"] for m in client.get("/v1/models", headers=auth(keys["alice"])).json()["data"]}
        assert "bm25_rag" in ids and "evil" not in ids

    @pytest.mark.parametrize(("user", "auditor", "visible"), [
        ("alice", "audrey", {"hotel", "bonus"}),
        ("bob", "audrey", {"hotel"}),
        ("zed", "zaudit", {"globex"}),
    ])
    def test_answers_only_from_what_the_caller_may_read(self, served, user, auditor, visible):
        client, keys, llm = served
        response = self._ask(client, keys[user])
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["answer"] == "Here is what I found [1]." and body["pipeline"] == "bm25_rag"
        assert {c["document_id"] for c in body["citations"]} <= visible
        prompt = llm.calls[-1]["prompt"]
        assert not any(d.content in prompt for d in DOCS if d.id not in visible)
        trace = client.get(f"/v1/traces/{body['trace_id']}", headers=auth(keys[auditor]))
        assert trace.status_code == 200, trace.text
        steps = trace.json()["steps"]
        assert [(s["kind"], s["name"]) for s in steps] == [
            ("retrieval", "retriever"), ("generation", "answerer"), ("prompt", "answer_prompt"),
            ("generation", "answer_llm"), ("parse", "answer_parser"), ("grounding", "grounding")]
        assert {d["id"] for d in steps[0]["documents"]} == visible

    def test_options_are_refused(self, served):
        client, keys, llm = served
        response = self._ask(client, keys["alice"], options={"top_k": 2})
        assert response.status_code == 422
        assert llm.calls == []
