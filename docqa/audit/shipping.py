"""Shipping audit lines to a SIEM: a file, stdout or an HTTP collector, resumable from the last shipped sequence.

Lines (OCSF or ECS, see `ocsf.py`/`siem.py`) are sent in batches in chain order. Where to resume:

- a file is its own record: the export appends after the last complete line's sequence, and a line cut off by
  a kill is dropped first, so a killed export resumed with `resume=True` leaves no gap and no duplicate;
- stdout and HTTP keep a state file (`{"seq": N}`, replaced atomically) written after each batch was written
  or acknowledged with a 2xx. A kill between the collector's 2xx and the state write re-sends that one batch:
  every line carries `metadata.uid` (OCSF) / `event.id` (ECS) and its sequence, and each request names its
  range in `X-Docqa-Audit-Seq`, so a collector deduplicating on them sees each link once.

Usage:
    sink = HttpSink("https://collector.example/ingest", state=Path("/var/lib/docqa/ocsf.state"))
    with session_factory(settings)() as session:
        shipped = ship(session, sink, render=ocsf_lines, resume=True)
"""

from __future__ import annotations

import json
import os
import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from sqlalchemy.orm import Session

Render = Callable[..., Iterator[tuple[int, bytes]]]
BATCH = 200


class Sink(Protocol):
    def resume_seq(self) -> int:
        """The last sequence already shipped (0: none)."""

    def open(self, resume: bool) -> None: ...

    def send(self, lines: list[bytes], first_seq: int, last_seq: int) -> None:
        """Deliver one batch durably; raising stops the export (what was delivered before stays delivered)."""

    def close(self) -> None: ...


def sequence_of(line: bytes) -> int:
    """The chain sequence an exported line carries (OCSF `metadata.sequence`, ECS `event.sequence`)."""
    record = json.loads(line)
    if "metadata" in record:
        return int(record["metadata"]["sequence"])
    return int(record["event"]["sequence"])


class StateFile:
    """The last shipped sequence of a stream without its own record (stdout, HTTP)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path

    def read(self) -> int:
        if self.path is None or not self.path.exists():
            return 0
        return int(json.loads(self.path.read_text())["seq"])

    def write(self, seq: int) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        tmp.write_text(json.dumps({"seq": seq}))
        os.replace(tmp, self.path)


class FileSink:
    """Appends to a file, fsynced per batch; the file's last complete line says where to resume."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO | None = None

    def resume_seq(self) -> int:
        if not self.path.exists():
            return 0
        last = _last_complete_line(self.path)
        return 0 if last is None else sequence_of(last)

    def open(self, resume: bool) -> None:
        if resume and self.path.exists():
            _drop_partial_tail(self.path)
            self._fh = self.path.open("ab")
        else:
            self._fh = self.path.open("wb")

    def send(self, lines: list[bytes], first_seq: int, last_seq: int) -> None:
        assert self._fh is not None
        self._fh.write(b"".join(lines))
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()


class StdoutSink:
    def __init__(self, state: Path | None = None) -> None:
        self.state = StateFile(state)

    def resume_seq(self) -> int:
        return self.state.read()

    def open(self, resume: bool) -> None:
        pass

    def send(self, lines: list[bytes], first_seq: int, last_seq: int) -> None:
        sys.stdout.buffer.write(b"".join(lines))
        sys.stdout.buffer.flush()
        self.state.write(last_seq)

    def close(self) -> None:
        pass


class HttpSink:
    """POSTs each batch as `application/x-ndjson` to a collector (Splunk HEC raw, Logstash/Vector http input...).

    `headers` carries e.g. `Authorization`; a non-2xx answer or a network error stops the export and leaves the
    state at the last acknowledged batch.
    """

    def __init__(self, url: str, *, state: Path | None = None, headers: dict[str, str] | None = None,
                 timeout_s: float = 30.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"collector URL must be http(s): {url!r}")
        self.url = url
        self.state = StateFile(state)
        self.headers = headers or {}
        self.timeout_s = timeout_s

    def resume_seq(self) -> int:
        return self.state.read()

    def open(self, resume: bool) -> None:
        pass

    def send(self, lines: list[bytes], first_seq: int, last_seq: int) -> None:
        request = urllib.request.Request(  # the scheme is checked in __init__
            self.url, data=b"".join(lines), method="POST",
            headers={"Content-Type": "application/x-ndjson", "X-Docqa-Audit-Seq": f"{first_seq}-{last_seq}",
                     **self.headers})
        with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
            if not 200 <= response.status < 300:
                raise OSError(f"collector answered {response.status}")
        self.state.write(last_seq)

    def close(self) -> None:
        pass


def ship(session: Session, sink: Sink, *, render: Render, resume: bool = False, after_seq: int = 0,
         batch: int = BATCH, **filters: Any) -> int:
    """Send the rendered lines after `after_seq` (or, with `resume`, after what the sink already holds).

    :param render: `ocsf_lines` or `ecs_seq_lines` (yielding `(seq, line)` in chain order).
    :param filters: passed to `render` (`tenant`, `events_only`).
    :returns: how many lines were shipped by this call.
    """
    start = max(after_seq, sink.resume_seq()) if resume else after_seq
    sink.open(resume)
    shipped = 0
    pending: list[bytes] = []
    first = last = 0
    try:
        for seq, line in render(session, after_seq=start, **filters):
            if not pending:
                first = seq
            pending.append(line)
            last = seq
            if len(pending) >= batch:
                sink.send(pending, first, last)
                shipped += len(pending)
                pending = []
        if pending:
            sink.send(pending, first, last)
            shipped += len(pending)
    finally:
        sink.close()
    return shipped


def _last_complete_line(path: Path) -> bytes | None:
    with path.open("rb") as fh:
        fh.seek(0, os.SEEK_END)
        end = fh.tell()
        block, data = 65536, b""
        while end > 0:
            step = min(block, end)
            end -= step
            fh.seek(end)
            data = fh.read(step) + data
            complete = data[: data.rfind(b"\n") + 1] if b"\n" in data else b""
            lines = complete.rstrip(b"\n").split(b"\n") if complete else []
            # The last complete line is whole once a newline precedes it (or the file starts there).
            if len(lines) >= 2 or (lines and end == 0):
                return lines[-1]
    return None


def _drop_partial_tail(path: Path) -> None:
    """Cut a line a kill left half-written, so appending continues on a line boundary."""
    with path.open("r+b") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        position = size
        while position > 0:
            step = min(65536, position)
            fh.seek(position - step)
            chunk = fh.read(step)
            index = chunk.rfind(b"\n")
            if index >= 0:
                position = position - step + index + 1
                break
            position -= step
        if position != size:
            fh.truncate(position)
            fh.flush()
            os.fsync(fh.fileno())
