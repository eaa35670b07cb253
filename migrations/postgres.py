"""What the migrations that protect tables on PostgreSQL share: the application role, its grants, and the
append-only triggers of the audit tables.

Migrations that already ran call these too, so what they send must stay as it is: new protection belongs in a new
helper (or in the new migration itself), never in an edit of one below.

Usage (in a migration, on PostgreSQL only):
    create_app_role()
    grant_only("audit_runs", "SELECT, INSERT, DELETE")
    append_only_function(("audit_traces", "audit_steps", "audit_events"))
    add_append_only_triggers("audit_events")
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

APP_ROLE = "docqa_app"
APPEND_ONLY_FUNCTION = "docqa_audit_append_only"


def create_app_role() -> None:
    # Roles are cluster-wide: create the app role once, tolerating a concurrent migration doing the same.
    op.execute(
        f"""
        DO $$ BEGIN
            IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
                CREATE ROLE {APP_ROLE} NOLOGIN;
            END IF;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
        END $$;
        """
    )


def grant_only(tables: str, privileges: str) -> None:
    """Take every privilege on `tables` (comma-separated) from PUBLIC and the app role, then give it `privileges`."""
    op.execute(f"REVOKE ALL ON {tables} FROM PUBLIC")
    op.execute(f"REVOKE ALL ON {tables} FROM {APP_ROLE}")
    op.execute(f"GRANT {privileges} ON {tables} TO {APP_ROLE}")


def append_only_function(retained: Sequence[str], *, replace: bool = True) -> None:
    """The trigger function that rejects UPDATE, DELETE and TRUNCATE, except retention's DELETE on `retained`
    (with `SET LOCAL docqa.audit_retention = 'on'`). `replace=False`: fail if it exists (the first migration)."""
    create = "CREATE OR REPLACE" if replace else "CREATE"
    tables = ", ".join(f"'{table}'" for table in retained)
    op.execute(
        f"""
    {create} FUNCTION {APPEND_ONLY_FUNCTION}() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'DELETE' AND TG_TABLE_NAME IN ({tables})
           AND current_setting('docqa.audit_retention', true) = 'on' THEN
            RETURN OLD;
        END IF;
        RAISE EXCEPTION 'audit rows are append-only: % on % rejected', TG_OP, TG_TABLE_NAME
            USING ERRCODE = 'insufficient_privilege';
    END
    $$
"""
    )


def add_append_only_triggers(table: str) -> None:
    op.execute(
        f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {APPEND_ONLY_FUNCTION}()"
    )
    op.execute(
        f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
        f"FOR EACH STATEMENT EXECUTE FUNCTION {APPEND_ONLY_FUNCTION}()"
    )


def drop_append_only_triggers(table: str) -> None:
    op.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table}")
    op.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table}")
