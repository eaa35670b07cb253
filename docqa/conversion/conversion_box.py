"""Untrusted files are converted in a box: a cheap look at a ZIP archive's directory before anything is
inflated, then the conversion itself in a child process with a memory and a wall-time limit, killed at either.

Two layers, because each misses what the other catches:
- `check_zip_archive` reads only the central directory (no member is inflated, no object per member is kept):
  the members' declared uncompressed sizes, one by one and in total, their count and their compression ratio
  must stay within `ConversionLimits`. Declared sizes can lie, but Python's `zipfile` (python-docx reads DOCX
  through it) never inflates a member past its declared size: a member that holds more fails its CRC check.
- `run_in_box` runs a conversion in a process forked from a forkserver, with an address-space limit
  (`RLIMIT_AS`, the child's size at start plus `max_memory_mb`) and a CPU-time backstop, and kills it at
  `timeout_s` of wall time. Whatever the parser does (a PDF stream inflating to gigabytes, an XML parser
  building a huge tree), the caller's memory stays where it was and the caller gets a `DocqaError` saying which
  limit was hit. The caller's own process never imports the parsers.

Usage:
    limits = ConversionLimits.from_settings(settings)
    check_zip_archive(data, "report.docx", limits)
    text, title = run_in_box(extract, "docx", data, "report.docx", limits=limits, name="report.docx")
"""

from __future__ import annotations

import io
import logging
import math
import multiprocessing
import os
import resource
import struct
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing import forkserver, popen_forkserver, reduction, spawn, util
from multiprocessing.connection import Connection
from multiprocessing.context import set_spawning_popen
from multiprocessing.process import AuthenticationString, BaseProcess, current_process
from typing import Any

from docqa.errors import DocqaError, FileTooLargeError, UnreadableFileError

logger = logging.getLogger(__name__)

_MB = 1024 * 1024
# A member this small is never refused for its ratio: tiny XML parts of an office file compress very well.
RATIO_FLOOR_BYTES = 1 * _MB
# A child that peaked this close to its address-space limit ran out of memory, whatever error it raised then.
_NEAR_LIMIT_BYTES = 64 * _MB


@dataclass(frozen=True)
class ConversionLimits:
    """What one file's conversion may cost (DOCQA_CONVERT_* settings).

    :param max_uncompressed_bytes: An archive's members may declare this many bytes in total.
    :param max_member_bytes: One archive member may declare this many bytes.
    :param max_members: Members of one archive.
    :param max_ratio: Uncompressed / compressed size of a member past `RATIO_FLOOR_BYTES`.
    :param max_memory_mb: Address space the converting child may add to its size at start.
    :param timeout_s: Wall time of the conversion, from the child's start to its result.
    :param max_text_chars: Text a conversion may hand back: what the caller then chunks and embeds.
    :param max_table_rows: Spreadsheet rows (all sheets of one file) a conversion may read.
    :param ocr_languages: Tesseract language data for scanned pages and images (`eng`, `eng+deu`); None: no OCR.
    :param ocr_max_pages: Pages (or image frames) of one file that may need OCR.
    :param ocr_timeout_s: Wall time OCR may take for one file; the box's wall-time limit grows by as much.
    """

    max_uncompressed_bytes: int = 100 * _MB
    max_member_bytes: int = 64 * _MB
    max_members: int = 10_000
    max_ratio: float = 200.0
    max_memory_mb: int = 1024
    timeout_s: float = 120.0
    max_text_chars: int = 10_000_000
    max_table_rows: int = 200_000
    ocr_languages: str | None = None
    ocr_max_pages: int = 50
    ocr_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if min(self.max_uncompressed_bytes, self.max_member_bytes, self.max_members, self.max_memory_mb,
               self.max_text_chars, self.max_table_rows, self.ocr_max_pages) < 1:
            raise ValueError("conversion limits must be positive")
        if self.max_ratio <= 1 or self.timeout_s <= 0 or self.ocr_timeout_s <= 0:
            raise ValueError("max_ratio must be above 1, timeout_s and ocr_timeout_s positive")

    @classmethod
    def from_settings(cls, settings: Any) -> ConversionLimits:
        return cls(
            max_uncompressed_bytes=settings.convert_max_uncompressed_bytes,
            max_member_bytes=settings.convert_max_member_bytes,
            max_members=settings.convert_max_members,
            max_ratio=settings.convert_max_ratio,
            max_memory_mb=settings.convert_max_memory_mb,
            timeout_s=settings.convert_timeout_s,
            max_text_chars=settings.convert_max_text_chars,
            max_table_rows=settings.convert_max_table_rows,
            ocr_languages=settings.ocr_languages if settings.ocr_enabled else None,
            ocr_max_pages=settings.ocr_max_pages,
            ocr_timeout_s=settings.ocr_timeout_s,
        )


