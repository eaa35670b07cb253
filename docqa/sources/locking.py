"""One sync at a time per source: a lease in the source's row (`lock_owner`, `lock_until`).

Taking the lease is one conditional UPDATE, atomic on PostgreSQL and SQLite alike, so two schedulers (Celery
beat on two hosts, cron and `docqa serve`) never sync one source at once. A lease whose holder died is taken over
when it expires, or at once when the holder was a process of this host that no longer exists (a killed sync is
rerun without waiting).
"""

from __future__ import annotations

import os
import socket
import threading
from datetime import UTC, datetime, timedelta

from sqlalchemy import or_, update
from sqlalchemy.orm import Session

from docqa.errors import DocqaError
from docqa.sources.models import SyncSource

LEASE = timedelta(minutes=30)


class SourceBusyError(DocqaError):
    code = "source_busy"
    http_status = 409


def lock_owner_id() -> str:
    """This thread of this process on this host, as the lease names its holder."""
    return f"{socket.gethostname()}:{os.getpid()}:{threading.get_ident()}"


def take_lease(session: Session, row: SyncSource, owner: str) -> None:
    """Take (or renew) the source's lease for `owner`; raises `SourceBusyError` while another holder has it."""
    now = datetime.now(UTC)
    taken = session.execute(
        update(SyncSource)
        .where(SyncSource.id == row.id,
               or_(SyncSource.lock_owner.is_(None), SyncSource.lock_until < now, SyncSource.lock_owner == owner))
        .values(lock_owner=owner, lock_until=now + LEASE)
        .execution_options(synchronize_session=False)
    ).rowcount
    if taken != 1:
        session.refresh(row)
        holder = row.lock_owner
        if holder is None or not _dead_here(holder):
            raise SourceBusyError(f"source {row.name!r} is being synced by {holder}")
        taken = session.execute(
            update(SyncSource).where(SyncSource.id == row.id, SyncSource.lock_owner == holder)
            .values(lock_owner=owner, lock_until=now + LEASE).execution_options(synchronize_session=False)
        ).rowcount
        if taken != 1:
            raise SourceBusyError(f"source {row.name!r} is being synced by another process")
    session.refresh(row)


def release_lease(session: Session, row_id: int, owner: str) -> None:
    session.execute(update(SyncSource).where(SyncSource.id == row_id, SyncSource.lock_owner == owner)
                    .values(lock_owner=None, lock_until=None).execution_options(synchronize_session=False))


def _dead_here(holder: str) -> bool:
    host, _, rest = holder.partition(":")
    pid_text = rest.split(":", 1)[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False
