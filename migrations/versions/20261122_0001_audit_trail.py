"""Audit trail: append-only traces, steps and retention anchors.

On PostgreSQL the application role `docqa_app` may only SELECT and INSERT these tables, and a trigger
rejects UPDATE, DELETE and TRUNCATE for every role. The one exception is retention, which deletes an
archived prefix as the table owner with `SET LOCAL docqa.audit_retention = 'on'` (the app role lacks the
DELETE privilege whatever it sets).

Revision ID: 0001_audit_trail
Revises:
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from docqa.migrations.postgres import (
    APPEND_ONLY_FUNCTION,
    add_append_only_triggers,
    append_only_function,
    create_app_role,
    drop_append_only_triggers,
    grant_only,
)

revision: str = "0001_audit_trail"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLES = ("audit_traces", "audit_steps", "audit_anchors")


def upgrade() -> None:
    op.create_table(
        "audit_traces",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("asked_by", sa.String(length=255), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("asked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("pipeline", sa.String(length=128), nullable=False),
        sa.Column("config_hash", sa.String(length=64), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("answer", sa.Text(), nullable=True),
        sa.Column("citations", sa.JSON(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("stop_reason", sa.String(length=128), nullable=True),
        sa.Column("totals", sa.JSON(), nullable=False),
        sa.Column("prev_mac", sa.String(length=64), nullable=False),
        sa.Column("mac", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_traces")),
    )
    op.create_index(op.f("ix_audit_traces_seq"), "audit_traces", ["seq"], unique=True)
    op.create_index(op.f("ix_audit_traces_tenant"), "audit_traces", ["tenant"], unique=False)
    op.create_index(op.f("ix_audit_traces_asked_at"), "audit_traces", ["asked_at"], unique=False)
    op.create_table(
        "audit_steps",
        sa.Column("trace_id", sa.String(length=36), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("parent", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=64), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("inputs", sa.JSON(), nullable=False),
        sa.Column("outputs", sa.JSON(), nullable=False),
        sa.Column("documents", sa.JSON(), nullable=False),
        sa.Column("started_at", sa.Float(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("llm_calls", sa.Integer(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.ForeignKeyConstraint(
            ["trace_id"], ["audit_traces.id"], name=op.f("fk_audit_steps_trace_id_audit_traces")
        ),
        sa.PrimaryKeyConstraint("trace_id", "position", name=op.f("pk_audit_steps")),
    )
    op.create_table(
        "audit_anchors",
        sa.Column("up_to_seq", sa.BigInteger(), nullable=False),
        sa.Column("mac", sa.String(length=64), nullable=False),
        sa.Column("archived_count", sa.BigInteger(), nullable=False),
        sa.Column("archive_sha256", sa.String(length=64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("anchor_mac", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("up_to_seq", name=op.f("pk_audit_anchors")),
    )
    if op.get_bind().dialect.name == "postgresql":
        _protect_postgresql()


def _protect_postgresql() -> None:
    create_app_role()
    grant_only(", ".join(TABLES), "SELECT, INSERT")
    append_only_function(("audit_traces", "audit_steps"), replace=False)
    for table in TABLES:
        add_append_only_triggers(table)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        for table in TABLES:
            drop_append_only_triggers(table)
        op.execute(f"DROP FUNCTION IF EXISTS {APPEND_ONLY_FUNCTION}()")
    op.drop_table("audit_anchors")
    op.drop_table("audit_steps")
    op.drop_index(op.f("ix_audit_traces_asked_at"), table_name="audit_traces")
    op.drop_index(op.f("ix_audit_traces_tenant"), table_name="audit_traces")
    op.drop_index(op.f("ix_audit_traces_seq"), table_name="audit_traces")
    op.drop_table("audit_traces")
