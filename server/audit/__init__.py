"""Audit trail: every answer's trace persisted in a keyed hash chain, verifiable and exportable.

Writing: `recorder.answer_with_audit` (or `recorder.record_answer`) appends one trace per question, with its
steps, in one transaction. Checking: `verify.verify_chain`, `checkpoint` (signed chain heads kept outside the
database), `export` (JSON Lines with chain proofs) and `retention` (archive a prefix without breaking the chain).

Production on PostgreSQL: run `docqa db upgrade` as the schema owner; run the server and workers as a login
role that is a member of `docqa_app` (created by the migration: SELECT and INSERT only on audit tables), e.g.
`CREATE ROLE docqa_server LOGIN PASSWORD '...' IN ROLE docqa_app`. Give every host the same
`DOCQA_AUDIT_HMAC_KEY` and `DOCQA_AUDIT_SIGNING_KEY`; hand auditors `docqa audit public-key` and keep
checkpoints (`docqa audit checkpoint`) outside the database.
"""
