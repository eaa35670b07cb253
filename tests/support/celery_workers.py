"""Real `docqa worker` processes for ingestion tests (tests only).

Usage:
    worker = WorkerProcess(env, log_path).start()
    worker.kill()      # SIGKILL to the whole process group (the Celery parent and its pool children)
    worker.stop()      # graceful: SIGTERM, then SIGKILL after a grace period
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis

REDIS_URL = "redis://127.0.0.1:6379"


def redis_broker_url(db: int = 11) -> str:
    """A Redis database on loopback for ingestion tests; skips the test when Redis is not reachable."""
    try:
        redis.Redis.from_url(f"{REDIS_URL}/{db}", socket_connect_timeout=2).ping()
    except redis.RedisError as exc:
        pytest.skip(f"Redis is not reachable on 127.0.0.1:6379: {exc}")
    return f"{REDIS_URL}/{db}"


class WorkerProcess:
    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "docqa.cli", "worker", "--concurrency", "1", "--loglevel", "INFO"],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        return self

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=30)

    def stop(self, grace_s: float = 20.0) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()

    def rss_bytes(self) -> int:
        """Resident memory of the worker's process group (parent and pool children)."""
        if self.process is None:
            return 0
        total = 0
        for status in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = status.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.process.pid:  # process group id
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")
        return total

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def wait_until(predicate, timeout_s: float, what: str, poll_s: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(poll_s)
