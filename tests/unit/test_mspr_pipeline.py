"""MSPR with a scripted LLM over a real embedded store (hash embeddings) and a real SearXNG-shaped HTTP server."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from haystack import Document
from haystack.document_stores.types import DuplicatePolicy

from docqa.access import AccessScope
from docqa.components.mspr_controller import StopReason
from docqa.components.searxng_web_search import SearxngWebSearch
from docqa.components.web_page_reader import chunk_document_id
from docqa.errors import ConfigurationError, InvalidOptionsError
from docqa.pipelines.mspr import MSPRPipeline
from docqa.pipelines.registry import build_pipeline
from docqa.pipelines.yaml_strategies import ALLOWED_MODULES, export_strategy, load_strategy
from docqa.result import PipelineResult
from docqa.run_control import RunControl
from docqa.runtime import Runtime
from docqa.settings import Settings
from tests.support.hash_embedder import HashDocumentEmbedder, HashTextEmbedder
from tests.support.loopback_http import LoopbackSite, Route, delayed, reply, trickle
from tests.support.scripted_chat import ScriptedChatGenerator

ALICE = AccessScope("acme", frozenset({"alice"}))
BOARD = AccessScope("acme", frozenset({"board"}))
MAIN, ARCHIVE, WEB = "collection:main", "collection:archive", "web"
AGENT = r"Reply with JSON"
PREFER = r"Do the new passages add information"
REVIEW = r"Is the proposed answer"
REFINE = r"Write in one or two sentences"


def step(action: str, action_input: str, thought: str = "thinking") -> str:
    return json.dumps({"thought": thought, "action": action, "action_input": action_input})


def _doc(
    doc_id: str, text: str, collection: str | None = None, access: tuple[str, ...] = ("everyone",), tenant: str = "acme"
) -> Document:
    meta: dict[str, Any] = {"tenant": tenant, "access": list(access), "source": f"{doc_id}.md"}
    if collection is not None:
        meta["collection"] = collection
    return Document(id=doc_id, content=text, meta=meta)


DOCUMENTS = [
    # No `collection` meta: ingested before collections existed, so part of `main`.
    _doc("hotel", "Hotel costs are reimbursed up to 180 euros per night in major cities."),
    _doc("mileage", "Mileage is reimbursed at 0.30 euros per kilometre driven.", collection="main"),
    _doc("meals", "Meals abroad are reimbursed with a daily allowance of 45 euros.", collection="main"),
    _doc("old_hotel", "Archived policy from 2019: hotel costs were reimbursed up to 150 euros.", collection="archive"),
    _doc(
        "retreat",
        "Archived board retreat budget: hotel 900 euros per night, secret.",
        collection="archive",
        access=("board",),
    ),
    _doc("globex", "Globex archive: hotel costs up to 400 euros.", collection="archive", tenant="globex"),
]


class HashRuntime(Runtime):
    """A runtime whose retrievers embed queries with the hash embedder (no model load)."""

    def text_embedder(self) -> Any:
        return HashTextEmbedder()


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(data_dir=tmp_path, top_k=1, retrieval_candidates=5)


def _runtime(settings: Settings, llm: ScriptedChatGenerator) -> HashRuntime:
    runtime = HashRuntime(settings, chat_generator_factory=lambda role: llm)
    runtime.document_store.write_documents(
        HashDocumentEmbedder().run(documents=DOCUMENTS)["documents"], policy=DuplicatePolicy.OVERWRITE
    )
    return runtime


def _run(
    settings: Settings,
    llm: ScriptedChatGenerator,
    question: str = "What is the hotel limit?",
    scope: AccessScope = ALICE,
    **options: Any,
) -> PipelineResult:
    pipeline = build_pipeline("mspr", _runtime(settings, llm), **options)
    assert isinstance(pipeline, MSPRPipeline)
    return pipeline.run(question, scope)


def _steps(result: PipelineResult, name: str) -> list[Any]:
    return [s for s in result.steps if s.name == name]


def _retrievals(result: PipelineResult) -> list[tuple[str, str]]:
    return [(s.outputs["source"], s.inputs["query"]) for s in _steps(result, "retriever")]


def _calls(llm: ScriptedChatGenerator, pattern: str) -> list[dict[str, Any]]:
    return [c for c in llm.calls if pattern.split()[0] in c["prompt"] and pattern in c["prompt"]]


class TestPreferenceDrivenSourceSelection:
    def test_stays_on_the_primary_while_it_adds_information(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel costs"),
                        step("search_primary", "mileage kilometre"),
                        step("search_primary", "meals daily allowance"),
                        step("answer", "180 euros"),
                    ],
                ),
                (PREFER, "Yes"),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm)

        assert _retrievals(result) == [
            (MAIN, "hotel costs"),
            (MAIN, "mileage kilometre"),
            (MAIN, "meals daily allowance"),
        ]
        assert len(_calls(llm, PREFER)) == 3
        assert result.stop_reason == StopReason.REVIEW_PASSED and result.answer == "180 euros"
        final = _steps(result, "controller")[-1].outputs["route"]
        assert final["switches"] == [] and final["retrievals_by_source"] == {MAIN: 3}
        # The answer cites the passage in which its support was found, not every passage observed.
        assert {c.document_id for c in result.citations} == {"hotel"}

    def test_switches_exactly_when_the_judge_says_nothing_new(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel costs"),
                        step("search_primary", "mileage kilometre"),
                        step("search_primary", "hotel costs policy"),
                        step("answer", "150 euros"),
                    ],
                ),
                (PREFER, ["Yes", "No"]),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm)

        # The second primary retrieval was judged to add nothing: the third `search_primary` goes to the archive.
        assert [source for source, _ in _retrievals(result)] == [MAIN, MAIN, ARCHIVE]
        verdicts = [s.outputs["verdict"] for s in _steps(result, "judge")]
        assert [v["adds_information"] for v in verdicts] == [True, False]  # no judge once on the last source
        switches = _steps(result, "controller")[-1].outputs["route"]["switches"]
        assert switches == [{"step": 2, "from": MAIN, "to": ARCHIVE, "reason": "judged to add nothing that helps"}]
        assert "old_hotel" in {c.document_id for c in result.citations}

    def test_a_retrieval_with_nothing_unseen_switches_without_asking_the_model(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel costs"),
                        step("search_primary", "hotel costs"),
                        step("answer", "180 euros"),
                    ],
                ),
                (PREFER, "Yes"),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm)
        assert len(_calls(llm, PREFER)) == 1
        assert _steps(result, "judge")[1].outputs["verdict"]["reason"] == "no passage that was not already seen"
        assert _steps(result, "controller")[-1].outputs["route"]["switches"][0]["to"] == ARCHIVE

    def test_search_secondary_goes_to_the_next_source_without_a_judgement(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel costs"),
                        step("search_secondary", "hotel archived policy"),
                        step("answer", "150 euros"),
                    ],
                ),
                (PREFER, "Yes"),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm)
        assert _retrievals(result) == [(MAIN, "hotel costs"), (ARCHIVE, "hotel archived policy")]
        assert len(_calls(llm, PREFER)) == 1  # the primary's retrieval only

    def test_the_first_step_can_only_search_the_primary(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_secondary", "hotel archived policy"),
                        step("search_primary", "hotel costs"),
                        step("answer", "180 euros"),
                    ],
                ),
                (PREFER, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, max_reviews=0)
        decisions = [s.outputs["decision"] for s in _steps(result, "agent")]
        assert decisions[0]["offered_actions"] == ["search_primary"] and decisions[0]["malformed"] is True
        assert _retrievals(result) == [(MAIN, "hotel costs")]
        schema = _calls(llm, AGENT)[0]["generation_kwargs"]["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["action"]["enum"] == ["search_primary"]


class TestCorrectiveAnswerReview:
    def test_a_failed_review_retrieves_from_the_secondary_with_the_original_question(self, settings):
        question = "What was the hotel limit in 2019?"
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [step("search_primary", "hotel costs"), step("answer", "180 euros"), step("answer", "150 euros")],
                ),
                (PREFER, "Yes"),
                (REVIEW, "No"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, question=question)

        assert _retrievals(result) == [(MAIN, "hotel costs"), (ARCHIVE, question)]
        assert _steps(result, "retriever")[1].inputs["query"] == question
        assert len(_calls(llm, REVIEW)) == 1  # SRT = 1: the second answer cannot buy another retrieval
        assert result.answer == "150 euros" and result.stop_reason == StopReason.ANSWERED_AFTER_REVIEW
        assert _steps(result, "reviewer")[0].outputs["review"]["passed"] is False
        # The agent continues with the supplementary passages and the review's feedback in its prompt.
        last_prompt = _calls(llm, AGENT)[-1]["prompt"]
        assert "150 euros" in last_prompt and "review of your last answer" in last_prompt

    def test_srt_bounds_the_supplementary_retrievals(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (AGENT, [step("search_primary", "hotel"), step("answer", "no idea")]),
                (PREFER, "Yes"),
                (REVIEW, "No"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, max_reviews=2)
        assert len(_calls(llm, REVIEW)) == 2
        supplementary = _retrievals(result)[1:]
        assert supplementary == [(ARCHIVE, "What is the hotel limit?")] * 2
        assert len(_calls(llm, AGENT)) == 4
        assert result.stop_reason == StopReason.ANSWERED_AFTER_REVIEW

    def test_without_reviews_the_first_answer_is_final(self, settings):
        llm = ScriptedChatGenerator(
            rules=[(AGENT, [step("search_primary", "hotel"), step("answer", "180 euros")]), (PREFER, "Yes")],
            default="Short summary.",
        )
        result = _run(settings, llm, max_reviews=0)
        assert result.stop_reason == StopReason.ANSWERED and len(_calls(llm, AGENT)) == 2
        assert _calls(llm, REVIEW) == []

    def test_the_first_step_must_search(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (AGENT, [step("answer", "from memory"), step("search_primary", "hotel"), step("answer", "180 euros")]),
                (PREFER, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, max_reviews=0)
        first = _steps(result, "agent")[0].outputs["decision"]
        assert first["offered_actions"] == ["search_primary"] and first["malformed"] is True
        assert result.answer == "180 euros" and len(_retrievals(result)) == 1


class TestBounds:
    def test_awi_bounds_the_agent_steps_and_the_last_one_must_answer(self, settings):
        def agent(prompt: str) -> str:
            # Searches whenever it is allowed to.
            return step("search_primary", "hotel") if "- search_primary" in prompt else step("answer", "180")

        llm = ScriptedChatGenerator(rules=[(AGENT, agent), (PREFER, "Yes")], default="Short summary.")
        result = _run(settings, llm, max_steps=3, max_reviews=0)

        assert len(_calls(llm, AGENT)) == 3 and len(_retrievals(result)) == 2
        last = _steps(result, "agent")[-1].outputs["decision"]
        assert last["offered_actions"] == ["answer"] and last["forced_answer"] is True
        assert result.stop_reason == StopReason.MAX_STEPS and result.answer == "180"

    def test_malformed_steps_are_retried_then_the_run_stops(self, settings):
        # Two malformed first steps: the question itself searches the primary; two more malformed steps stop.
        llm = ScriptedChatGenerator(
            rules=[
                (AGENT, ["not json", json.dumps({"action": "fly", "action_input": "x", "thought": ""})]),
                (PREFER, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm)
        assert len(_calls(llm, AGENT)) == 4
        assert _retrievals(result) == [("collection:main", "What is the hotel limit?")]
        assert result.stop_reason == StopReason.MALFORMED_ACTION and result.citations[0].document_id == "hotel"
        assert result.answer_source == "extracted"  # the model wrote no answer; the passage found is quoted
        assert [s.outputs["decision"]["malformed"] for s in _steps(result, "agent")] == [True] * 4
        fallback = [s.outputs["route"] for s in result.steps if s.outputs.get("route", {}).get("next") == "retrieval"]
        assert fallback[0]["why"].startswith("malformed first step") and fallback[0]["query"] == result.question

    def test_an_llm_budget_spent_mid_run_answers_with_the_passages_found(self, settings):
        llm = ScriptedChatGenerator(
            rules=[(AGENT, [step("search_primary", "hotel costs"), step("answer", "180 euros")]), (PREFER, "Yes")],
            default="Short summary.",
        )
        with RunControl(max_llm_calls=2, max_completion_tokens=256, max_prompt_chars=100_000).active():
            result = _run(settings, llm)
        assert len(llm.calls) == 2 and _retrievals(result) == [(MAIN, "hotel costs")]
        assert result.stop_reason == "llm_budget"
        assert result.answer_source == "extracted" and "180 euros per night" in result.answer
        assert [c.document_id for c in result.citations] == ["hotel"]
        assert [s.name for s in result.steps[-2:]] == ["llm_budget", "answer_fallback"]

    def test_a_search_whose_query_echoes_the_prompt_searches_the_question(self, settings):
        # What the packaged 270M model writes: valid JSON whose query is an action name or a prompt phrase.
        question = "What is the hotel limit?"
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "search_primary"),
                        step("search_secondary", " Answer "),
                        step("answer", "180 euros"),
                    ],
                ),
                (PREFER, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, question=question, max_reviews=0)
        assert _retrievals(result) == [(MAIN, question), (ARCHIVE, question)]  # the question, not the echo
        decisions = [s.outputs["decision"] for s in _steps(result, "agent")]
        assert [d["query_from"] for d in decisions] == ["question", "question", "model"]
        assert [d["malformed"] for d in decisions] == [False] * 3
        assert (
            decisions[0]["problem"] == "the action_input only repeated an action or source name: the question "
            "is searched"
        )
        assert result.answer == "180 euros" and result.stop_reason == StopReason.ANSWERED

    def test_a_stop_after_malformed_answers_says_why_and_the_retry_was_told_what_was_wrong(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel"),
                        step("answer", "  "),
                        step("answer", "the final answer for answer"),
                    ],
                ),
                (PREFER, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm)
        assert result.stop_reason == StopReason.MALFORMED_ACTION and _retrievals(result) == [(MAIN, "hotel")]
        assert result.answer_source == "extracted"  # the passage found is quoted, marked as such
        prompts = [c["prompt"] for c in _calls(llm, AGENT)]
        assert len(prompts) == 3 and "rejected" not in prompts[1]
        assert "Your previous reply was rejected: the action_input was empty." in prompts[2]
        problems = [s.outputs["decision"]["problem"] for s in _steps(result, "agent")]
        assert problems == ["", "the action_input was empty", "the action_input only repeated an action or source name"]
        final = [s for s in result.steps if s.outputs.get("route", {}).get("next") == "end"]
        assert final and final[-1].outputs["route"]["problem"] == problems[-1]

    def test_one_malformed_step_is_recovered_by_the_retry(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (AGENT, ["not json", step("search_primary", "hotel"), step("answer", "180 euros")]),
                (PREFER, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, max_reviews=0)
        assert result.answer == "180 euros" and result.stop_reason == StopReason.ANSWERED

    def test_options_are_bounded_by_the_server_ceilings(self, settings):
        runtime = _runtime(settings, ScriptedChatGenerator())
        with pytest.raises(InvalidOptionsError, match="max_steps"):
            build_pipeline("mspr", runtime, max_steps=10_000)
        with pytest.raises(InvalidOptionsError, match="max_reviews"):
            build_pipeline("mspr", runtime, max_reviews=-1)
        with pytest.raises(InvalidOptionsError, match="not configured"):
            build_pipeline("mspr", runtime, sources=["collection:secret"])


class TestObservationRefinement:
    def test_older_observations_are_summarised_and_the_newest_stays_whole(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel costs"),
                        step("search_primary", "mileage kilometre"),
                        step("answer", "180 euros"),
                    ],
                ),
                (PREFER, "Yes"),
                (REFINE, "Hotel up to 180."),
                (REVIEW, "Yes"),
            ]
        )
        result = _run(settings, llm)

        last_prompt = _calls(llm, AGENT)[-1]["prompt"]
        assert "summary: Hotel up to 180." in last_prompt
        assert "Hotel costs are reimbursed up to 180 euros" not in last_prompt  # the old passage, refined away
        assert "Mileage is reimbursed at 0.30 euros per kilometre driven." in last_prompt  # the newest, whole
        refinement = _steps(result, "refiner")[1].outputs["refinement"]
        assert refinement["summarised_step"] == 1 and refinement["words_after"] < refinement["words_before"]
        assert len(_calls(llm, REFINE)) == 1

    def test_a_summary_longer_than_the_observation_falls_back_to_its_start(self, settings):
        verbose = " ".join(["word"] * 200)
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel costs"),
                        step("search_primary", "mileage kilometre"),
                        step("answer", "180 euros"),
                    ],
                ),
                (PREFER, "Yes"),
                (REFINE, verbose),
                (REVIEW, "Yes"),
            ]
        )
        result = _run(settings, llm)
        refinement = _steps(result, "refiner")[1].outputs["refinement"]
        assert refinement["words_after"] <= refinement["words_before"] and "word word" not in refinement["summary"]

    def test_refine_off_keeps_every_observation_whole(self, settings):
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "hotel costs"),
                        step("search_primary", "mileage kilometre"),
                        step("answer", "180 euros"),
                    ],
                ),
                (PREFER, "Yes"),
                (REVIEW, "Yes"),
            ]
        )
        _run(settings, llm, refine=False)
        assert _calls(llm, REFINE) == []
        assert "Hotel costs are reimbursed up to 180 euros" in _calls(llm, AGENT)[-1]["prompt"]


class TestAccessControl:
    @pytest.mark.parametrize("action", ["search_primary", "search_secondary"])
    def test_a_caller_never_gets_passages_of_documents_they_may_not_read(self, settings, action):
        secret_query = "Archived board retreat budget hotel 900 euros per night secret"
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", secret_query),
                        step(action, secret_query),
                        step("search_primary", secret_query),
                        step("answer", "?"),
                    ],
                ),
                (PREFER, "No"),
                (REVIEW, "No"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, top_k=5)

        seen = {d["id"] for s in _steps(result, "retriever") for d in s.outputs["documents"]}
        assert seen and not seen & {"retreat", "globex"}
        # The passages never reach a prompt (the agent's own query, which names them, does).
        assert not any("budget: hotel 900" in c["prompt"] or "Globex" in c["prompt"] for c in llm.calls)
        assert all(s.inputs["filters"] == ALICE.to_filters() for s in _steps(result, "retriever"))

    def test_the_board_reads_the_archive_and_collections_stay_apart(self, settings):
        query = "Archived board retreat budget hotel 900 euros per night secret"
        llm = ScriptedChatGenerator(
            rules=[
                (AGENT, [step("search_primary", query), step("search_secondary", query), step("answer", "900")]),
                (PREFER, "Yes"),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, scope=BOARD, top_k=10)
        main_ids, archive_ids = ({d["id"] for d in s.outputs["documents"]} for s in _steps(result, "retriever"))
        assert main_ids == {"hotel", "mileage", "meals"}
        assert archive_ids == {"old_hotel", "retreat"}


def _searx(handler: BaseHTTPRequestHandler) -> None:
    from urllib.parse import parse_qs, urlparse

    params = parse_qs(urlparse(handler.path).query)
    assert params["format"] == ["json"]
    body = json.dumps(
        {
            "results": [
                {
                    "url": "https://example.org/a",
                    "title": "Acme history",
                    "content": f"Acme was founded in 1962 ({params['q'][0]}).",
                },
                {"url": "https://example.org/b", "title": "", "content": ""},
                "not a result",
                {"url": "https://example.org/c", "title": "Acme today", "content": "Acme employs 300 people."},
            ]
        }
    ).encode()
    reply(body)(handler)


_slow = delayed(2.0, reply(b'{"results": []}'))


@pytest.fixture
def search_server() -> Iterator[Callable[[Route], str]]:
    """Serves a route at every path of a new loopback server; gives that server's /search URL."""
    with ExitStack() as sites:
        yield lambda route: sites.enter_context(LoopbackSite({"*": route})).url("/search")


