"""Runs in flight: a question's `started` row, written before its pipeline runs and deleted in the transaction
that appends its one trace (the same id) to the chain; a row left by a dead process becomes an `interrupted`
trace at a later start.

The table is not a chain link and holds only runs in flight. On PostgreSQL the application role may read,
insert and delete its rows, never update them: a started run's record cannot be rewritten, only settled.

Revision ID: 0010_audit_runs
Revises: 0009_audit_tenant_seq
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from docqa.migrations.postgres import create_app_role, grant_only

revision: str = "0010_audit_runs"
down_revision: str | Sequence[str] | None = "0009_audit_tenant_seq"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_runs",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("asked_by", sa.String(length=255), nullable=False),
        sa.Column("asked_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("question", sa.Text(), nullable=False),
        sa.Column("pipeline", sa.String(length=128), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("models", sa.JSON(), nullable=False),
        sa.Column("deadline_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("boot_id", sa.String(length=64), nullable=False),
        sa.Column("pid_ns", sa.String(length=64), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("pid_start", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_runs")),
    )
    if op.get_bind().dialect.name == "postgresql":
        create_app_role()
        grant_only("audit_runs", "SELECT, INSERT, DELETE")


def downgrade() -> None:
    op.drop_table("audit_runs")
