"""Run evaluation questions through registered strategies, one audited answer per (question, strategy).

Every answer goes through the question service, the same path as `docqa ask` and the HTTP API: each strategy's
options are validated once into its options model (its built pipeline reused for every question), the question
runs as the given `AccessScope` (so it only sees what those principals may read) under the settings' run budget,
and the service commits a normal trace whose `asked_by` is
`eval:<label>`, which is how the trace view tells evaluation traffic apart (its User filter, `GET
/v1/traces?user=eval:<label>`, matches exactly: one run's traces). Results are appended to
`results.jsonl` one line per (question, strategy) as soon as each finishes, so an interrupted run resumes
where it stopped.

Usage:
    records = run_evaluation(runtime, questions, ["standard", "resp"], Path("out"),
                             scope=AccessScope("acme", frozenset({"alice"})), resume=True)
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from docqa.access import AccessScope
from docqa.errors import DocqaError, LLMUnavailableError
from docqa.evaluation.datasets import EvalQuestion
from docqa.evaluation.metrics import (
    answer_accuracy,
    best_scores,
    citation_precision,
    recall_at_k,
    rouge_l,
    set_precision_recall,
    short_answer_recall,
    strip_citation_markers,
)

logger = logging.getLogger(__name__)

RESULTS_FILE = "results.jsonl"
RUN_FILE = "run.json"


@dataclass
class EvalRecord:
    """One question answered by one strategy: the answer, its scores, its cost and its trace."""

    pipeline: str
    question_id: str
    question: str
    answers: list[str]
    prediction: str = ""
    answer_source: str = "model"
    em: float = 0.0
    f1: float = 0.0
    # FlashRAG's acc of the displayed answer (`prediction`, the model's or the extracted one).
    acc: float = 0.0
    rouge_l: float = 0.0
    short_answer_recall: float | None = None
    support_recall: float | None = None
    record_precision: float | None = None
    record_recall: float | None = None
    # Share of the cited passages that are supporting (None: the dataset names none, or nothing is cited).
    citation_precision: float | None = None
    # LLM-as-judge, 0-10 (None: not judged, or the judge's reply was unusable; see judge_error).
    judge_correctness: float | None = None
    judge_completeness: float | None = None
    judge_relevance: float | None = None
    judge_error: str | None = None
    iterations: int = 0
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    words_retrieved: int = 0
    words_to_generator: int = 0
    retrieved_ids: list[str] = field(default_factory=list)
    # What the scores were computed from, so a results file can be rescored without the run (`rescore`).
    cited_ids: list[str] = field(default_factory=list)
    supporting_ids: list[str] = field(default_factory=list)
    wall_s: float = 0.0
    stop_reason: str | None = None
    error: str | None = None
    trace_id: str | None = None

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> EvalRecord:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})


class WordCounter:
    """Words of stored documents by id, fetched once each (steps keep only snippets)."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.words: dict[str, int] = {}

    def __call__(self, ids: Sequence[str]) -> int:
        missing = sorted({i for i in ids if i not in self.words})
        if missing:
            for doc in self.store.filter_documents({"field": "id", "operator": "in", "value": missing}):
                self.words[doc.id] = len((doc.content or "").split())
        return sum(self.words.get(i, 0) for i in ids)


def score(record: EvalRecord, result: Any, question: EvalQuestion, words_of: WordCounter | None,
          recall_k: int | None = None) -> None:
    """Fill a record's answer, scores and cost from a PipelineResult, whatever the strategy."""
    # ConTReGen searches once per tree node, its retriever in a loop with its tree expansion: what it retrieved is
    # the tree's passages (those judged relevant) and an iteration is a node, so its searches are not counted again.
    trees = [s for s in result.steps if s.kind == "tree_expansion"]
    retrievals = [] if trees else [s for s in result.steps if s.kind == "retrieval"]
    retrieved = [d["id"] for s in [*retrievals, *trees] for d in s.outputs.get("documents", []) if isinstance(d, dict)]
    generations = [s for s in result.steps if s.kind in ("generation", "synthesis")]
    calls = generations[-1].outputs.get("llm_calls", []) if generations else []
    prompt = calls[-1].get("prompt", "") if calls and isinstance(calls[-1], dict) else ""
    record.prediction = result.answer or ""
    record.answer_source = getattr(result, "answer_source", "model")
    # Scored without its source markers: "[1]" would otherwise cost every cited answer its exact match.
    said = strip_citation_markers(record.prediction)
    record.em, record.f1 = best_scores(said, question.answers)
    record.rouge_l = rouge_l(said, question.answers)
    record.short_answer_recall = short_answer_recall(said, question.short_answers)
    record.support_recall = recall_at_k(retrieved, question.supporting_ids, recall_k)
    record.cited_ids = list(dict.fromkeys(c.document_id for c in result.citations))
    record.supporting_ids = list(question.supporting_ids)
    score_displayed_answer(record)
    if question.record_ids is not None:
        record.record_precision, record.record_recall = set_precision_recall(record.cited_ids, question.record_ids)
    record.iterations = len(retrievals) + sum(1 for s in result.steps if s.kind == "tree_node")
    record.llm_calls = result.totals.llm_calls
    record.prompt_tokens = result.totals.prompt_tokens
    record.completion_tokens = result.totals.completion_tokens
    record.retrieved_ids = list(dict.fromkeys(retrieved))
    record.words_retrieved = words_of(retrieved) if words_of is not None else 0
    record.words_to_generator = len(prompt.split())
    record.stop_reason = result.stop_reason
    record.trace_id = result.trace_id


