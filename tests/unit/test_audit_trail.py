"""Audit trail on SQLite: the shared contract, plus keys, canonical form, migrations and the CLI."""

from __future__ import annotations

import json
import os
import re
import stat

import pytest
from sqlalchemy import create_engine, inspect

from docqa.audit import cli
from docqa.audit.canonical import canonical_bytes
from docqa.audit.keys import hmac_key, signing_key
from docqa.audit.models import AUDIT_TABLES
from docqa.audit.recorder import TraceRecord, record_answer
from docqa.audit.retention import retain
from docqa.audit.scrub import clean, secret_values
from docqa.audit.verify import verify_for_tenant
from docqa.errors import ConfigurationError
from docqa.schema import downgrade_database, upgrade_database
from docqa.server.config import ServerSettings
from docqa.settings import Settings
from tests.support.audit import SECRET, fill, schema_differences, session_for, tamper, tree_result, utc
from tests.support.audit_contract import AuditTrailContract


@pytest.fixture
def settings(tmp_path):
    settings = Settings(data_dir=tmp_path / "data", llm_api_key=SECRET, database_url=None)
    upgrade_database(settings)
    return settings


class TestAuditTrailOnSQLite(AuditTrailContract):
    pass


class TestMigrations:
    def test_upgrade_downgrade_upgrade_and_models_match(self, tmp_path):
        settings = Settings(data_dir=tmp_path)
        url = settings.resolved_database_url()
        upgrade_database(settings)
        assert set(AUDIT_TABLES) <= set(inspect(create_engine(url)).get_table_names())
        downgrade_database(settings, "base")
        assert not set(AUDIT_TABLES) & set(inspect(create_engine(url)).get_table_names())
        upgrade_database(settings)
        assert schema_differences(url) == []

    def test_a_model_change_without_migration_is_noticed(self, tmp_path):
        settings = Settings(data_dir=tmp_path)
        upgrade_database(settings)
        tamper(settings, ("ALTER TABLE audit_anchors ADD COLUMN stray TEXT", {}))
        assert schema_differences(settings.resolved_database_url()) != []


class TestKeys:
    def test_generated_keys_are_private_files_and_stable(self, tmp_path):
        settings = Settings(data_dir=tmp_path)
        first = hmac_key(settings)
        assert hmac_key(settings) == first and len(first) == 64
        for name in ("hmac.key", "signing.key"):
            signing_key(settings)
            mode = stat.S_IMODE(os.stat(tmp_path / "audit" / name).st_mode)
            assert mode == 0o600

    def test_group_readable_key_file_is_refused(self, tmp_path):
        settings = Settings(data_dir=tmp_path)
        hmac_key(settings)
        os.chmod(tmp_path / "audit" / "hmac.key", 0o644)
        with pytest.raises(ConfigurationError, match="chmod 600"):
            hmac_key(settings)

    def test_configured_keys_win_and_short_ones_are_refused(self, tmp_path):
        assert hmac_key(Settings(data_dir=tmp_path, audit_hmac_key="k" * 40)) == b"k" * 40
        with pytest.raises(ConfigurationError):
            hmac_key(Settings(data_dir=tmp_path, audit_hmac_key="short"))
        with pytest.raises(ConfigurationError):
            signing_key(Settings(data_dir=tmp_path, audit_signing_key="not-a-key"))
        assert not (tmp_path / "audit").exists()


class TestCanonicalForm:
    def test_sorted_compact_and_stable_floats(self):
        expected = '{"a":[1,1.0,"é"],"b":0.30000000000000004}'.encode()
        assert canonical_bytes({"b": 0.1 + 0.2, "a": [1, 1.0, "é"]}) == expected

    def test_values_a_database_would_reject_are_neutralised(self):
        cleaned = clean({"x": float("nan"), "y": "a\x00b", "z": (1, 2), "token": "t"}, [])
        assert cleaned == {"x": "nan", "y": "a\ufffdb", "z": [1, 2], "token": "***"}

    def test_secret_values_include_urls_passwords(self):
        settings = Settings(database_url="postgresql+psycopg://app:pg-pass-123@db/docqa", llm_api_key=SECRET)
        assert set(secret_values(settings)) == {"pg-pass-123", SECRET}
        assert clean("connect postgresql://app:pg-pass-123@db", secret_values(settings)) == "connect postgresql://***@db"

    def test_secret_values_include_the_rate_limit_redis_password(self):
        settings = ServerSettings(rate_limit_redis_url="redis://:redis-pass-456@cache:6379/1")
        assert "redis-pass-456" in secret_values(settings)


