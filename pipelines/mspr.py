"""MSPR (multi-source adaptive retrieval; "Towards Multi-Source Retrieval-Augmented Generation via Synergizing
Reasoning and Preference-Driven Retrieval"): explore the primary source first, switch sources only when it stops
helping, review the answer.

A `haystack.Pipeline` loop run through `HaystackStrategy`. The state (`MSPRState`) goes round the loop; the
controller routes on what just happened:

    question -> controller -> agent (ARA: thought + action + query, JSON) ---------------------> joiner
                     |-> retriever (query, source, filters) -> refiner (ORS) ---------------> joiner
                     |-> judge (PRS: did the primary add information?) ---------------------> joiner
                     |-> reviewer (CAR) ----------------------------------------------------> joiner
                     `-> answer, cited_documents, stop_reason        joiner -> controller.state

The retriever is a `SuperComponent` (`MultiSourceRetriever`): a `ConditionalRouter` on the source sends the query
to the collection retriever (the access filters AND the collection, then the hybrid retriever's parts), to the
web source's search and page reader, or to the unconfigured source's error; each part is its own span and step.
The phases the controller routes on are `Phase`, its stop reasons `StopReason`.

Sources come from DOCQA_MSPR_SOURCES (`collection:NAME`, `web`, `web:serperdev`, `web:searchapi`), in order of
preference; the caller may pick and order a subset (`sources` option). Collections are read through the
caller's access filters AND'ed with the collection; web results (`web`: the SearXNG-compatible
DOCQA_WEB_SEARCH_URL; `web:serperdev` / `web:searchapi`: Haystack's web search components, keys in
SERPERDEV_API_KEY / SEARCHAPI_API_KEY) are public and cited with `source: web`; the pages of the first
DOCQA_WEB_FETCH_PAGES results are read, converted and chunked like uploads (`WebPageReader`).

Usage:
    pipeline = build_pipeline("mspr", runtime, max_steps=5, max_reviews=1)
    result = pipeline.run("Who founded the company that makes X?", AccessScope("acme", frozenset({"alice"})))
    result.stop_reason  # "review_passed" | "answered" | "answered_after_review" | "max_steps" | "malformed_action"
"""

from __future__ import annotations

from typing import Any

from haystack import Pipeline
from haystack.components.joiners import BranchJoiner

from docqa.components.answer_reviewer import AnswerReviewer
from docqa.components.haystack_web_search import WEB_PROVIDER_PREFIX, WEB_PROVIDER_SOURCES, HaystackWebSearch
from docqa.components.mspr_agent import MIN_STEP_TOKENS, MSPRAgent
from docqa.components.mspr_controller import MSPRController
from docqa.components.mspr_state import MSPRState
from docqa.components.multi_source_retriever import MultiSourceRetriever, parse_sources
from docqa.components.observation_refiner import ObservationRefiner
from docqa.components.prompt_templates import load_prompt, prompt_fingerprint
from docqa.components.prompted_llm import inner_step_kinds
from docqa.components.searxng_web_search import WEB_SOURCE, SearxngWebSearch
from docqa.components.source_preference_judge import SourcePreferenceJudge
from docqa.components.web_page_reader import WebPageReader
from docqa.errors import ConfigurationError, InvalidOptionsError
from docqa.llm.role_generator import RoleChatGenerator
from docqa.pipelines.haystack_strategy import HaystackStrategy
from docqa.pipelines.options import MSPROptions
from docqa.pipelines.registry import register
from docqa.runtime import Runtime

KINDS = {"controller": "control", "joiner": "control", "agent": "reasoning", "retriever": "retrieval",
         "refiner": "summary", "judge": "grading", "reviewer": "grading"}


def max_component_runs(max_steps: int, max_reviews: int, max_action_retries: int) -> int:
    """A bound on any component's runs: each agent step (and retry) leads to at most 4 more controller runs."""
    return 4 * (max_steps + max_reviews) * (1 + max_action_retries) + 4