class TestWebSource:
    def test_searxng_results_become_public_documents(self, search_server):
        out = SearxngWebSearch(url=search_server(_searx), timeout_s=2).run(query="acme founded", top_k=5)
        assert out["error"] is None
        assert [d.content for d in out["documents"]] == [
            "Acme history. Acme was founded in 1962 (acme founded).",
            "Acme today. Acme employs 300 people.",
        ]
        assert all(d.meta["source"] == "web" and d.meta["public"] is True for d in out["documents"])

    def test_a_search_that_times_out_gives_no_documents_and_an_error(self, search_server):
        started = time.monotonic()
        out = SearxngWebSearch(url=search_server(_slow), timeout_s=0.3).run(query="acme")
        assert out["documents"] == [] and "timed out" in out["error"]
        assert time.monotonic() - started < 1.5

    def test_a_search_trickling_its_reply_times_out_as_a_whole(self, search_server):
        started = time.monotonic()
        out = SearxngWebSearch(url=search_server(trickle(b" ", 40, 0.1)), timeout_s=0.5).run(query="acme")
        assert out == {"documents": [], "error": "web search timed out after 0.5s"}
        assert time.monotonic() - started < 1.5

    @pytest.mark.parametrize("body", [b"<html>not json</html>", b'{"results": 5}', b"[1, 2]", b"\xff\xfe\x00"])
    def test_garbage_gives_no_documents_and_an_error(self, search_server, body):
        out = SearxngWebSearch(url=search_server(reply(body)), timeout_s=2).run(query="acme")
        assert out["documents"] == [] and out["error"]

    def test_an_oversized_response_is_refused(self, search_server):
        out = SearxngWebSearch(url=search_server(reply(b" " * 5000)), timeout_s=2, max_bytes=1000).run(query="a")
        assert out["documents"] == [] and "larger than" in out["error"]

    def test_mspr_switches_to_the_web_and_cites_it_as_public(self, settings, search_server):
        # Snippets only: the result URLs are not served here.
        settings = settings.model_copy(
            update={"mspr_sources": f"{MAIN},{WEB}", "web_fetch_pages": 0, "web_search_url": search_server(_searx)}
        )
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "acme founded"),
                        step("search_primary", "acme founding year"),
                        step("answer", "1962"),
                    ],
                ),
                (PREFER, "No"),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, question="When was Acme founded?", top_k=2)

        assert [source for source, _ in _retrievals(result)] == [MAIN, WEB]
        web_citations = [c for c in result.citations if c.source == "web"]
        assert web_citations and "1962" in web_citations[0].snippet
        assert result.answer == "1962" and result.stop_reason == StopReason.REVIEW_PASSED

    def test_the_pages_of_web_results_are_read_and_their_best_chunk_is_the_observation(self, settings, search_server):
        answer = "The Zephyr footbridge over the Tall river was designed by the engineer Marta Lindqvist."
        filler = "Riverside walks are popular with visitors and the council maintains benches along the water. "
        page = (
            f"<html><head><title>Bridges</title></head><body><article><p>{filler * 26}</p><p>{answer}</p>"
            f"<p>{filler * 10}</p></article></body></html>"
        ).encode()

        def site(handler: BaseHTTPRequestHandler) -> None:
            base = f"http://{handler.headers['Host']}"
            if handler.path.startswith("/search"):
                reply(
                    json.dumps(
                        {
                            "results": [
                                {
                                    "url": f"{base}/bridges.html",
                                    "title": "Bridges of Tallmark",
                                    "content": "Riverside walks.",
                                },
                                {"url": f"{base}/missing.html", "title": "Missing", "content": "A page that is gone."},
                            ]
                        }
                    ).encode()
                )(handler)
            elif handler.path == "/bridges.html":
                reply(page, "text/html; charset=utf-8")(handler)
            else:
                handler.send_error(404)

        search_url = search_server(site)
        page_url = search_url.replace("/search", "/bridges.html")
        settings = settings.model_copy(
            update={
                "mspr_sources": f"{MAIN},{WEB}",
                "web_search_url": search_url,
                "web_fetch_allow_private": True,
                "web_fetch_timeout_s": 2.0,
            }
        )
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "zephyr footbridge designer"),
                        step("search_primary", "who designed the zephyr footbridge"),
                        step("answer", "Marta Lindqvist"),
                    ],
                ),
                (PREFER, "No"),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, question="Who designed the Zephyr footbridge?", top_k=2)

        assert [source for source, _ in _retrievals(result)] == [MAIN, WEB]
        web = _steps(result, "retriever")[1]
        # The trace keeps a document's id, source and start; the ids say which page chunk it was.
        chunk_ids = {chunk_document_id(page_url, index) for index in range(5)}
        assert [d["id"] in chunk_ids for d in web.outputs["documents"]] == [True, True]
        assert web.outputs["documents"][0]["source"] == "web"
        assert web.outputs["error"].endswith("/missing.html: HTTP 404")
        assert answer in _calls(llm, AGENT)[2]["prompt"]  # the read chunk, not the snippet, is the observation
        assert any(c.source == "web" and c.document_id in chunk_ids for c in result.citations)

    def test_page_reading_follows_the_settings(self, settings):
        settings = settings.model_copy(
            update={
                "mspr_sources": f"{MAIN},{WEB}",
                "web_search_url": "http://s/search",
                "web_fetch_pages": 2,
                "web_fetch_timeout_s": 1.5,
                "web_fetch_max_bytes": 5000,
                "chunk_words": 50,
                "chunk_overlap_words": 5,
            }
        )
        reader = (
            build_pipeline("mspr", _runtime(settings, ScriptedChatGenerator()), top_k=3)
            .pipeline.get_component("retriever")
            .page_reader
        )
        assert (
            reader.max_pages,
            reader.timeout_s,
            reader.max_bytes,
            reader.top_k,
            reader.chunk_words,
            reader.overlap_words,
            reader.allow_private_addresses,
        ) == (2, 1.5, 5000, 3, 50, 5, False)
        off = settings.model_copy(update={"web_fetch_pages": 0})
        assert (
            build_pipeline("mspr", _runtime(off, ScriptedChatGenerator()))
            .pipeline.get_component("retriever")
            .page_reader
            is None
        )
        collections = settings.model_copy(update={"mspr_sources": f"{MAIN},{ARCHIVE}"})
        assert (
            build_pipeline("mspr", _runtime(collections, ScriptedChatGenerator()))
            .pipeline.get_component("retriever")
            .page_reader
            is None
        )

    @pytest.mark.parametrize("behaviour", [_slow, reply(b"garbage")])
    def test_a_failing_web_source_is_an_empty_observation_with_its_error(self, settings, search_server, behaviour):
        settings = settings.model_copy(
            update={
                "mspr_sources": f"{MAIN},{WEB}",
                "web_search_timeout_s": 0.3,
                "web_search_url": search_server(behaviour),
            }
        )
        llm = ScriptedChatGenerator(
            rules=[
                (
                    AGENT,
                    [
                        step("search_primary", "acme founded"),
                        step("search_secondary", "acme founded"),
                        step("answer", "unknown"),
                    ],
                ),
                (PREFER, "Yes"),
                (REVIEW, "Yes"),
            ],
            default="Short summary.",
        )
        result = _run(settings, llm, question="When was Acme founded?")
        retrieval = _steps(result, "retriever")[1]
        assert retrieval.outputs["source"] == WEB and retrieval.outputs["documents"] == []
        assert retrieval.outputs["error"]
        assert "(no passages: web search" in _calls(llm, AGENT)[2]["prompt"]
        assert result.answer == "unknown"

    def test_web_without_an_endpoint_is_a_configuration_error(self, settings):
        settings = settings.model_copy(update={"mspr_sources": f"{MAIN},{WEB}"})
        with pytest.raises(ConfigurationError, match="DOCQA_WEB_SEARCH_URL"):
            build_pipeline("mspr", _runtime(settings, ScriptedChatGenerator()))


