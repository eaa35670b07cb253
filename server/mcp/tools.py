"""The docqa MCP tools: `ask`, `search`, `read_passage` and `list_strategies`, each run as the caller the
transport authenticated (`CallerOf`), with the API's access scope, limits and audit trail.

Usage:
    server = MCPServer("docqa")
    DocqaTools(context, caller_of).register(server)
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from docqa.access import COLLECTION_FIELD, DEFAULT_COLLECTION, collection_filter, restrict
from docqa.accounts.identity import Caller
from docqa.audit.events import PASSAGE_READ, PASSAGES_SEARCHED
from docqa.audit.scrub import mask_secrets
from docqa.pipelines.base import validate_question
from docqa.pipelines.registry import available_pipelines
from docqa.questions import AUTO, Ask, Asker
from docqa.result import PipelineResult
from docqa.server.api_errors import ApiError
from docqa.server.context import ServerContext
from docqa.server.mcp.access_events import CHANNEL, record_read
from docqa.server.mcp.errors import tool_error, tool_errors
from docqa.server.mcp.progress import StepProgress
from docqa.server.routes.passages import PassageContext, passage_context
from docqa.server.schemas import OptionValue

MAX_TOP_K = 50
# Resolves who is calling a tool; raises a ToolError (or an ApiError) when nobody may.
CallerOf = Callable[[Context], Caller]


class CitationOut(BaseModel):
    chunk_id: str = Field(description="The cited passage's id: read it in context with `read_passage`.")
    source: str | None = Field(default=None, description="The document it comes from (file name or path).")
    snippet: str = Field(default="", description="The cited text.")
    score: float | None = None


class AskResult(BaseModel):
    answer: str
    answer_source: str = Field(description=(
        "'model' (written by the model and checked against the passages), 'extracted' (the model gave no usable "
        "answer: `answer` quotes the best-matching passages) or 'none'."))
    answer_note: str | None = Field(default=None, description="Why the answer is not the model's, when it is not.")
    citations: list[CitationOut] = Field(description="The passages the answer cites, in the order of its [n] marks.")
    stop_reason: str | None = Field(default=None, description="Why the strategy stopped (e.g. 'answered').")
    strategy: str = Field(description="The strategy that answered (what `auto` chose).")
    selection: dict[str, Any] = Field(description="How the strategy was selected.")
    trace_id: str | None = Field(description="The audit trace of this run (auditors read it at /v1/traces/{id}).")
    llm_calls: int
    total_tokens: int


class PassageOut(BaseModel):
    chunk_id: str
    content: str
    source: str | None
    title: str | None
    collection: str
    score: float | None = Field(description="Fused retrieval score (reciprocal rank fusion): higher is better.")


class SearchResult(BaseModel):
    passages: list[PassageOut] = Field(description="Best first; only passages the caller may read.")


class StrategyOut(BaseModel):
    name: str
    description: str
    options: dict[str, Any] = Field(description="JSON schema of the strategy's options (the `ask` tool's options).")


class StrategyList(BaseModel):
    strategies: list[StrategyOut]


def ask_result(result: PipelineResult, selection: dict[str, Any]) -> AskResult:
    return AskResult(
        answer=result.answer, answer_source=result.answer_source, answer_note=result.answer_note,
        citations=[CitationOut(chunk_id=c.document_id, source=c.source, snippet=c.snippet, score=c.score)
                   for c in result.citations],
        stop_reason=result.stop_reason, strategy=result.pipeline, selection=selection, trace_id=result.trace_id,
        llm_calls=result.totals.llm_calls, total_tokens=result.totals.total_tokens,
    )


def _passage(doc: Any) -> PassageOut:
    meta = doc.meta or {}
    return PassageOut(chunk_id=doc.id, content=doc.content or "", source=meta.get("source") or meta.get("title"),
                      title=meta.get("title"), collection=meta.get(COLLECTION_FIELD) or DEFAULT_COLLECTION,
                      score=doc.score)


def _strategy(name: str, description: str, options: type[BaseModel] | None) -> StrategyOut:
    schema = options.model_json_schema() if options is not None else {"type": "object", "properties": {}}
    return StrategyOut(name=name, description=description, options=schema)


class DocqaTools:
    """The tools of one worker's `ServerContext`; `caller_of(ctx)` names the caller of each call."""

    def __init__(self, context: ServerContext, caller_of: CallerOf) -> None:
        self.context = context
        self.caller_of = caller_of
        self._retriever: Any = None
        self._retriever_lock = threading.Lock()
        # The strategies' option schemas, built once per set of registered strategies.
        self._strategies: tuple[tuple[str, ...], StrategyList] | None = None

    def register(self, server: MCPServer) -> None:
        read_only = ToolAnnotations(readOnlyHint=True, openWorldHint=False)
        server.add_tool(self.ask, name="ask", title="Ask docqa", annotations=ToolAnnotations(
            readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False), description=(
            "Answer a question from the organisation's documents you may read, with citations. The answer is "
            "checked against the cited passages; `answer_source` says whether it is the model's or quoted from the "
            "passages. Every call is an audited run: `trace_id` names its trace. Progress notifications announce "
            "each step as it finishes; cancelling the call stops the run."))
        server.add_tool(self.search, name="search", title="Search passages", annotations=read_only, description=(
            "Find the passages of documents you may read that best match a query (keyword and semantic search "
            "fused), best first, with scores. No model is called. Read a passage in context with `read_passage`."))
        server.add_tool(self.read_passage, name="read_passage", title="Read a passage in context",
                        annotations=read_only, description=(
            "A passage (by the chunk id `ask` cites or `search` returns) with the passages before and after it in "
            "its document, those you may read. A passage you may not read is reported as not found."))
        server.add_tool(self.list_strategies, name="list_strategies", title="List answering strategies",
                        annotations=read_only, description=(
            "The strategies `ask` can use, with what each is for and the options it takes; `auto` picks one per "
            "question."))

    async def ask(
        self,
        question: Annotated[str, Field(min_length=1, max_length=100_000, description="The question.")],
        ctx: Context,
        strategy: Annotated[str, Field(min_length=1, max_length=64, description=(
            "A strategy name from `list_strategies`, or 'auto' to let docqa choose."))] = AUTO,
        options: Annotated[dict[str, OptionValue] | None, Field(description=(
            "The strategy's options, e.g. {\"top_k\": 5}; see `list_strategies`."))] = None,
        as_of: Annotated[str | None, Field(max_length=40, description=(
            "atrag: the ISO instant relative time phrases count back from."))] = None,
        patient_id: Annotated[str | None, Field(max_length=200, description=(
            "atrag: the patient a time-scoped question is about."))] = None,
    ) -> AskResult:
        context = self.context
        run_inputs = {name: value for name, value in (("as_of", as_of), ("patient_id", patient_id))
                      if value is not None}
        with tool_errors():
            caller = self.caller_of(ctx)
            # The question service masks, validates and records it exactly as for the API.
            ask = Ask(question, strategy=strategy, options=dict(options or {}), inputs=run_inputs, channel=CHANNEL)
            async with StepProgress(ctx) as progress:
                answer = await context.questions.ask(ask, Asker.of(caller), on_step=progress.on_step)
        return ask_result(answer.result, answer.selection)

    async def search(
        self,
        query: Annotated[str, Field(min_length=1, max_length=100_000, description="What to look for.")],
        ctx: Context,
        top_k: Annotated[int, Field(ge=1, le=MAX_TOP_K, description="How many passages to return.")] = 5,
        collection: Annotated[str | None, Field(min_length=1, max_length=64, description=(
            "Only passages of this collection (documents are uploaded into one; the default is 'main')."))] = None,
    ) -> SearchResult:
        from docqa.ingestion.pipeline import check_collection_name

        settings = self.context.settings
        with tool_errors():
            caller = self.caller_of(ctx)
            cleaned = validate_question(mask_secrets(query, settings), settings.max_question_chars)
            narrowed = None
            if collection is not None:
                narrowed = collection_filter(check_collection_name(collection))
            # The caller's scope is always part of the filter: nothing they may not read is ever retrieved.
            filters = restrict(caller.scope(), narrowed)
            try:
                documents = await asyncio.wait_for(asyncio.to_thread(self._retrieve, cleaned, top_k, filters),
                                                   timeout=settings.query_timeout_s)
            except TimeoutError:
                raise tool_error("timeout", f"the search took longer than {settings.query_timeout_s:g} s") from None
        found = SearchResult(passages=[_passage(doc) for doc in documents])
        await record_read(settings, caller, PASSAGES_SEARCHED, f"collection:{collection or '*'}", {
            "query": cleaned, "top_k": top_k, "chunk_ids": [p.chunk_id for p in found.passages]})
        return found

    def _retrieve(self, query: str, top_k: int, filters: dict[str, Any]) -> list[Any]:
        with self._retriever_lock:
            if self._retriever is None:
                self._retriever = self.context.runtime.retriever(top_k=MAX_TOP_K)
                self._retriever.warm_up()
        return list(self._retriever.run(query=query, filters=filters, top_k=top_k)["documents"])

    async def read_passage(
        self,
        chunk_id: Annotated[str, Field(min_length=1, max_length=200, description=(
            "A passage id: a citation's `chunk_id` from `ask`, or a `search` result's."))],
        ctx: Context,
    ) -> PassageContext:
        settings = self.context.settings
        with tool_errors():
            caller = self.caller_of(ctx)
            try:
                # The route's own function: the same store filters, so the same 404 for a passage the caller may
                # not read.
                shown = await asyncio.to_thread(passage_context, chunk_id, caller, self.context)
            except ApiError as refused:
                await record_read(settings, caller, PASSAGE_READ, f"chunk:{chunk_id}", {"error": refused.code},
                                  succeeded=False)
                raise
        neighbours = [p.id for p in (shown.previous, shown.next) if p is not None]
        await record_read(settings, caller, PASSAGE_READ, f"chunk:{chunk_id}", {"neighbours": neighbours})
        return shown

    async def list_strategies(self, ctx: Context) -> StrategyList:
        with tool_errors():
            self.caller_of(ctx)
        names = tuple(self.context.pipelines.names())
        if self._strategies is None or self._strategies[0] != names:
            specs = {spec.name: spec for spec in available_pipelines()}
            listed = [_strategy(AUTO, "Chooses a strategy for each question from its wording (the default).", None)]
            listed += [_strategy(name, specs[name].description, specs[name].options) for name in names if name in specs]
            self._strategies = (names, StrategyList(strategies=listed))
        return self._strategies[1]
