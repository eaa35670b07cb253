"""Accounts: tenants, users, groups and API keys (stored as SHA-256 digests of the secret only).

Revision ID: 0002_accounts
Revises: 0001_audit_trail
Create Date: 2026-11-22
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0002_accounts'
down_revision: str | Sequence[str] | None = '0001_audit_trail'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('account_tenants',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_account_tenants'))
    )
    op.create_table('account_groups',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('tenant_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['account_tenants.id'], name=op.f('fk_account_groups_tenant_id_account_tenants')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_account_groups')),
    sa.UniqueConstraint('tenant_id', 'name', name=op.f('uq_account_groups_tenant_id'))
    )
    op.create_index(op.f('ix_account_groups_tenant_id'), 'account_groups', ['tenant_id'], unique=False)

    op.create_table('account_users',
    sa.Column('id', sa.String(length=64), nullable=False),
    sa.Column('tenant_id', sa.String(length=64), nullable=False),
    sa.Column('role', sa.String(length=16), nullable=False),
    sa.Column('display_name', sa.String(length=200), nullable=False),
    sa.Column('active', sa.Boolean(), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['account_tenants.id'], name=op.f('fk_account_users_tenant_id_account_tenants')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_account_users'))
    )
    op.create_index(op.f('ix_account_users_tenant_id'), 'account_users', ['tenant_id'], unique=False)

    op.create_table('account_api_keys',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('secret_sha256', sa.String(length=64), nullable=False),
    sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
    sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
    sa.ForeignKeyConstraint(['user_id'], ['account_users.id'], name=op.f('fk_account_api_keys_user_id_account_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_account_api_keys'))
    )
    op.create_index(op.f('ix_account_api_keys_user_id'), 'account_api_keys', ['user_id'], unique=False)

    op.create_table('account_group_members',
    sa.Column('group_id', sa.Integer(), nullable=False),
    sa.Column('user_id', sa.String(length=64), nullable=False),
    sa.ForeignKeyConstraint(['group_id'], ['account_groups.id'], name=op.f('fk_account_group_members_group_id_account_groups'), ondelete='CASCADE'),
    sa.ForeignKeyConstraint(['user_id'], ['account_users.id'], name=op.f('fk_account_group_members_user_id_account_users'), ondelete='CASCADE'),
    sa.PrimaryKeyConstraint('group_id', 'user_id', name=op.f('pk_account_group_members'))
    )


def downgrade() -> None:
    op.drop_table('account_group_members')
    op.drop_index(op.f('ix_account_api_keys_user_id'), table_name='account_api_keys')

    op.drop_table('account_api_keys')
    op.drop_index(op.f('ix_account_users_tenant_id'), table_name='account_users')

    op.drop_table('account_users')
    op.drop_index(op.f('ix_account_groups_tenant_id'), table_name='account_groups')

    op.drop_table('account_groups')
    op.drop_table('account_tenants')
