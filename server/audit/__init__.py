"""Audit trail: every answer's trace persisted in a keyed hash chain, verifiable and exportable.

Writing: `recorder.answer_with_audit` (or `recorder.record_answer`) appends one trace per question, with its
steps, in one transaction. Checking: `verify.verify_chain`, `checkpoint` (signed chain heads kept outside the
database), `export` (JSON Lines with chain proofs) and `retention` (archive a prefix without breaking the chain).
"""