class MSPRPipeline(HaystackStrategy):
    """The MSPR graph (see the module docstring) as a docqa strategy."""

    def __init__(self, *, controller: MSPRController, agent: MSPRAgent, retriever: MultiSourceRetriever,
                 refiner: ObservationRefiner, judge: SourcePreferenceJudge, reviewer: AnswerReviewer,
                 max_question_chars: int, models: dict[str, str | None] | None = None) -> None:
        if controller.sources != retriever.sources:
            raise ValueError("the controller and the retriever must have the same sources")
        pipeline = Pipeline(max_runs_per_component=max_component_runs(
            controller.max_steps, controller.max_reviews, controller.max_action_retries))
        for name, instance in (("controller", controller), ("joiner", BranchJoiner(MSPRState)), ("agent", agent),
                               ("retriever", retriever), ("refiner", refiner), ("judge", judge),
                               ("reviewer", reviewer)):
            pipeline.add_component(name, instance)
        # The controller hands its state to the step its phase names; every step hands a new state back.
        for sender, receiver in (
            ("controller.agent", "agent.state"),
            *((f"controller.{name}", f"retriever.{name}") for name in ("query", "source")),
            ("controller.retrieval", "refiner.state"),
            *((f"retriever.{name}", f"refiner.{name}") for name in ("documents", "source", "error")),
            ("controller.judge", "judge.state"),
            ("controller.review", "reviewer.state"),
            *((f"{step}.state", "joiner.value") for step in ("agent", "refiner", "judge", "reviewer")),
            ("joiner.value", "controller.state"),
        ):
            pipeline.connect(sender, receiver)
        super().__init__(
            "mspr", pipeline, models=models, max_question_chars=max_question_chars,
            kinds={**inner_step_kinds(pipeline), **KINDS},
            summary={
                "top_k": retriever.top_k, "sources": list(controller.sources), "max_steps": controller.max_steps,
                "max_reviews": controller.max_reviews, "refine": refiner.enabled,
                "prompts": {name: prompt_fingerprint(template) for name, template in (
                    ("mspr_agent", agent.prompt_template), ("mspr_refine", refiner.prompt_template),
                    ("mspr_prefer", judge.prompt_template), ("mspr_review", reviewer.prompt_template))},
            },
        )


def configured_sources(settings: Any, requested: list[str] | None) -> tuple[str, ...]:
    """The run's sources: the configured ones, or the caller's subset of them (in the caller's order).

    :raises ConfigurationError: DOCQA_MSPR_SOURCES is invalid, or names `web` without DOCQA_WEB_SEARCH_URL.
    :raises InvalidOptionsError: the caller asked for a source that is not configured.
    """
    try:
        configured = parse_sources(settings.mspr_sources)
    except ValueError as exc:
        raise ConfigurationError(f"DOCQA_MSPR_SOURCES: {exc}") from None
    if WEB_SOURCE in configured and not settings.web_search_url:
        raise ConfigurationError("DOCQA_MSPR_SOURCES lists `web` but DOCQA_WEB_SEARCH_URL is not set")
    for source in configured:
        if source in WEB_PROVIDER_SOURCES:
            # Fails here, with the variable to set, rather than at the first question that reaches the source.
            _provider_search(source, settings.top_k)
    if requested is None:
        return configured
    try:
        chosen = parse_sources(requested)
    except ValueError as exc:
        raise InvalidOptionsError(f"invalid options for pipeline 'mspr': sources: {exc}") from None
    unknown = [s for s in chosen if s not in configured]
    if unknown:
        raise InvalidOptionsError(f"invalid options for pipeline 'mspr': sources: {', '.join(unknown)} not "
                                  f"configured (DOCQA_MSPR_SOURCES: {', '.join(configured)})")
    return chosen


def _provider_search(source: str, top_k: int) -> HaystackWebSearch:
    try:
        return HaystackWebSearch(provider=source[len(WEB_PROVIDER_PREFIX):], top_k=top_k)
    except ConfigurationError as exc:
        raise ConfigurationError(f"DOCQA_MSPR_SOURCES lists `{source}` but {exc}") from None


