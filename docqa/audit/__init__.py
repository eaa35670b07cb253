"""Audit trail: every answer's trace persisted in a keyed hash chain, verifiable and exportable.

Writing: `recorder.record_answer` (driven per question by the question service's `AuditedRun`) appends one trace per
question, with its steps, in one transaction. A run is written `started` first (`runs`: an `audit_runs` row, not a
chain link) and its trace replaces that row; runs left started by a process that is gone are traced `interrupted` at
a later start. Checking: `verify.verify_chain`, `checkpoint` (signed chain heads kept outside the database),
`export` (JSON Lines with chain proofs) and `retention` (archive a prefix without breaking the chain).
Events (`events.append_event`): security-relevant changes (accounts, keys, groups, documents and their access
lists, failed sign-ins, retention, checkpoints) are links of the same chain, written in the change's transaction;
`access.replay_access` answers "could this principal read this document then?" from them, and `siem` writes the
chain as ECS JSON lines.

Production on PostgreSQL: run `docqa db upgrade` as the schema owner; run the server and workers as a login
role that is a member of `docqa_app` (created by the migration: SELECT and INSERT only on audit tables, and
DELETE on the runs in flight), e.g. `CREATE ROLE docqa_server LOGIN PASSWORD '...' IN ROLE docqa_app`. Give
every host the same `DOCQA_AUDIT_HMAC_KEY` and `DOCQA_AUDIT_SIGNING_KEY`; hand auditors `docqa audit public-key`
and keep checkpoints (`docqa audit checkpoint`) outside the database.
"""