# --- ZIP pre-check -------------------------------------------------------------------------------------------

_EOCD = b"PK\x05\x06"
_EOCD64_LOCATOR = b"PK\x06\x07"
_EOCD64 = b"PK\x06\x06"
_CENTRAL_ENTRY = b"PK\x01\x02"
_EOCD_SIZE, _EOCD64_LOCATOR_SIZE, _EOCD64_SIZE, _CENTRAL_SIZE = 22, 20, 56, 46
_ZIP64_EXTRA_ID = 0x0001
_U32_MAX = 0xFFFFFFFF


def check_zip_archive(data: bytes, name: str, limits: ConversionLimits) -> None:
    """Refuse an archive whose members declare too much before any of them is inflated.

    :raises FileTooLargeError: too many members, a member or the total over its size, a ratio over the limit.
    :raises UnreadableFileError: not a ZIP archive, or a corrupt directory.
    """
    total = 0
    for count, (member, size, compressed) in enumerate(zip_members(data, name), start=1):
        if count > limits.max_members:
            raise FileTooLargeError(f"{name}: more than {limits.max_members} archive members")
        if size > limits.max_member_bytes:
            raise FileTooLargeError(f"{name}: decompressed size over {limits.max_member_bytes} bytes "
                                    f"({member[:80]} declares {size} bytes)")
        total += size
        if total > limits.max_uncompressed_bytes:
            raise FileTooLargeError(f"{name}: decompressed size over {limits.max_uncompressed_bytes} bytes "
                                    f"(the members declare at least {total} bytes)")
        if size > RATIO_FLOOR_BYTES and size > limits.max_ratio * max(compressed, 1):
            raise FileTooLargeError(f"{name}: compression ratio over {limits.max_ratio:g} "
                                    f"({member[:80]} inflates {compressed} bytes to {size})")


def zip_members(data: bytes, name: str = "archive") -> Iterator[tuple[str, int, int]]:
    """(member name, declared uncompressed size, compressed size) per central directory entry, read lazily.

    The directory is found as `zipfile` finds it (the end record in the last 64 KiB, a ZIP64 end record right
    before its locator, the directory right before the end record), so both see the same members.
    """
    eocd = data.rfind(_EOCD, max(0, len(data) - _EOCD_SIZE - 0xFFFF))
    if eocd < 0 or eocd + _EOCD_SIZE > len(data):
        raise UnreadableFileError(f"{name}: not a ZIP archive")
    cd_size = struct.unpack_from("<I", data, eocd + 12)[0]
    cd_end = eocd
    locator = eocd - _EOCD64_LOCATOR_SIZE
    if locator >= 0 and data[locator : locator + 4] == _EOCD64_LOCATOR:
        record = locator - _EOCD64_SIZE
        if record < 0 or data[record : record + 4] != _EOCD64:
            raise UnreadableFileError(f"{name}: corrupt ZIP64 end record")
        cd_size = struct.unpack_from("<Q", data, record + 40)[0]
        cd_end = record
    position = cd_end - cd_size
    if position < 0:
        raise UnreadableFileError(f"{name}: corrupt ZIP central directory")
    while position < cd_end:
        if position + _CENTRAL_SIZE > cd_end or data[position : position + 4] != _CENTRAL_ENTRY:
            raise UnreadableFileError(f"{name}: corrupt ZIP central directory")
        compressed, size, name_len, extra_len, comment_len = struct.unpack_from("<IIHHH", data, position + 20)
        start = position + _CENTRAL_SIZE
        member = data[start : start + name_len].decode("utf-8", "replace")
        if _U32_MAX in (size, compressed):
            size, compressed = _zip64_sizes(data[start + name_len : start + name_len + extra_len], size, compressed)
        yield member, size, compressed
        position = start + name_len + extra_len + comment_len


