"""`docqa sources watch`: sync a folder source again as soon as its files change.

The folder is looked at every `interval_s` seconds (a walk of names, sizes and modification times: it works on
NFS and SMB mounts, where inotify sees no change made by another host); a change is synced once it has been quiet
for one interval, so a file still being copied is not read half-written.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path

from docqa.errors import DocqaError
from docqa.ingestion.database import job_sessions
from docqa.settings import Settings
from docqa.sources.definitions import get_source
from docqa.sources.sync import SyncReport, sync_source


def folder_state(root: Path) -> frozenset[tuple[str, int, int]]:
    """(path, size, mtime) of every non-hidden file below `root`."""
    state = set()
    for directory, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith("."):
                continue
            try:
                stat = (Path(directory) / name).stat()
            except OSError:
                continue
            state.add((os.path.join(directory, name), stat.st_size, stat.st_mtime_ns))
    return frozenset(state)


def watch_source(
    settings: Settings,
    tenant: str,
    name: str,
    *,
    actor: str,
    interval_s: float = 2.0,
    on_report: Callable[[SyncReport], None] | None = None,
    stop: threading.Event | None = None,
) -> None:
    """Sync now, then after every settled change, until `stop` is set (or the process is interrupted)."""
    with job_sessions(settings)() as session:
        row = get_source(session, tenant, name)
        if row.type != "folder":
            raise DocqaError(f"only folder sources can be watched ({name} is a {row.type} source)")
        root = Path(row.config["path"])
    stop = stop or threading.Event()
    from docqa.runtime import Runtime

    runtime = Runtime(settings)  # one runtime and embedder, loaded once for every sync
    embedder = runtime.document_embedder()
    if hasattr(embedder, "warm_up"):
        embedder.warm_up()

    def run() -> None:
        report = sync_source(settings, tenant=tenant, name=name, actor=actor, runtime=runtime, embedder=embedder)
        if on_report is not None:
            on_report(report)

    synced = folder_state(root)
    run()
    seen = synced
    while not stop.wait(interval_s):
        current = folder_state(root)
        if current != seen:  # still changing: wait until it has been quiet for one interval
            seen = current
            continue
        if current != synced:
            synced = current
            run()
