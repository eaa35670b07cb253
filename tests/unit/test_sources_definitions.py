"""Source definitions: schedules, type settings, ACL maps, and the migration that stores them."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from docqa.db import Base, make_engine
from docqa.schema import downgrade_database, import_models, upgrade_database
from docqa.settings import Settings
from docqa.sources.acl import AclMap, AclMapError, access_for
from docqa.sources.definitions import (
    InvalidSourceError,
    SourceExistsError,
    check_config,
    define_source,
    list_sources,
    parse_every,
)


def test_schedule_durations() -> None:
    assert parse_every("15m") == 900
    assert parse_every("1h30m") == 5400
    assert parse_every("2d") == 172800
    assert parse_every(None) is None
    for bad in ("15", "m15", "10s", "1w", "15m garbage"):
        with pytest.raises(InvalidSourceError):
            parse_every(bad)


def test_type_settings_are_checked() -> None:
    assert check_config("git", {"url": "/srv/repo.git"})["branch"] == "main"
    assert check_config("imap", {"host": "h", "user": "u", "password_env": "PW"})["port"] == 993
    assert check_config("website", {"url": "http://intranet/"})["max_pages"] == 500
    with pytest.raises(InvalidSourceError, match="needs --path"):
        check_config("folder", {})
    with pytest.raises(InvalidSourceError, match="has no setting url"):
        check_config("folder", {"path": "/x", "url": "http://x"})
    with pytest.raises(InvalidSourceError, match="cannot start with '-'"):
        check_config("git", {"url": "--upload-pack=evil"})
    with pytest.raises(InvalidSourceError, match="invalid branch"):
        check_config("git", {"url": "/srv/repo.git", "branch": "main:refs/heads/other"})
    with pytest.raises(InvalidSourceError, match="http"):
        check_config("website", {"url": "file:///etc/passwd"})
    with pytest.raises(InvalidSourceError, match="environment variable"):
        check_config("imap", {"host": "h", "user": "u", "password_env": "not a name"})
    with pytest.raises(InvalidSourceError, match="unknown source type"):
        check_config("s3", {})


def test_acl_map_first_matching_rule_decides() -> None:
    rules = AclMap.parse("# comment\nfinance/**  group:finance\nhr/*.pdf group:hr user:dana\n*  group:staff\n")
    assert rules.principals_for("finance/2026/budget.xlsx", ["everyone"]) == ["group:finance"]
    assert rules.principals_for("hr/contract.pdf", ["everyone"]) == ["group:hr", "user:dana"]
    assert rules.principals_for("readme.md", ["everyone"]) == ["group:staff"]
    assert access_for("hr/a.pdf", ["group:x"], rules, hints=("group:disk",)) == ["group:disk", "group:hr",
                                                                                  "user:dana"]
    assert access_for("x", ["group:x"], None) == ["group:x"]
    with pytest.raises(AclMapError, match="line 1"):
        AclMap.parse("finance/**\n")
    with pytest.raises(AclMapError, match="not a principal"):
        AclMap.parse("* finance\n")


def test_definitions_are_validated_and_stored_without_secrets(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path)
    view = define_source(settings, name="mail", type="imap", tenant="acme",
                         config={"host": "imap.example.org", "user": "dana", "password_env": "DANA_PW"}, allow=[])
    assert view["allow"] == ["user:dana"]  # the mailbox owner
    assert view["config"]["password_env"] == "DANA_PW" and "password" not in view["config"]
    with pytest.raises(SourceExistsError):
        define_source(settings, name="mail", type="folder", tenant="acme", config={"path": "/x"}, allow=["everyone"])
    with pytest.raises(InvalidSourceError, match="--allow"):
        define_source(settings, name="open", type="folder", tenant="acme", config={"path": "/x"}, allow=[])
    with pytest.raises(InvalidSourceError, match="source name"):
        define_source(settings, name="Bad Name", type="folder", tenant="acme", config={"path": "/x"},
                      allow=["everyone"])
    with pytest.raises(InvalidSourceError, match="collection"):
        define_source(settings, name="c", type="folder", tenant="acme", config={"path": "/x"}, allow=["everyone"],
                      collection="no spaces")
    assert [v["name"] for v in list_sources(settings, tenant="acme")] == ["mail"]
    assert list_sources(settings, tenant="other") == []


def schema_differences(url: str) -> list:
    import_models()
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    finally:
        engine.dispose()


def test_the_migration_matches_the_models_and_downgrades(tmp_path) -> None:
    settings = Settings(data_dir=tmp_path)
    url = settings.resolved_database_url()
    upgrade_database(settings)
    assert schema_differences(url) == []
    downgrade_database(settings, "0012_ingest_item_crashes")
    engine = make_engine(url)
    tables = set(inspect(engine).get_table_names())
    columns = {c["name"] for c in inspect(engine).get_columns("ingest_jobs")}
    engine.dispose()
    assert not {"sources", "source_entries"} & tables and "source_name" not in columns
    upgrade_database(settings)
    assert schema_differences(url) == []
