"""Ingestion items record when their last message was sent (`dispatched_at`) and the last heartbeat of the worker
running them (`heartbeat_at`), so the stale-item sweep can tell a lost batch from one that is waiting or running;
`ingest_job_events` is each job's history (submitted, resumed, re-dispatched).

Revision ID: 0011_ingest_item_liveness
Revises: 0010_audit_runs
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011_ingest_item_liveness"
down_revision: str | Sequence[str] | None = "0010_audit_runs"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("ingest_items", sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("ingest_items", sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "ingest_job_events",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=36), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("event", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["ingest_jobs.id"], name=op.f("fk_ingest_job_events_job_id_ingest_jobs"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ingest_job_events")),
    )
    op.create_index(op.f("ix_ingest_job_events_job_id"), "ingest_job_events", ["job_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_ingest_job_events_job_id"), table_name="ingest_job_events")
    op.drop_table("ingest_job_events")
    # Batch mode: older SQLite versions drop a column only by copying the table.
    with op.batch_alter_table("ingest_items") as batch:
        batch.drop_column("heartbeat_at")
        batch.drop_column("dispatched_at")
