"""Migration 0004 on a real PostgreSQL: user ids become per tenant, existing accounts keep working, and back."""

from __future__ import annotations

import pytest

from docqa.schema import downgrade_database, upgrade_database
from docqa.settings import Settings
from tests.support.accounts_migration import (
    BEFORE,
    assert_ids_are_per_tenant,
    assert_old_accounts_kept,
    seed_old_accounts,
)
from tests.support.audit import schema_differences
from tests.support.postgres import throwaway_database

pytestmark = pytest.mark.integration


def test_existing_accounts_are_kept_and_ids_become_per_tenant(tmp_path):
    with throwaway_database("accounts") as url:
        settings = Settings(data_dir=tmp_path, database_url=url)
        upgrade_database(settings, BEFORE)
        seed_old_accounts(url)
        upgrade_database(settings)
        assert schema_differences(url) == []
        assert_old_accounts_kept(url, scoped=True)
        downgrade_database(settings, BEFORE)
        assert_old_accounts_kept(url, scoped=False)
        upgrade_database(settings)
        assert_ids_are_per_tenant(url)
