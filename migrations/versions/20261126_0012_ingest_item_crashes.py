"""Ingestion items count the attempts whose pool process died while the worker's main process survived
(`crashes`): those fail a file after `ingest_max_attempts`, while attempts cut short by the whole worker's death
only count against `ingest_max_interruptions`.

Revision ID: 0012_ingest_item_crashes
Revises: 0011_ingest_item_liveness
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_ingest_item_crashes"
down_revision: str | Sequence[str] | None = "0011_ingest_item_liveness"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("ingest_items", sa.Column("crashes", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    # Batch mode: older SQLite versions drop a column only by copying the table.
    with op.batch_alter_table("ingest_items") as batch:
        batch.drop_column("crashes")