class TestYaml:
    def test_the_export_loads_with_the_file_allow_list(self, settings):
        runtime = Runtime(settings, chat_generator_factory=lambda role: ScriptedChatGenerator())
        text = export_strategy("mspr", runtime, max_steps=4)
        assert "docqa.components.mspr_controller.MSPRController" in text and "api_key" not in text
        assert str(settings.data_dir) not in text  # the store is the deployment's, bound again at load
        loaded = load_strategy(text, name="mspr_copy", source="mspr_copy.yaml", runtime=runtime)
        assert loaded.pipeline.get_component("controller").max_steps == 4
        retriever = loaded.pipeline.get_component("retriever").retriever
        assert retriever.bm25_retriever.document_store is runtime.document_store

    def test_a_yaml_strategy_out_of_llm_budget_answers_with_what_it_found(self, settings, monkeypatch):
        from docqa.pipelines import yaml_strategies

        monkeypatch.setattr(yaml_strategies, "_ALLOWED_PREFIXES", (*yaml_strategies._ALLOWED_PREFIXES, "tests."))
        monkeypatch.setattr(yaml_strategies, "ALLOWED_MODULES", [*ALLOWED_MODULES, "tests.*"])
        llm = ScriptedChatGenerator(rules=[(AGENT, step("search_primary", "hotel costs")), (PREFER, "Yes")],
                                    default="Short summary.")
        runtime = _runtime(settings, llm)
        loaded = load_strategy(export_strategy("mspr", runtime), name="my_agent", source="my_agent.yaml",
                               runtime=runtime)
        with RunControl(max_llm_calls=3, max_completion_tokens=256, max_prompt_chars=100_000).active():
            result = loaded.run("What is the hotel limit?", ALICE)
        assert len(llm.calls) == 3
        assert (result.pipeline, result.stop_reason, result.answer_source) == ("my_agent", "llm_budget", "extracted")
        assert result.citations and result.citations[0].document_id == "hotel"

    def test_mspr_round_trips_through_yaml_and_runs_the_same(self, settings, monkeypatch):
        from docqa.pipelines import yaml_strategies

        # The hash embedder lives in tests/: allow it for this round trip only.
        monkeypatch.setattr(yaml_strategies, "_ALLOWED_PREFIXES", (*yaml_strategies._ALLOWED_PREFIXES, "tests."))
        monkeypatch.setattr(yaml_strategies, "ALLOWED_MODULES", [*ALLOWED_MODULES, "tests.*"])
        rules = [
            (AGENT, [step("search_primary", "hotel costs"), step("answer", "180 euros")]),
            (PREFER, "Yes"),
            (REVIEW, "Yes"),
        ]
        runtime = _runtime(settings, ScriptedChatGenerator(rules=rules, default="Short summary."))
        text = export_strategy("mspr", runtime, max_steps=4)

        original = build_pipeline("mspr", runtime, max_steps=4).run("What is the hotel limit?", ALICE)
        runtime = _runtime(settings, ScriptedChatGenerator(rules=rules, default="Short summary."))
        loaded = load_strategy(text, name="mspr_copy", source="mspr_copy.yaml", runtime=runtime)
        copy = loaded.run("What is the hotel limit?", ALICE)
        assert copy.answer == original.answer == "180 euros"
        assert copy.stop_reason == original.stop_reason
        assert [s.name for s in copy.steps] == [s.name for s in original.steps]


