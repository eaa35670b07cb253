"""Database schema management: every model module, and running the Alembic migrations.

Usage:
    from docqa.schema import upgrade_database
    upgrade_database(settings)  # what `docqa db upgrade` runs; creates the default SQLite database too
"""

from __future__ import annotations

import importlib
from importlib import resources
from pathlib import Path

from alembic import command
from alembic.config import Config
from filelock import FileLock

from docqa.settings import Settings

# Every module that defines tables on `docqa.db.Base`: autogenerate and the no-difference tests see these.
MODEL_MODULES = (
    "docqa.audit.models",
    "docqa.accounts.models",
    "docqa.ingestion.models",
    "docqa.feedback",
    "docqa.conversations_store",
    "docqa.sources.models",
)


def import_models() -> None:
    for module in MODEL_MODULES:
        importlib.import_module(module)


def migrations_dir() -> Path:
    """The Alembic script directory: the top-level migrations/ folder, which installs as `docqa.migrations`.

    Located through the import system, so a wheel finds its installed copy and an editable install the checkout's
    folder, whatever the working directory.
    """
    location = resources.files("docqa.migrations")
    if not isinstance(location, Path):
        # Alembic lists and executes the scripts as files; an install that is not unpacked on disk cannot migrate.
        raise RuntimeError(f"docqa.migrations is not a directory on disk: {location!r}")
    return location


def alembic_config(settings: Settings) -> Config:
    url = settings.resolved_database_url()
    if url.startswith("sqlite:///"):
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    # No alembic.ini: an installed docqa has none, and the checkout's (for the `alembic` command) would prepend
    # the working directory to sys.path.
    config = Config()
    config.set_main_option("script_location", str(migrations_dir()))
    # ConfigParser interpolation would read '%' in a password as a reference.
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["configure_logging"] = False
    return config


def upgrade_database(settings: Settings, revision: str = "head") -> None:
    command.upgrade(alembic_config(settings), revision)


_embedded_migrated: set[str] = set()


def ensure_embedded_schema(settings: Settings) -> None:
    """Migrate the embedded SQLite database (no `DOCQA_DATABASE_URL`) once per process, on first use.

    The embedded default needs no setup step, so the first session of the audit trail or of ingestion runs the
    migrations; a file lock serialises processes that race. A configured database is migrated by `docqa db upgrade`.
    """
    url = settings.resolved_database_url()
    if url in _embedded_migrated:
        return
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    with FileLock(str(settings.data_dir / ".migrate.lock")):
        upgrade_database(settings)
    _embedded_migrated.add(url)


def downgrade_database(settings: Settings, revision: str) -> None:
    command.downgrade(alembic_config(settings), revision)
