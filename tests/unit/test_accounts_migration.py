"""Migration 0004 on SQLite: user ids become per tenant, existing accounts keep working, and back again."""

from __future__ import annotations

from docqa.schema import downgrade_database, upgrade_database
from docqa.settings import Settings
from tests.support.accounts_migration import (
    BEFORE,
    assert_ids_are_per_tenant,
    assert_old_accounts_kept,
    seed_old_accounts,
)
from tests.support.audit import schema_differences


def test_existing_accounts_are_kept_through_upgrade_and_downgrade(tmp_path):
    settings = Settings(data_dir=tmp_path)
    url = settings.resolved_database_url()
    upgrade_database(settings, BEFORE)
    seed_old_accounts(url)
    upgrade_database(settings)
    assert schema_differences(url) == []
    assert_old_accounts_kept(url, scoped=True)
    downgrade_database(settings, BEFORE)
    assert_old_accounts_kept(url, scoped=False)
    upgrade_database(settings)
    assert_old_accounts_kept(url, scoped=True)


def test_after_the_upgrade_two_tenants_may_each_have_a_user_of_the_same_id(tmp_path):
    settings = Settings(data_dir=tmp_path)
    url = settings.resolved_database_url()
    upgrade_database(settings, BEFORE)
    seed_old_accounts(url)
    upgrade_database(settings)
    assert_ids_are_per_tenant(url)
