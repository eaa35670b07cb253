"""Runs in flight: the `started` row of every question, which process owns it, and settling it exactly once.

A run is written `started` (an `AuditRun` row, committed) before its pipeline runs. Its outcome is one trace
whose id is the run's id, appended to the chain in the transaction that deletes the row (`settle_run`), so at
every instant a question is either started or traced, never both, never twice: a second writer finds the row
gone and the trace there, and its transaction is rolled back.

A row whose process died (SIGKILL, OOM kill, power loss) is found by `owner_gone`:
- same machine, same boot, same PID namespace: the owner is gone when its PID no longer runs, is a zombie, or
  now names a younger process (its start time since boot differs);
- same host name, another boot id: the machine restarted since, so every process of the old boot is gone
  (servers sharing a database need distinct host names, as containers and pods have by default);
- anything else (another server sharing the database, another container): PIDs mean nothing here, so the run
  is closed only once its own deadline (the server's query timeout) is `grace_s` past. A run without a
  deadline (`docqa ask`) is left to its own machine.
Without /proc (not Linux) there is no boot id, so only the deadline rule applies. No heartbeat is written:
process identity answers for this machine at once, and the deadline every server run already has answers for
the others.

Usage:
    owner = Owner.current()
    session.add(AuditRun(id=run_id, ..., **owner.columns()))
    gone = [run for run in open_runs(session) if owner_gone(run, owner, datetime.now(UTC))]
"""

from __future__ import annotations

import os
import socket
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from pathlib import Path

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from docqa.audit.models import AuditRun, AuditTrace

# How long past its deadline a run of another machine may still be writing its own trace.
DEFAULT_GRACE_S = 60.0


class RunAlreadySettled(RuntimeError):
    """The run's outcome was traced by another writer first (e.g. closed as interrupted)."""


@dataclass(frozen=True)
class Owner:
    """Who runs a question: enough to tell later, from any process, whether that process still exists."""

    host: str
    boot_id: str
    pid_ns: str
    pid: int
    pid_start: int  # start time in clock ticks since boot (/proc/PID/stat field 22); 0 where unknown

    @classmethod
    def current(cls) -> Owner:
        return _owner_of(os.getpid())  # keyed by PID: a forked worker is another owner

    @classmethod
    def of(cls, run: AuditRun) -> Owner:
        return cls(host=run.host, boot_id=run.boot_id, pid_ns=run.pid_ns, pid=run.pid, pid_start=run.pid_start)

    def columns(self) -> dict[str, str | int]:
        return asdict(self)

    def describe(self) -> str:
        return f"process {self.pid} on {self.host}"


@lru_cache(maxsize=4)
def _owner_of(pid: int) -> Owner:
    return Owner(host=socket.gethostname()[:255], boot_id=_boot_id(), pid_ns=_pid_namespace(), pid=pid,
                 pid_start=process_start(pid) or 0)


def owner_gone(run: AuditRun, here: Owner, now: datetime, grace_s: float = DEFAULT_GRACE_S) -> bool:
    """True when the process that started `run` certainly no longer runs it (see the module docstring)."""
    owner = Owner.of(run)
    if owner.host == here.host and owner.boot_id and here.boot_id:
        if owner.boot_id != here.boot_id:
            return True
        if owner.pid_ns == here.pid_ns:
            return not _still_running(owner)
    deadline = run.deadline_at
    if deadline is None:
        return False
    if deadline.tzinfo is None:  # SQLite hands back naive UTC
        deadline = deadline.replace(tzinfo=UTC)
    return now > deadline + timedelta(seconds=grace_s)


def open_runs(session: Session) -> list[AuditRun]:
    return list(session.scalars(select(AuditRun).order_by(AuditRun.asked_at)))


def settle_run(session: Session, run_id: str) -> None:
    """Take the run's `started` row in the caller's transaction, which then appends the run's one trace.

    A run stopped before its row was written has none: its trace is still its only outcome.

    :raises RunAlreadySettled: another writer traced this run first; roll back.
    """
    deleted = session.execute(delete(AuditRun).where(AuditRun.id == run_id)).rowcount
    if not deleted and session.scalar(select(AuditTrace.id).where(AuditTrace.id == run_id)) is not None:
        raise RunAlreadySettled(f"run {run_id} already has its trace")


def process_start(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None when no such process runs (or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:  # hidden from us (hidepid): it exists, its start time is unknown
        return 0
    # The command name (field 2) is parenthesised and may hold spaces: count fields after its last ')'.
    fields = stat[stat.rfind(")") + 2:].split()
    if fields[0] in ("Z", "X"):
        return None
    return int(fields[19])


def _still_running(owner: Owner) -> bool:
    start = process_start(owner.pid)
    if start is None:
        return False
    return not owner.pid_start or not start or start == owner.pid_start


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:64]
    except OSError:
        return ""


def _pid_namespace() -> str:
    try:
        return os.readlink("/proc/self/ns/pid")[:64]
    except OSError:
        return ""