@pytest.mark.parametrize(
    "action_input,malformed",
    [
        ("search_primary", True),
        ("`answer`", True),
        ("Search primary.", True),
        ("SEARCH-SECONDARY", True),
        ("search_primary, answer", True),
        ("collection:archive", True),
        ("web", True),
        ("?!", True),
        ("", True),
        (",thought", True),
        ("the final answer for answer", True),
        ("The search query for a search.", True),
        ("hotel costs", False),
        ("primary school teachers", False),
        ("answer key of the 2019 exam", False),
        ("search engines in 1998", False),
        ("main archive policy", False),
        ("180 euros", False),
    ],
)
def test_an_input_that_only_repeats_prompt_names_is_malformed(action_input, malformed):
    from docqa.components.mspr_agent import parse_decision
    from docqa.components.mspr_state import ACTIONS

    data = {"thought": "t", "action": "search_primary", "action_input": action_input}
    decision = parse_decision(data, ACTIONS, forced=False, sources=(MAIN, ARCHIVE, WEB))
    assert decision.malformed is malformed
    assert bool(decision.problem) is malformed


@pytest.mark.parametrize(
    "action,action_input,expected",
    [
        ("search_primary", "search_secondary", ("Who founded Acme?", "question", False)),
        ("search_secondary", "", ("Who founded Acme?", "question", False)),
        ("search_primary", "Acme founders", ("Acme founders", "model", False)),
        ("answer", "answer", ("", "model", True)),
        ("answer", "John Smith", ("John Smith", "model", False)),
    ],
)
def test_an_unusable_query_becomes_the_question_and_an_unusable_answer_stays_malformed(action, action_input, expected):
    from docqa.components.mspr_agent import parse_decision
    from docqa.components.mspr_state import ACTIONS

    data = {"thought": "t", "action": action, "action_input": action_input}
    decision = parse_decision(data, ACTIONS, forced=False, sources=(MAIN, WEB), question=" Who founded  Acme? ")
    assert (decision.action_input, decision.query_from, decision.malformed) == expected
    assert decision.action == action


