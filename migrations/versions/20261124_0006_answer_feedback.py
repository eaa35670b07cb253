"""Answer feedback: a thumbs up or down with an optional comment, per answer (audit trace) and asking user.

Kept beside the append-only audit tables, not inside the hash chain: a rating may change after the answer.
Deleting a trace (retention) deletes its feedback.

Revision ID: 0006_answer_feedback
Revises: 0005_audit_events
Create Date: 2026-11-24
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006_answer_feedback"
down_revision: str | Sequence[str] | None = "0005_audit_events"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "answer_feedback",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("trace_id", sa.String(length=36), nullable=False),
        sa.Column("tenant", sa.String(length=255), nullable=False),
        sa.Column("user_id", sa.String(length=255), nullable=False),
        sa.Column("rating", sa.String(length=8), nullable=False),
        sa.Column("comment", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["trace_id"], ["audit_traces.id"],
                                name=op.f("fk_answer_feedback_trace_id_audit_traces"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_answer_feedback")),
        sa.UniqueConstraint("trace_id", "user_id", name=op.f("uq_answer_feedback_trace_id")),
    )
    op.create_index(op.f("ix_answer_feedback_trace_id"), "answer_feedback", ["trace_id"], unique=False)
    op.create_index(op.f("ix_answer_feedback_tenant"), "answer_feedback", ["tenant"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_answer_feedback_tenant"), table_name="answer_feedback")
    op.drop_index(op.f("ix_answer_feedback_trace_id"), table_name="answer_feedback")
    op.drop_table("answer_feedback")
