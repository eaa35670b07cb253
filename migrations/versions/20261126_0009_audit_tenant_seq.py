"""Per-tenant numbering of audit links: `tenant_seq` on traces and events, and the counters that assign it.

A tenant's auditors see their traces and events numbered 1, 2, 3, ... instead of the chain's global `seq`, whose
gaps count other tenants' links. Existing rows are numbered in chain order per tenant, and the counters start
after them. On PostgreSQL the backfill runs as the table owner with the append-only triggers paused for this
transaction only; the application role may read and advance the counters, nothing more.

Revision ID: 0009_audit_tenant_seq
Revises: 0008_ingest_job_collection
Create Date: 2026-11-26
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009_audit_tenant_seq"
down_revision: str | Sequence[str] | None = "0008_ingest_job_collection"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

APP_ROLE = "docqa_app"
LINK_TABLES = {"audit_traces": "trace", "audit_events": "event"}


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "audit_tenant_counters",
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("kind", sa.String(length=8), nullable=False),
        sa.Column("last", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("tenant", "kind", name=op.f("pk_audit_tenant_counters")),
    )
    for table, kind in LINK_TABLES.items():
        op.add_column(table, sa.Column("tenant_seq", sa.BigInteger(), nullable=True))
        if postgresql:
            op.execute(f"ALTER TABLE {table} DISABLE TRIGGER {table}_append_only")
        # Chain order within each tenant; UPDATE ... FROM works on PostgreSQL and SQLite 3.33+.
        op.execute(
            f"UPDATE {table} SET tenant_seq = numbered.n FROM "
            f"(SELECT id, ROW_NUMBER() OVER (PARTITION BY tenant ORDER BY seq) AS n FROM {table}) AS numbered "
            f"WHERE {table}.id = numbered.id"
        )
        if postgresql:
            op.execute(f"ALTER TABLE {table} ENABLE TRIGGER {table}_append_only")
        op.create_index(f"ix_{table}_tenant_seq", table, ["tenant", "tenant_seq"], unique=True)
        op.execute(
            f"INSERT INTO audit_tenant_counters (tenant, kind, last) "
            f"SELECT tenant, '{kind}', MAX(tenant_seq) FROM {table} GROUP BY tenant"
        )
    if postgresql:
        op.execute("REVOKE ALL ON audit_tenant_counters FROM PUBLIC")
        op.execute(f"GRANT SELECT, INSERT, UPDATE ON audit_tenant_counters TO {APP_ROLE}")


def downgrade() -> None:
    for table in LINK_TABLES:
        op.drop_index(f"ix_{table}_tenant_seq", table_name=table)
        # ALTER TABLE ... DROP COLUMN (SQLite 3.35+), not batch mode: copying the table would drop it, which the
        # foreign keys of steps and feedback refuse.
        op.drop_column(table, "tenant_seq")
    op.drop_table("audit_tenant_counters")