class TestTenantVerification:
    """An auditor's report covers the whole chain but tells only their tenant's figures; the CLI tells everything."""

    def record_for(self, settings, tenant, asked_at=None):
        return record_answer(settings, TraceRecord(asked_by="someone", tenant=tenant, question="q",
                                                   pipeline="tree_test", models={}, result=tree_result(),
                                                   asked_at=asked_at))

    def test_tenant_report_leaves_out_server_wide_figures(self, settings, tmp_path, capsys):
        self.record_for(settings, "acme", asked_at=utc(2025, 1, 1))
        retain(settings, before=utc(2026, 1, 1), archive=tmp_path / "old.jsonl")
        ids = [self.record_for(settings, tenant) for tenant in ("acme", "globex", "acme", "globex", "acme")]
        with session_for(settings) as session:
            report = verify_for_tenant(session, hmac_key(settings), "globex")
        assert (report.ok, report.checked, report.broken) == (True, 2, None)
        assert report.notes and not re.search(r"\d", " ".join(report.notes))
        assert TestCli().run(settings, "audit", "verify", "--json") == 0
        full = json.loads(capsys.readouterr().out)
        # The five traces and the retention run's event (link 2).
        assert (full["checked"], full["start_seq"], full["head_seq"]) == (6, 1, 7)

        tamper(settings, ("DELETE FROM audit_steps WHERE trace_id = :id", {"id": ids[1]}),
               ("DELETE FROM audit_traces WHERE id = :id", {"id": ids[1]}))
        with session_for(settings) as session:
            acme = verify_for_tenant(session, hmac_key(settings), "acme")
            globex = verify_for_tenant(session, hmac_key(settings), "globex")
        # The link after the deleted one is acme's: acme is told which trace; globex only that the chain broke.
        assert (acme.ok, acme.checked, acme.broken.trace_id) == (False, 1, ids[2])
        assert (globex.ok, globex.checked, globex.broken.trace_id) == (False, 0, None)
        assert not re.search(r"\d", acme.broken.reason + globex.broken.reason)


class TestCli:
    def run(self, settings, *argv):
        import argparse

        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers(dest="command")
        cli.add_audit_commands(sub)
        cli.add_db_commands(sub)
        args = parser.parse_args(list(argv))
        return args.handler(args, settings)

    def test_checkpoint_verify_export_retain_and_broken_chain_exit_code(self, settings, tmp_path, capsys):
        fill(settings, 3)
        assert self.run(settings, "audit", "checkpoint", "--out", str(tmp_path / "cp.json")) == 0
        assert self.run(settings, "audit", "verify", "--checkpoint", str(tmp_path / "cp.json")) == 0
        assert self.run(settings, "audit", "export", "--out", str(tmp_path / "all.jsonl")) == 0
        # Three traces and the checkpoint's signing (an `audit.checkpoint` event, link 4).
        assert len((tmp_path / "all.jsonl").read_text().splitlines()) == 4
        # Archiving links younger than the retention floor is refused (usage error) until the floor is lowered.
        assert self.run(settings, "audit", "retain", "--before", "2999-01-01",
                        "--archive", str(tmp_path / "arch.jsonl")) == 2
        no_floor = settings.model_copy(update={"audit_retention_floor_days": 0})
        assert self.run(no_floor, "audit", "retain", "--before", "2999-01-01",
                        "--archive", str(tmp_path / "arch.jsonl")) == 0
        assert self.run(settings, "audit", "verify", "--archive", str(tmp_path / "arch.jsonl")) == 0
        assert self.run(no_floor, "audit", "retain", "--before", "2999-01-01",
                        "--archive", str(tmp_path / "arch.jsonl")) == 2
        fill(settings, 2)  # links 6 and 7, after the retention run's event (link 5)
        tamper(settings, ("UPDATE audit_traces SET question = 'x' WHERE seq = 6", {}))
        capsys.readouterr()
        assert self.run(settings, "audit", "verify") == 1
        assert "BROKEN at link 6" in capsys.readouterr().out
        assert self.run(settings, "audit", "checkpoint", "--out", str(tmp_path / "cp2.json")) == 1
        assert self.run(settings, "audit", "verify", "--checkpoint", str(tmp_path / "missing.json")) == 2

    def test_db_upgrade_creates_the_default_database(self, tmp_path):
        settings = Settings(data_dir=tmp_path / "fresh")
        assert self.run(settings, "db", "upgrade") == 0
        assert (tmp_path / "fresh" / "docqa.sqlite3").exists()
