"""Audit events: security-relevant changes as links of the same HMAC chain as the traces.

On PostgreSQL the table gets the same protection as the other audit tables (the application role may only
SELECT and INSERT; a trigger rejects UPDATE, DELETE and TRUNCATE), and the trigger function lets retention
delete archived events as it deletes archived traces.

Revision ID: 0005_audit_events
Revises: 0004_tenant_scoped_users
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from docqa.migrations.postgres import (
    add_append_only_triggers,
    append_only_function,
    drop_append_only_triggers,
    grant_only,
)

revision: str = "0005_audit_events"
down_revision: str | Sequence[str] | None = "0004_tenant_scoped_users"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "audit_events",
        sa.Column("id", sa.String(length=36), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("actor", sa.String(length=255), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("target", sa.String(length=1024), nullable=False),
        sa.Column("before", sa.JSON(), nullable=True),
        sa.Column("after", sa.JSON(), nullable=True),
        sa.Column("result", sa.String(length=16), nullable=False),
        sa.Column("request_id", sa.String(length=64), nullable=True),
        sa.Column("prev_mac", sa.String(length=64), nullable=False),
        sa.Column("mac", sa.String(length=64), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_events")),
    )
    op.create_index(op.f("ix_audit_events_seq"), "audit_events", ["seq"], unique=True)
    op.create_index(op.f("ix_audit_events_at"), "audit_events", ["at"], unique=False)
    op.create_index(op.f("ix_audit_events_tenant"), "audit_events", ["tenant"], unique=False)
    op.create_index(op.f("ix_audit_events_action"), "audit_events", ["action"], unique=False)
    op.create_index(op.f("ix_audit_events_target"), "audit_events", ["target"], unique=False)
    if op.get_bind().dialect.name == "postgresql":
        grant_only("audit_events", "SELECT, INSERT")
        append_only_function(("audit_traces", "audit_steps", "audit_events"))
        add_append_only_triggers("audit_events")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        drop_append_only_triggers("audit_events")
        append_only_function(("audit_traces", "audit_steps"))
    op.drop_index(op.f("ix_audit_events_target"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_action"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_tenant"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_at"), table_name="audit_events")
    op.drop_index(op.f("ix_audit_events_seq"), table_name="audit_events")
    op.drop_table("audit_events")