def _page_reader(settings: Any, sources: tuple[str, ...], top_k: int) -> WebPageReader | None:
    """Reads the pages behind web results with the upload chunking; None without a web source or with
    DOCQA_WEB_FETCH_PAGES=0."""
    if settings.web_fetch_pages < 1 or not any(s == WEB_SOURCE or s in WEB_PROVIDER_SOURCES for s in sources):
        return None
    return WebPageReader(max_pages=settings.web_fetch_pages, timeout_s=settings.web_fetch_timeout_s,
                         max_bytes=settings.web_fetch_max_bytes, top_k=top_k, chunk_words=settings.chunk_words,
                         overlap_words=settings.chunk_overlap_words,
                         allow_private_addresses=settings.web_fetch_allow_private,
                         max_uncompressed_bytes=settings.convert_max_uncompressed_bytes,
                         max_convert_memory_mb=settings.convert_max_memory_mb)


def _role(runtime: Runtime, role: str) -> RoleChatGenerator:
    # The YAML names the role, never an endpoint (see RoleChatGenerator).
    return RoleChatGenerator(role, runtime.chat_generator(role))


@register("mspr", "MSPR: an agent searches the preferred source, switches when it stops helping, reviews "
          "its answer.", MSPROptions)
def build_mspr(runtime: Runtime, top_k: int | None = None, max_steps: int | None = None,
               max_reviews: int | None = None, max_tokens: int | None = None, sources: list[str] | None = None,
               refine: bool = True) -> MSPRPipeline:
    """
    :param runtime: Shared collaborators; roles "reasoner" (agent), "summarizer" (ORS), "grader" (PRS, CAR).
    :param top_k: Passages per retrieval (settings.top_k by default).
    :param max_steps: AWI (DOCQA_MSPR_MAX_STEPS by default).
    :param max_reviews: SRT (DOCQA_MSPR_MAX_REVIEWS by default).
    :param max_tokens: Token cap of one agent step (its JSON, answer included).
    :param sources: A subset of the configured sources, in the order to prefer them.
    :param refine: False keeps every observation whole (ORS off).
    """
    settings = runtime.settings
    top_k = top_k or settings.top_k
    if max_tokens is not None and max_tokens < MIN_STEP_TOKENS:
        # The agent's JSON step needs room for a thought and a query (see MSPRAgent).
        raise InvalidOptionsError(f"invalid options for pipeline 'mspr': max_tokens must be at least {MIN_STEP_TOKENS}")
    chosen = configured_sources(settings, sources)
    prompts = settings.prompts_dir
    web = None
    if WEB_SOURCE in chosen:
        web = SearxngWebSearch(url=settings.web_search_url, timeout_s=settings.web_search_timeout_s,
                               max_bytes=settings.web_search_max_bytes, top_k=top_k)
    return MSPRPipeline(
        controller=MSPRController(
            sources=list(chosen),
            max_steps=max_steps or settings.mspr_max_steps,
            max_reviews=settings.mspr_max_reviews if max_reviews is None else max_reviews,
        ),
        agent=MSPRAgent(_role(runtime, "reasoner"), prompt_template=load_prompt("mspr_agent", prompts),
                        max_tokens=max_tokens),
        retriever=MultiSourceRetriever(runtime.retriever(top_k), sources=list(chosen), web_search=web, top_k=top_k,
                                       web_searches={s: _provider_search(s, top_k) for s in chosen
                                                     if s in WEB_PROVIDER_SOURCES},
                                       page_reader=_page_reader(settings, chosen, top_k)),
        refiner=ObservationRefiner(_role(runtime, "summarizer"),
                                   prompt_template=load_prompt("mspr_refine", prompts), enabled=refine),
        judge=SourcePreferenceJudge(_role(runtime, "grader"),
                                    prompt_template=load_prompt("mspr_prefer", prompts)),
        reviewer=AnswerReviewer(_role(runtime, "grader"),
                                prompt_template=load_prompt("mspr_review", prompts)),
        max_question_chars=settings.max_question_chars,
        models={role: settings.endpoint_for(role).model for role in ("reasoner", "summarizer", "grader")},
    )
