"""Sources that stay in sync: their definitions and last run (`sources`), the items each holds as docqa stored
them (`source_entries`), and the source an ingestion job came from (`ingest_jobs.source_name`, copied onto every
chunk it writes).

Revision ID: 0013_sources
Revises: 0012_ingest_item_crashes
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013_sources"
down_revision: str | Sequence[str] | None = "0012_ingest_item_crashes"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "sources",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tenant", sa.String(length=128), nullable=False),
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("type", sa.String(length=16), nullable=False),
        sa.Column("config", sa.JSON(), nullable=False),
        sa.Column("allow", sa.JSON(), nullable=False),
        sa.Column("acl_map", sa.Text(), nullable=True),
        sa.Column("collection", sa.String(length=64), nullable=False),
        sa.Column("every_s", sa.Integer(), nullable=True),
        sa.Column("created_by", sa.String(length=128), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_status", sa.String(length=32), nullable=False),
        sa.Column("last_started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_counts", sa.JSON(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("next_run_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lock_owner", sa.String(length=255), nullable=True),
        sa.Column("lock_until", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_sources")),
        sa.UniqueConstraint("tenant", "name", name="uq_sources_tenant_name"),
    )
    op.create_index(op.f("ix_sources_tenant"), "sources", ["tenant"], unique=False)
    op.create_table(
        "source_entries",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("source_pk", sa.Integer(), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("document_id", sa.Text(), nullable=False),
        sa.Column("fingerprint", sa.String(length=128), nullable=True),
        sa.Column("quick", sa.String(length=128), nullable=True),
        sa.Column("access", sa.JSON(), nullable=True),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("pending_item", sa.Integer(), nullable=True),
        sa.Column("pending_fingerprint", sa.String(length=128), nullable=True),
        sa.Column("pending_quick", sa.String(length=128), nullable=True),
        sa.Column("pending_access", sa.JSON(), nullable=True),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["source_pk"], ["sources.id"], name=op.f("fk_source_entries_source_pk_sources"),
                                ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_source_entries")),
        sa.UniqueConstraint("source_pk", "key", name="uq_source_entries_source_key"),
    )
    op.create_index(op.f("ix_source_entries_source_pk"), "source_entries", ["source_pk"], unique=False)
    op.add_column("ingest_jobs", sa.Column("source_name", sa.String(length=64), nullable=True))


def downgrade() -> None:
    # Batch mode: older SQLite versions drop a column only by copying the table.
    with op.batch_alter_table("ingest_jobs") as batch:
        batch.drop_column("source_name")
    op.drop_index(op.f("ix_source_entries_source_pk"), table_name="source_entries")
    op.drop_table("source_entries")
    op.drop_index(op.f("ix_sources_tenant"), table_name="sources")
    op.drop_table("sources")
