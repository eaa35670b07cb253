"""`docqa eval`: strategies side by side on an organisation's own questions, with reports and a regression gate.

Modules: `metrics` (EM/F1 with SQuAD normalisation, ROUGE-L, short-answer recall, recall@k, record-set
precision/recall), `datasets` (FlashRAG-style JSONL, ASQA, question/answer CSV), `formats` (HotpotQA, MuSiQue
and ODSum layouts), `records` (time-scoped record questions: gold record sets from the FHIR/CSV source files),
`corpus` (a dataset's passages or patient records into the store), `judge` (LLM-as-judge scores), `runner`
(audited answers, resumable results.jsonl), `report` (summary.csv, report.md, PNG
plots, self-contained report.html), `compare` (paired deltas, sign test, bootstrap interval) and `cli` (the
`docqa eval` commands).

Usage:
    from docqa.evaluation.metrics import best_scores
    best_scores("the Eiffel Tower", ["Eiffel Tower"])  # (1.0, 1.0)
"""
