"""What `docqa eval` reports about the answers users were shown: FlashRAG's acc, citation precision against the
supporting passages, the shares of model-written and extracted answers and the acc of each, hand-computed; the
report leaving out empty columns; and a results file written before these existed, scored again."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict

import pytest

from docqa.errors import DocqaError
from docqa.evaluation.datasets import load_dataset
from docqa.evaluation.metrics import answer_accuracy, citation_precision
from docqa.evaluation.report import SUMMARY_COLUMNS, markdown_table, summarize, write_reports
from docqa.evaluation.rescore import cited_ids_from_traces, rescore_run
from docqa.evaluation.runner import RESULTS_FILE, EvalRecord, read_results, score_displayed_answer
from docqa.schema import upgrade_database
from docqa.settings import Settings
from tests.support.audit import record, tree_result


@pytest.mark.parametrize(("prediction", "answers", "acc"), [
    ("The capital of France is Paris.", ["Paris"], 1.0),
    ("the Beatles", ["The Beatles!"], 1.0),  # articles and punctuation normalised away on both sides
    ("It was NYC all along", ["New York City", "NYC"], 1.0),  # any alias
    ("Parisian cafés", ["Paris"], 1.0),  # containment, not whole words, as FlashRAG computes it
    ("Paris", ["Paris, France"], 0.0),  # the gold answer must be inside the prediction, not the reverse
    ("EUR 20,000", ["EUR 5,000"], 0.0),
    ("anything at all", ["The"], 0.0),  # an answer normalised to nothing never counts
    ("", ["Oslo"], 0.0),
    ("Oslo", [], 0.0),
])
def test_answer_accuracy(prediction, answers, acc):
    assert answer_accuracy(prediction, answers) == acc


@pytest.mark.parametrize(("cited", "supporting", "precision"), [
    (["d1", "d7"], ["d1", "d2"], 0.5),
    (["d1", "d1", "d7"], ["d1", "d2"], 0.5),  # a passage cited twice counts once
    (["d1"], ["d1", "d2"], 1.0),  # precision, not recall: the uncited d2 costs nothing
    (["d3", "d4", "d5"], ["d1"], 0.0),
    ([], ["d1"], None),  # nothing cited
    (["d1"], [], None),  # the dataset names no supporting passage
])
def test_citation_precision(cited, supporting, precision):
    assert citation_precision(cited, supporting) == precision


def test_a_record_scores_the_displayed_answer_without_its_markers():
    shown = EvalRecord("standard", "q", "How many?", ["2"], prediction="Oslo [2]", cited_ids=["p2", "p9"],
                       supporting_ids=["p2"])
    score_displayed_answer(shown)
    # "[2]" is a citation, not the answer "2"
    assert shown.acc == 0.0 and shown.citation_precision == 0.5


def _records() -> list[EvalRecord]:
    def rec(qid: str, source: str, acc: float, cited: list[str], error: str | None = None) -> EvalRecord:
        return EvalRecord("standard", qid, f"question {qid}?", ["gold"], answer_source=source, acc=acc,
                          cited_ids=cited, supporting_ids=["s1"], error=error,
                          citation_precision=citation_precision(cited, ["s1"]))

    return [
        rec("q1", "model", 1.0, ["s1"]),  # precision 1
        rec("q2", "model", 0.0, ["x1", "s1"]),  # precision 1/2
        rec("q3", "extracted", 1.0, ["x2"]),  # precision 0
        rec("q4", "none", 0.0, []),  # nothing cited: no precision
        rec("q5", "model", 0.0, [], error="RuntimeError: boom"),  # a failed answer
    ]


def test_summary_of_acc_citation_precision_and_answer_sources():
    (row,) = summarize(_records())
    assert row["n"] == 5 and row["errors"] == 1
    assert row["acc"] == pytest.approx(2 / 5)  # the failed answer scores 0, as for EM/F1
    assert row["citation_precision"] == pytest.approx((1 + 0.5 + 0) / 3)
    # Over the 4 answers given: 2 the model's, 1 extracted, 1 none.
    assert row["model_share"] == pytest.approx(0.5) and row["extracted_share"] == pytest.approx(0.25)
    assert row["acc_model"] == pytest.approx(0.5) and row["acc_extracted"] == pytest.approx(1.0)


def test_a_strategy_without_extracted_answers_has_no_acc_for_them():
    (row,) = summarize(_records()[:2])
    assert row["extracted_share"] == 0.0 and row["acc_extracted"] is None and row["acc_model"] == 0.5


def test_the_report_leaves_out_columns_no_strategy_has(tmp_path):
    plain = [EvalRecord("standard", f"q{i}", f"question {i}?", ["gold"], prediction=p, acc=a)
             for i, (p, a) in enumerate([("gold", 1.0), ("other", 0.0)])]
    write_reports(tmp_path, plain)
    header = next(line for line in (tmp_path / "report.md").read_text().splitlines() if line.startswith("| pipeline"))
    shown = [c.strip() for c in header.strip(" |").split("|")]
    assert shown[:5] == ["pipeline", "n", "em", "f1", "acc"]
    assert {"model_share", "acc_model", "extracted_share"} <= set(shown)
    for empty in ("citation_precision", "support_recall", "acc_extracted", "judge_correctness", "record_recall"):
        assert empty not in shown
        assert f"<th>{empty}</th>" not in (tmp_path / "report.html").read_text()
    with (tmp_path / "summary.csv").open() as handle:
        assert tuple(next(csv.reader(handle))) == SUMMARY_COLUMNS  # the CSV keeps every column
    assert "citation_precision" in markdown_table(summarize(_records()))


def test_the_worst_answers_are_the_wrong_ones_with_who_wrote_them(tmp_path):
    records = [
        EvalRecord("standard", "q1", "Where?", ["Oslo"], prediction="It is Oslo, the capital, by the fjord.",
                   answer_source="model", acc=1.0, f1=0.2),  # right but wordy: low F1
        EvalRecord("standard", "q2", "Who?", ["Jane Roe"], prediction="Kari Nordmann", answer_source="extracted",
                   acc=0.0, f1=0.5),
    ]
    write_reports(tmp_path, records)
    worst = (tmp_path / "report.md").read_text().split("## Lowest-scoring answers", 1)[1]
    assert worst.index("Kari Nordmann | extracted |") < worst.index("It is Oslo")


def _old_line(record: EvalRecord) -> str:
    # A results line as written before acc, citation precision and the ids they need were recorded.
    raw = asdict(record)
    for key in ("acc", "citation_precision", "cited_ids", "supporting_ids"):
        del raw[key]
    return json.dumps(raw)


def test_an_old_results_file_is_scored_again(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    old = [
        EvalRecord("standard", "q1", "Where is Halcyon based?", ["Oslo"], prediction="In Oslo [1].",
                   answer_source="model", em=0.0, trace_id="t1"),
        EvalRecord("standard", "q2", "Who founded it?", ["Jane Roe", "J. Roe"], prediction="Kari Nordmann [1][2]",
                   answer_source="model", trace_id="t2"),
        EvalRecord("standard", "q3", "When?", ["1998"], prediction="It moved in 1998. [1]",
                   answer_source="extracted", trace_id="t3"),
    ]
    (run / RESULTS_FILE).write_text("".join(_old_line(r) + "\n" for r in old))
    dataset = tmp_path / "questions.jsonl"
    dataset.write_text("".join(json.dumps(q) + "\n" for q in [
        {"id": "q1", "question": "Where is Halcyon based?", "golden_answers": ["Oslo"], "supporting": ["p1"]},
        {"id": "q2", "question": "Who founded it?", "golden_answers": ["Jane Roe"], "supporting": ["p2", "p3"]},
        {"id": "q3", "question": "When?", "golden_answers": ["1998"], "supporting": ["p4"]},
    ]))
    # Reading an old file already gives acc from the answer shown.
    assert [r.acc for r in read_results(run / RESULTS_FILE)] == [1.0, 0.0, 1.0]

    cited = {"t1": ["p1"], "t2": ["p2", "p9"], "t3": ["p5"]}
    records = rescore_run(run, load_dataset(dataset), cited)
    assert [r.citation_precision for r in records] == [1.0, 0.5, 0.0]
    assert [r.supporting_ids for r in records] == [["p1"], ["p2", "p3"], ["p4"]]
    assert records[1].answers == ["Jane Roe", "J. Roe"]  # the aliases the run scored against stay
    rewritten = [json.loads(line) for line in (run / RESULTS_FILE).read_text().splitlines()]
    assert [line["acc"] for line in rewritten] == [1.0, 0.0, 1.0]
    assert rewritten[0]["trace_id"] == "t1" and rewritten[0]["prediction"] == "In Oslo [1]."
    (row,) = write_reports(run, records)
    assert row["acc"] == pytest.approx(2 / 3) and row["citation_precision"] == pytest.approx(0.5)
    assert row["acc_model"] == pytest.approx(0.5) and row["acc_extracted"] == 1.0
    assert row["model_share"] == pytest.approx(2 / 3)


def test_rescoring_a_folder_without_results_is_an_error(tmp_path):
    with pytest.raises(DocqaError, match="no evaluation results"):
        rescore_run(tmp_path)


def test_cited_ids_come_from_the_answers_audit_traces(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", database_url=None)
    upgrade_database(settings)
    trace_id = record(settings, tree_result())
    assert cited_ids_from_traces(settings, [trace_id, "no-such-trace"]) == {trace_id: ["doc-a"]}


def test_docqa_eval_rescore_reads_the_cited_passages_from_the_traces(tmp_path, monkeypatch, capsys):
    from docqa.cli import main

    settings = Settings(data_dir=tmp_path / "data", database_url=None)
    upgrade_database(settings)
    trace_id = record(settings, tree_result())  # cites doc-a
    run = tmp_path / "run"
    run.mkdir()
    old = EvalRecord("standard", "q1", "Who founded Acme?", ["Jane Roe"], prediction="Jane Roe in 1901 [1].",
                     trace_id=trace_id)
    (run / RESULTS_FILE).write_text(_old_line(old) + "\n")
    dataset = tmp_path / "questions.jsonl"
    dataset.write_text(json.dumps({"id": "q1", "question": "Who founded Acme?", "golden_answers": ["Jane Roe"],
                                   "supporting": ["doc-a", "doc-b"]}) + "\n")
    monkeypatch.setenv("DOCQA_DATA_DIR", str(settings.data_dir))
    monkeypatch.delenv("DOCQA_DATABASE_URL", raising=False)
    assert main(["eval", "rescore", str(run), "--dataset", str(dataset), "--traces"]) == 0
    with (run / "summary.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert (row["acc"], row["citation_precision"], row["acc_model"]) == ("1.0000", "1.0000", "1.0000")
    assert "cited passages of 1 of 1 answers" in capsys.readouterr().err
    assert "citation_precision" in (run / "report.md").read_text()
