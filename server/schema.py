"""Database schema management: every model module, and running the Alembic migrations.

Usage:
    from docqa.server.schema import upgrade_database
    upgrade_database(settings)  # what `docqa db upgrade` runs; creates the default SQLite database too
"""

from __future__ import annotations

import importlib
from pathlib import Path

from alembic import command
from alembic.config import Config

from docqa.settings import Settings

# Every module that defines tables on `docqa.db.Base`: autogenerate and the no-difference tests see these.
MODEL_MODULES = (
    "docqa.server.audit.models",
    "docqa.server.accounts.models",
    "docqa.ingestion.models",
)
_REPO_ROOT = Path(__file__).resolve().parent.parent


def import_models() -> None:
    for module in MODEL_MODULES:
        importlib.import_module(module)


def alembic_config(settings: Settings) -> Config:
    url = settings.resolved_database_url()
    if url.startswith("sqlite:///"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    config = Config(str(_REPO_ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(_REPO_ROOT / "migrations"))
    # ConfigParser interpolation would read '%' in a password as a reference.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_database(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)


def downgrade_database(settings: Settings, revision: str) -> None:
    command.downgrade(alembic_config(settings), revision)