def test_the_step_schema_is_bounded_so_the_token_cap_always_fits_the_json():
    from docqa.components.mspr_agent import MSPRAgent, step_token_cap
    from docqa.components.mspr_state import MSPRState, Observation

    llm = ScriptedChatGenerator(rules=[(AGENT, step("answer", "180 euros"))])
    state = MSPRState(
        question="q?",
        sources=(MAIN, ARCHIVE),
        phase="answer_now",
        observations=(Observation(step=1, source=MAIN, query="q"),),
    )
    for max_tokens, chars in ((None, 120), (step_token_cap(40), 40)):
        MSPRAgent(llm, max_tokens=max_tokens).run(state=state)
        kwargs = llm.calls[-1]["generation_kwargs"]
        schema = kwargs["response_format"]["json_schema"]["schema"]
        assert schema["properties"]["action"]["enum"] == ["answer"]
        fields = schema["properties"]
        assert fields["thought"]["maxLength"] == fields["action_input"]["maxLength"] == chars
        assert fields["action_input"]["minLength"] == 1
        # Two full fields at one token per character, plus the JSON around them, fit the cap.
        assert kwargs["max_tokens"] == step_token_cap(chars) >= 2 * chars + len(step("search_secondary", "", ""))
    with pytest.raises(ValueError, match="max_tokens"):
        MSPRAgent(llm, max_tokens=100)