def _zip64_sizes(extra: bytes, size: int, compressed: int) -> tuple[int, int]:
    offset = 0
    while offset + 4 <= len(extra):
        header_id, length = struct.unpack_from("<HH", extra, offset)
        body = extra[offset + 4 : offset + 4 + length]
        if header_id == _ZIP64_EXTRA_ID:
            values = [struct.unpack_from("<Q", body, i)[0] for i in range(0, len(body) - 7, 8)]
            if size == _U32_MAX and values:
                size = values.pop(0)
            if compressed == _U32_MAX and values:
                compressed = values.pop(0)
            break
        offset += 4 + length
    return size, compressed


# --- The box -------------------------------------------------------------------------------------------------

# Children fork from a small server process started once per calling process: no copy of the caller's memory
# (a gunicorn worker's models and stores), no inherited threads or locks, and no interpreter start per file.
_CONTEXT = multiprocessing.get_context("forkserver")
_PRELOAD: set[str] = set()


class _BoxPopen(popen_forkserver.Popen):
    """The forkserver launch without the caller's main module: a forkserver child re-imports the caller's main
    script before it runs anything (about a second for the `docqa` console script or a benchmark), and a
    converter never needs it. The rest is `popen_forkserver.Popen._launch` as it is."""

    def _launch(self, process_obj: Any) -> None:
        prep_data = spawn.get_preparation_data(process_obj._name)
        prep_data.pop("init_main_from_path", None)
        prep_data.pop("init_main_from_name", None)
        prep_data["authkey"] = bytes(prep_data["authkey"])  # see _BoxProcess
        buf = io.BytesIO()
        set_spawning_popen(self)
        try:
            reduction.dump(prep_data, buf)
            reduction.dump(process_obj, buf)
        finally:
            set_spawning_popen(None)
        self.sentinel, w = forkserver.connect_to_new_process(self._fds)
        parent_w = os.dup(w)
        self.finalizer = util.Finalize(self, util.close_fds, (parent_w, self.sentinel))
        with open(w, "wb", closefd=True) as f:
            f.write(buf.getbuffer())
        self.pid = forkserver.read_signed(self.sentinel)


class _BoxProcess(BaseProcess):
    """A forkserver process that a Celery prefork pool process may start too: billiard gives such a process its
    own authentication key type (which only billiard may pickle) and a daemonic mark."""

    _start_method = "forkserver"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config["authkey"] = AuthenticationString(bytes(self._config["authkey"]))

    @staticmethod
    def _Popen(process_obj: Any) -> _BoxPopen:
        return _BoxPopen(process_obj)

    def start(self) -> None:
        # A Celery prefork pool process is marked daemonic, and multiprocessing refuses children to a daemonic
        # process (they would outlive it). A box child is the forkserver's child, not the caller's, and ends at
        # its CPU-time limit even if nobody kills it; so the mark is lifted for this start only.
        with _DAEMON_MARK_LOCK:
            config = current_process()._config
            daemonic = config.pop("daemon", None)
            try:
                super().start()
            finally:
                if daemonic is not None:
                    config["daemon"] = daemonic


_DAEMON_MARK_LOCK = threading.Lock()


def preload_in_box(*modules: str) -> None:
    """Modules the box's server imports once, before its first child, so that no child pays for importing them
    (the parsers take about a second each to import). Takes effect when the server starts."""
    _PRELOAD.update(modules)
    _CONTEXT.set_forkserver_preload(sorted(_PRELOAD))


_started = threading.Event()
_start_lock = threading.Lock()


def start_box() -> None:
    """Start the box's server and wait until it serves (a few seconds of imports, once per process), so that
    the first conversion does not pay for it within its own deadline; a no-op after the first call."""
    if _started.is_set():
        return
    with _start_lock:
        if not _started.is_set():
            run_in_box(int, limits=ConversionLimits(timeout_s=60.0), name="box start")
            _started.set()


