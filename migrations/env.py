"""Alembic environment: one schema for every model (audit trail, ingestion jobs, accounts).

The URL comes from the `sqlalchemy.url` option when a caller sets one (`docqa.schema`), else from
docqa settings. Model modules are imported by `import_models` so autogenerate sees every table.
"""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from docqa.db import Base, make_engine
from docqa.schema import import_models
from docqa.settings import Settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logging", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

import_models()
target_metadata = Base.metadata


def _url() -> str:
    return config.get_main_option("sqlalchemy.url") or Settings().resolved_database_url()


def run_migrations_offline() -> None:
    context.configure(url=_url(), target_metadata=target_metadata, literal_binds=True, compare_type=True)
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    engine = make_engine(_url())
    try:
        with engine.connect() as connection:
            context.configure(
                connection=connection,
                target_metadata=target_metadata,
                compare_type=True,
                # SQLite cannot ALTER most things in place; batch mode rebuilds the table.
                render_as_batch=connection.dialect.name == "sqlite",
            )
            with context.begin_transaction():
                context.run_migrations()
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
