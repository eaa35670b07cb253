"""Ingestion jobs name the collection their documents are written to (a source mspr can search); `main` for
jobs submitted before collections existed.

Revision ID: 0008_ingest_job_collection
Revises: 0007_conversations
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008_ingest_job_collection"
down_revision: str | Sequence[str] | None = "0007_conversations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # The server default fills the existing rows, so the column can be NOT NULL at once.
    op.add_column("ingest_jobs",
                  sa.Column("collection", sa.String(length=64), nullable=False, server_default="main"))


def downgrade() -> None:
    # Batch mode: older SQLite versions drop a column only by copying the table.
    with op.batch_alter_table("ingest_jobs") as batch:
        batch.drop_column("collection")