def run_in_box(func: Callable[..., Any], *args: Any, limits: ConversionLimits, name: str) -> Any:
    """`func(*args)` in a child process within `limits.max_memory_mb` and `limits.timeout_s`.

    `func` must be importable by the child (a module-level function); its arguments and result are pickled.
    A `DocqaError` it raises is raised here as it was. The time limit counts from the child's start, not the
    box's server start (see `start_box`).

    :raises FileTooLargeError: the child used more than its memory limit.
    :raises UnreadableFileError: it ran longer than its time limit (it is killed then), or stopped abnormally.
    """
    receiver, sender = _CONTEXT.Pipe(duplex=False)
    process = _BoxProcess(target=_child_main, args=(sender, func, args, limits), daemon=True,
                          name=f"docqa-convert {name[:40]}")
    started = time.monotonic()
    process.start()
    sender.close()
    deadline = time.monotonic() + limits.timeout_s
    status, peak_kb = "?", 0
    try:
        if not receiver.poll(max(deadline - time.monotonic(), 0.0)):
            status, peak_kb = "timeout", _peak_rss_kb(process.pid)
            raise UnreadableFileError(f"{name}: conversion took longer than {_seconds(limits.timeout_s)} s")
        status, payload, peak_kb = receiver.recv()
    except (EOFError, OSError):
        process.join(5)
        status = f"exit {process.exitcode}"
        raise _abnormal_end(name, process.exitcode, limits) from None
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        receiver.close()
        process.close()
        logger.debug("conversion of %s in a child process: %s, peak RSS %d kB, %.3f s", name, status, peak_kb,
                     time.monotonic() - started, extra={"child_peak_rss_kb": peak_kb, "box_status": status})
    if status == "ok":
        return payload
    if status == "memory":
        raise FileTooLargeError(f"{name}: conversion used more than {limits.max_memory_mb} MB")
    if isinstance(payload, DocqaError):
        raise payload
    raise UnreadableFileError(f"{name}: conversion failed ({payload})")


def _child_main(sender: Connection, func: Callable[..., Any], args: tuple[Any, ...],
                limits: ConversionLimits) -> None:
    limit_bytes = _limit_resources(limits)
    try:
        result: tuple[str, Any] = ("ok", func(*args))
    except BaseException as exc:  # everything goes back to the caller as one reason
        if _out_of_memory(exc, limit_bytes):
            result = ("memory", None)
        elif isinstance(exc, DocqaError):
            result = ("error", type(exc)(exc.message))
        else:
            result = ("error", (str(exc).splitlines() or [type(exc).__name__])[0][:300])
    try:
        sender.send((*result, _peak_rss_kb(os.getpid())))
    except MemoryError:
        sender.send(("memory", None, _peak_rss_kb(os.getpid())))
    finally:
        sender.close()


def _limit_resources(limits: ConversionLimits) -> int:
    """Cap the address space at the size now plus the budget, and CPU time just past the wall-time limit (so a
    child whose caller died stops on its own); returns the address-space limit in bytes."""
    limit_bytes = _vm_bytes("VmSize") + limits.max_memory_mb * _MB
    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    cpu_s = math.ceil(limits.timeout_s) + 2
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_s, cpu_s + 1))
    return limit_bytes


def _out_of_memory(exc: BaseException, limit_bytes: int) -> bool:
    seen: BaseException | None = exc
    while seen is not None:
        # libxml2 reports a failed allocation as a syntax error ("Memory allocation failed").
        if isinstance(seen, MemoryError) or "memory allocation failed" in str(seen).lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return _vm_bytes("VmPeak") >= limit_bytes - _NEAR_LIMIT_BYTES


def _abnormal_end(name: str, exitcode: int | None, limits: ConversionLimits) -> DocqaError:
    if exitcode is not None and exitcode < 0:
        return UnreadableFileError(f"{name}: conversion stopped by signal {-exitcode} "
                                   f"(limits {limits.max_memory_mb} MB, {_seconds(limits.timeout_s)} s)")
    return UnreadableFileError(f"{name}: conversion stopped abnormally (exit code {exitcode})")


def _vm_bytes(field: str, pid: int | None = None) -> int:
    try:
        with open(f"/proc/{pid or os.getpid()}/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:  # the process is gone
        pass
    return 0


def _peak_rss_kb(pid: int | None) -> int:
    return _vm_bytes("VmHWM", pid) // 1024


def _seconds(value: float) -> str:
    return f"{value:.1f}".removesuffix(".0")