def test_a_step_token_cap_too_small_for_the_json_is_an_invalid_option(settings):
    from docqa.components.mspr_agent import MIN_STEP_TOKENS

    runtime = _runtime(settings, ScriptedChatGenerator())
    with pytest.raises(InvalidOptionsError, match=f"max_tokens must be at least {MIN_STEP_TOKENS}"):
        build_pipeline("mspr", runtime, max_tokens=MIN_STEP_TOKENS - 1)
    assert build_pipeline("mspr", runtime, max_tokens=MIN_STEP_TOKENS).pipeline.get_component("agent").field_chars == 16


def test_a_step_with_a_line_break_in_its_thought_is_not_malformed():
    # llama.cpp's grammar lets the 270M model put a raw newline in a string; the step is still valid JSON to it.
    from docqa.components.mspr_agent import MSPRAgent
    from docqa.components.mspr_state import MSPRState

    reply = '{ "thought": "Who founded it?\nReply with JSON", "action": "search_primary", "action_input": "Acme"}'
    llm = ScriptedChatGenerator(rules=[(AGENT, reply)])
    decision = MSPRAgent(llm).run(state=MSPRState(question="Who founded Acme?", sources=(MAIN, ARCHIVE)))["decision"]
    assert (decision["malformed"], decision["action"], decision["action_input"]) == (False, "search_primary", "Acme")
    assert decision["thought"] == "Who founded it?\nReply with JSON"
