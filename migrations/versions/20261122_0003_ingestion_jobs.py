"""Ingestion jobs: jobs, their items (state, attempts, outcome) and the payload bytes of unfinished items.

Revision ID: 0003_ingestion_jobs
Revises: 0002_accounts
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0003_ingestion_jobs'
down_revision: str | Sequence[str] | None = '0002_accounts'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('ingest_jobs',
    sa.Column('id', sa.String(length=36), nullable=False),
    sa.Column('tenant', sa.String(length=128), nullable=False),
    sa.Column('access', sa.JSON(), nullable=False),
    sa.Column('status', sa.String(length=32), nullable=False),
    sa.Column('submitted_by', sa.String(length=128), nullable=True),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('started_at', sa.DateTime(timezone=True), nullable=True),
    sa.Column('finished_at', sa.DateTime(timezone=True), nullable=True),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ingest_jobs'))
    )
    op.create_index(op.f('ix_ingest_jobs_tenant'), 'ingest_jobs', ['tenant'], unique=False)

    op.create_table('ingest_items',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('job_id', sa.String(length=36), nullable=False),
    sa.Column('position', sa.Integer(), nullable=False),
    sa.Column('source_id', sa.Text(), nullable=False),
    sa.Column('name', sa.Text(), nullable=False),
    sa.Column('status', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('chunks', sa.Integer(), nullable=False),
    sa.Column('code', sa.String(length=64), nullable=True),
    sa.Column('reason', sa.Text(), nullable=True),
    sa.Column('worker', sa.String(length=255), nullable=True),
    sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['job_id'], ['ingest_jobs.id'], name=op.f('fk_ingest_items_job_id_ingest_jobs'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_ingest_items'))
    )
    op.create_index(op.f('ix_ingest_items_job_id'), 'ingest_items', ['job_id'], unique=False)
    op.create_index(op.f('ix_ingest_items_status'), 'ingest_items', ['status'], unique=False)

    op.create_table('ingest_payloads',
    sa.Column('item_id', sa.Integer(), nullable=False),
    sa.Column('data', sa.LargeBinary(), nullable=False),
    sa.ForeignKeyConstraint(['item_id'], ['ingest_items.id'], name=op.f('fk_ingest_payloads_item_id_ingest_items'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('item_id', name=op.f('pk_ingest_payloads'))
    )


def downgrade() -> None:
    op.drop_table('ingest_payloads')
    op.drop_index(op.f('ix_ingest_items_status'), table_name='ingest_items')
    op.drop_index(op.f('ix_ingest_items_job_id'), table_name='ingest_items')

    op.drop_table('ingest_items')
    op.drop_index(op.f('ix_ingest_jobs_tenant'), table_name='ingest_jobs')

    op.drop_table('ingest_jobs')
