"""Real server processes for integration tests and benchmarks: a fresh PostgreSQL database and gunicorn.

Usage:
    with postgres_database() as url, gunicorn_server(env, free_port()) as server:
        httpx.get(f"{server.base_url}/healthz")
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

POSTGRES_ADMIN_DSN = os.environ.get("DOCQA_TEST_POSTGRES_DSN", "host=127.0.0.1 port=5432 user=postgres dbname=test")
REPO_ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def postgres_available() -> bool:
    try:
        import psycopg

        with psycopg.connect(POSTGRES_ADMIN_DSN, connect_timeout=3):
            return True
    except Exception:
        return False


@contextmanager
def postgres_database() -> Iterator[str]:
    """A new, empty database on the loopback PostgreSQL server, dropped afterwards; yields its SQLAlchemy URL."""
    import psycopg

    name = f"docqa_srv_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    finally:
        from docqa.db import _engine_for

        _engine_for.cache_clear()
        with psycopg.connect(POSTGRES_ADMIN_DSN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@dataclass(frozen=True)
class LiveServer:
    base_url: str
    pid: int
    log_path: Path | None = None

    def log_tail(self, lines: int = 60) -> str:
        """The end of the server's log, for a failing test's message."""
        if self.log_path is None or not self.log_path.exists():
            return "(no server log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


@contextmanager
def gunicorn_server(env: dict[str, str], port: int, startup_timeout_s: float = 180.0,
                    log_path: Path | None = None) -> Iterator[LiveServer]:
    """Run `docqa.server.app:create_app()` under gunicorn with `env` on loopback; yields it once every check
    of /readyz passes."""
    full_env = {**os.environ, **env, "DOCQA_SERVER_HOST": "127.0.0.1", "DOCQA_SERVER_PORT": str(port)}
    log = open(log_path, "wb") if log_path else subprocess.DEVNULL  # noqa: SIM115 - closed below
    process = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "-c", "python:docqa.server.gunicorn_conf", "docqa.server.app:create_app()"],
        env=full_env, cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + startup_timeout_s
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"gunicorn exited with {process.returncode}; see {log_path}")
            try:
                if httpx.get(f"{base_url}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn not ready after {startup_timeout_s:g} s; see {log_path}")
            time.sleep(0.3)
        yield LiveServer(base_url=base_url, pid=process.pid, log_path=log_path)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if log_path:
            log.close()


def worker_pids(master_pid: int) -> list[int]:
    """Child processes of a gunicorn master (its workers), from /proc."""
    children = Path(f"/proc/{master_pid}/task/{master_pid}/children")
    return [int(pid) for pid in children.read_text().split()] if children.exists() else []
