"""Throwaway PostgreSQL databases on the loopback server (tests only).

Usage:
    with throwaway_database("audit") as url:  # skips the test when PostgreSQL is not reachable
        ...
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

ADMIN_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def database_url(name: str, user: str = "postgres") -> str:
    return f"postgresql+psycopg://{user}@127.0.0.1:5432/{name}"


@contextmanager
def throwaway_database(prefix: str) -> Iterator[str]:
    name = f"docqa_{prefix}_{uuid.uuid4().hex[:12]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except OperationalError as exc:
        admin.dispose()
        pytest.skip(f"PostgreSQL is not reachable on 127.0.0.1:5432 as postgres: {exc.orig}")
    try:
        yield database_url(name)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def login_role(member_of: str) -> Iterator[str]:
    """A temporary login role that is a member of `member_of` (trust authentication on loopback)."""
    name = f"docqa_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE ROLE {name} LOGIN IN ROLE {member_of}"))
    try:
        yield name
    finally:
        with admin.connect() as conn:
            conn.execute(text(f"DROP ROLE IF EXISTS {name}"))
        admin.dispose()
