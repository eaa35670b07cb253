"""What the store benchmarks share: a child process that speaks one JSON object per line, and the memory and
latency figures they print.

    child = JsonLineChild([sys.executable, __file__, "--worker", ...])
    child.expect("first_query")   # -> the event's fields
    child.send("queries")
    child.stop()
"""

from __future__ import annotations

import json
import statistics
import subprocess
from pathlib import Path
from typing import Any


class JsonLineChild:
    """A child process driven through stdin lines; it answers with JSON events on stdout."""

    def __init__(self, command: list[str], exit_timeout_s: float = 30.0) -> None:
        self.exit_timeout_s = exit_timeout_s
        self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def expect(self, event: str) -> dict[str, Any]:
        """The child's next event, which must be `event`."""
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"a worker exited (code {self.process.wait()}) before '{event}'")
        message = json.loads(line)
        if message.get("event") != event:
            raise RuntimeError(f"a worker said {message}, expected '{event}'")
        return message

    def send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        """Ask the child to exit; kill it when it does not within the timeout."""
        if self.process.poll() is None:
            self.send("exit")
            try:
                self.process.wait(timeout=self.exit_timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def memory_kb(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile, RssShmem (status) and Pss, Pss_Anon, Pss_File (smaps_rollup) of a process, in kB."""
    found: dict[str, int] = {}
    for name, keys in (
        ("status", ("VmRSS", "RssAnon", "RssFile", "RssShmem")),
        ("smaps_rollup", ("Pss", "Pss_Anon", "Pss_File")),
    ):
        for line in Path(f"/proc/{pid}/{name}").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in keys:
                found[key] = int(value.split()[0])
    return found


def percentiles(samples: list[float]) -> str:
    """p50 and p95 of durations in seconds, printed in milliseconds."""
    ms = sorted(s * 1000 for s in samples)
    p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
    return f"p50 {statistics.median(ms):8.2f} ms  p95 {p95:8.2f} ms  (n={len(ms)})"