def score_displayed_answer(record: EvalRecord) -> None:
    """The scores of what the user was shown, from the record alone: `acc` of the answer (without its source
    markers) against the accepted answers, and the precision of its citations against the supporting ids."""
    record.acc = answer_accuracy(strip_citation_markers(record.prediction), record.answers)
    record.citation_precision = citation_precision(record.cited_ids, record.supporting_ids)


def judge_record(judge: Any, record: EvalRecord) -> None:
    """Fill the judge scores of an answered record; an unusable reply or a failed call leaves them missing."""
    try:
        scores = judge.run(question=record.question, answer=strip_citation_markers(record.prediction),
                           references=record.answers)["scores"]
    except LLMUnavailableError:
        raise  # as for the strategies: every later judgement would fail too; resume once it is back
    except Exception as exc:
        record.judge_error = f"{type(exc).__name__}: {exc}"
        return
    if scores is None:
        record.judge_error = "malformed judge reply"
        return
    record.judge_correctness = scores["correctness"]
    record.judge_completeness = scores["completeness"]
    record.judge_relevance = scores["relevance"]


def read_results(path: Path) -> list[EvalRecord]:
    """Records of a results file; a torn last line (the run was killed mid-write) is ignored."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            raw = json.loads(line)
            record = EvalRecord.from_dict(raw)
        except (json.JSONDecodeError, TypeError, AttributeError):
            continue
        if "acc" not in raw and record.error is None:
            score_displayed_answer(record)  # written before acc was recorded: computed from the answer shown
        records.append(record)
    return records


def _drop_torn_tail(path: Path) -> None:
    # A run killed mid-write leaves a line without its newline; appending after it would glue two records.
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        path.write_bytes(data[: data.rfind(b"\n") + 1])


def run_evaluation(
    runtime: Any,
    questions: Sequence[EvalQuestion],
    pipelines: Sequence[str],
    out_dir: Path,
    *,
    scope: AccessScope,
    label: str | None = None,
    options: dict[str, Any] | None = None,
    pipeline_options: dict[str, dict[str, Any]] | None = None,
    filters: dict[str, Any] | None = None,
    resume: bool = False,
    progress: bool = True,
    recall_k: int | None = None,
    judge: Any | None = None,
) -> list[EvalRecord]:
    """Answer every question with every strategy (strategies take turns per question) and append the records.

    :param options: builder options given to every strategy that accepts them (e.g. `top_k`).
    :param pipeline_options: builder options of one strategy each (e.g. `{"contregen": {"max_llm_calls": 8}}`),
        over the shared ones; its options model rejects one it does not take.
    :param filters: a metadata filter narrowing every retrieval further (e.g. one dataset's passages); it is
        combined with the scope's access filter, never a replacement for it.
    :param resume: keep `results.jsonl` and skip the (question, strategy) pairs it already holds; without it an
        existing non-empty results file is an error rather than silently mixed with a new run.
    :param recall_k: supporting-passage recall over the first k distinct retrieved passages (None: all).
    :param judge: an `AnswerJudge` grading every answer against the references; outside the answer's run, so
        its calls count neither against the strategy's budget nor in its trace.
    :returns: every record of the run, earlier ones included.
    """
    from tqdm import tqdm

    from docqa.audit.scrub import mask_secrets
    from docqa.pipelines.registry import pipeline_spec
    from docqa.pipelines.yaml_strategies import load_pipelines_dir
    from docqa.questions import Ask, Asker, QuestionService
    from docqa.step_tracer import enable_step_tracing

    settings = runtime.settings
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RESULTS_FILE
    if path.is_file() and path.stat().st_size and not resume:
        raise DocqaError(f"{path} already holds results: pass --resume to continue that run, or another --out")
    if path.is_file():
        _drop_torn_tail(path)
    records = read_results(path)
    done = {(r.question_id, r.pipeline) for r in records}

    enable_step_tracing(settings)
    load_pipelines_dir(settings)
    service = QuestionService(runtime)
    validated = {}
    for name in pipelines:
        accepted = _accepted_options(pipeline_spec(name), options or {})
        validated[name] = service.options(name, {**accepted, **(pipeline_options or {}).get(name, {})})
        service.pipelines.get(name, validated[name])  # built before the first question: a bad build stops here
    asker = Asker(scope, asked_by=f"eval:{label or out_dir.name}")
    asked_by = asker.asked_by
    _write_run_file(out_dir, runtime, pipelines, scope, asked_by, len(questions), judged=judge is not None,
                    options={name: {**_accepted_options(pipeline_spec(name), options or {}),
                                    **(pipeline_options or {}).get(name, {})} for name in pipelines})
    words_of = WordCounter(runtime.document_store) if _has_retrieval(pipelines) else None

    todo = [(q, name) for q in questions for name in pipelines if (q.id, name) not in done]
    bar = tqdm(total=len(questions) * len(pipelines), initial=len(questions) * len(pipelines) - len(todo),
               desc="eval", unit="answer", disable=not progress)
    try:
        with path.open("a", encoding="utf-8") as output:
            for question, name in todo:
                ask = Ask(question.question, strategy=name, options=validated[name],
                          inputs=_inputs_for(name, question.run_inputs) or {}, filters=filters)
                record = EvalRecord(name, question.id, question.question, list(question.answers))
                started = time.perf_counter()
                prepared = None
                try:
                    prepared = service.prepare(ask, asker)
                    result = service.answer(prepared, asker).result
                except LLMUnavailableError:
                    # Every later question would fail the same way: stop, and resume once the endpoint is back.
                    raise
                except Exception as exc:  # one bad answer is a data point, not the end of the run
                    record.error = f"{type(exc).__name__}: {exc}"
                    logger.info("eval %s/%s failed: %s", name, question.id, record.error)
                else:
                    score(record, result, question, words_of, recall_k)
                # Masked as in the trace (the service's copy), also in the results file.
                record.question = prepared.asked if prepared is not None else mask_secrets(question.question,
                                                                                          settings)
                record.wall_s = round(time.perf_counter() - started, 3)  # the strategy's time, without judging
                if judge is not None and record.error is None:
                    judge_record(judge, record)
                output.write(json.dumps(asdict(record), ensure_ascii=False) + "\n")
                output.flush()
                records.append(record)
                bar.update(1)
                bar.set_postfix_str(f"{name} f1={record.f1:.2f}")
    finally:
        bar.close()
        service.close()
    return records


def _accepted_options(spec: Any, options: dict[str, Any]) -> dict[str, Any]:
    # Options models reject options a strategy does not take; shared ones go only where they apply.
    model_fields = getattr(spec.options, "model_fields", {})
    return {k: v for k, v in options.items() if k in model_fields}


def _inputs_for(name: str, inputs: dict[str, Any]) -> dict[str, Any] | None:
    from docqa.pipelines.registry import pipeline_spec

    taken = getattr(pipeline_spec(name).inputs, "model_fields", {})
    return {k: v for k, v in inputs.items() if k in taken} or None


def _has_retrieval(pipelines: Sequence[str]) -> bool:
    return any(name != "no_retrieval" for name in pipelines)


def _write_run_file(out_dir: Path, runtime: Any, pipelines: Sequence[str], scope: AccessScope, asked_by: str,
                    questions: int, judged: bool = False, options: dict[str, Any] | None = None) -> None:
    from docqa.settings import JUDGE_ROLE

    info = {
        "pipelines": list(pipelines), "tenant": scope.tenant, "principals": sorted(scope.principals),
        "asked_by": asked_by, "questions": questions, "models": runtime.models_by_role(),
        "top_k": runtime.settings.top_k, "options": options or {},
        "judge_model": runtime.settings.endpoint_for(JUDGE_ROLE).model if judged else None,
    }
    (out_dir / RUN_FILE).write_text(json.dumps(info, indent=2), encoding="utf-8")
