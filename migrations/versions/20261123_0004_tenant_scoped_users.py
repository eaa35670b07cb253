"""Tenant-scoped user ids: users are keyed by (tenant_id, id); keys and memberships reference that pair.

Before, a user id was unique across the server, so one tenant's admin creating `alice` learned that another
tenant had one. Existing rows keep their ids; keys and memberships take their user's tenant.

The foreign keys to users are dropped before the users' primary key changes and added again after it: on
SQLite, batch mode rebuilds a table by dropping it, which with foreign keys enforced would cascade-delete the
keys and memberships still referencing it.

Revision ID: 0004_tenant_scoped_users
Revises: 0003_ingestion_jobs
Create Date: 2026-11-23
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '0004_tenant_scoped_users'
down_revision: str | Sequence[str] | None = '0003_ingestion_jobs'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

USER_REF = ('account_api_keys', 'account_group_members')


def _fill_tenant(table: str) -> None:
    op.execute(f'UPDATE {table} SET tenant_id = (SELECT u.tenant_id FROM account_users u WHERE u.id = {table}.user_id)')


def upgrade() -> None:
    for table in USER_REF:
        op.add_column(table, sa.Column('tenant_id', sa.String(length=64), nullable=True))
        _fill_tenant(table)
    with op.batch_alter_table('account_api_keys') as batch_op:
        batch_op.alter_column('tenant_id', existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_constraint(op.f('fk_account_api_keys_user_id_account_users'), type_='foreignkey')
        batch_op.drop_index(op.f('ix_account_api_keys_user_id'))
    with op.batch_alter_table('account_group_members') as batch_op:
        batch_op.alter_column('tenant_id', existing_type=sa.String(length=64), nullable=False)
        batch_op.drop_constraint(op.f('fk_account_group_members_user_id_account_users'), type_='foreignkey')
        batch_op.drop_constraint(op.f('pk_account_group_members'), type_='primary')
        batch_op.create_primary_key(op.f('pk_account_group_members'), ['group_id', 'tenant_id', 'user_id'])

    with op.batch_alter_table('account_users') as batch_op:
        batch_op.drop_index(op.f('ix_account_users_tenant_id'))
        batch_op.drop_constraint(op.f('pk_account_users'), type_='primary')
        batch_op.create_primary_key(op.f('pk_account_users'), ['tenant_id', 'id'])

    with op.batch_alter_table('account_api_keys') as batch_op:
        batch_op.create_index(op.f('ix_account_api_keys_tenant_id'), ['tenant_id', 'user_id'], unique=False)
        batch_op.create_foreign_key(op.f('fk_account_api_keys_tenant_id_account_users'), 'account_users',
                                    ['tenant_id', 'user_id'], ['tenant_id', 'id'], ondelete='CASCADE')
    with op.batch_alter_table('account_group_members') as batch_op:
        batch_op.create_foreign_key(op.f('fk_account_group_members_tenant_id_account_users'), 'account_users',
                                    ['tenant_id', 'user_id'], ['tenant_id', 'id'], ondelete='CASCADE')


def downgrade() -> None:
    """Back to server-wide user ids; fails while two tenants have a user of the same id."""
    with op.batch_alter_table('account_group_members') as batch_op:
        batch_op.drop_constraint(op.f('fk_account_group_members_tenant_id_account_users'), type_='foreignkey')
    with op.batch_alter_table('account_api_keys') as batch_op:
        batch_op.drop_constraint(op.f('fk_account_api_keys_tenant_id_account_users'), type_='foreignkey')
        batch_op.drop_index(op.f('ix_account_api_keys_tenant_id'))

    with op.batch_alter_table('account_users') as batch_op:
        batch_op.drop_constraint(op.f('pk_account_users'), type_='primary')
        batch_op.create_primary_key(op.f('pk_account_users'), ['id'])
        batch_op.create_index(op.f('ix_account_users_tenant_id'), ['tenant_id'], unique=False)

    with op.batch_alter_table('account_group_members') as batch_op:
        batch_op.drop_constraint(op.f('pk_account_group_members'), type_='primary')
        batch_op.create_primary_key(op.f('pk_account_group_members'), ['group_id', 'user_id'])
        batch_op.create_foreign_key(op.f('fk_account_group_members_user_id_account_users'), 'account_users',
                                    ['user_id'], ['id'], ondelete='CASCADE')
        batch_op.drop_column('tenant_id')
    with op.batch_alter_table('account_api_keys') as batch_op:
        batch_op.create_index(op.f('ix_account_api_keys_user_id'), ['user_id'], unique=False)
        batch_op.create_foreign_key(op.f('fk_account_api_keys_user_id_account_users'), 'account_users',
                                    ['user_id'], ['id'], ondelete='CASCADE')
        batch_op.drop_column('tenant_id')
