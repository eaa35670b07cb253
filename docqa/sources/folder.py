"""The `folder` lister: a local directory (NFS and SMB mounts included), its supported, non-hidden files.

Each file's key is its POSIX path below the folder; `quick` is its modification time and size, so an unchanged
file is not read again; with `posix_groups` its group is a `group:NAME` principal. A folder that is missing or
unreadable is unreachable (never an empty listing that would delete everything).
"""

from __future__ import annotations

import grp
import os
from pathlib import Path
from typing import Any

from docqa.conversion.converters import is_supported
from docqa.sources.listing import ListedItem, Listing, SourceUnreachableError


def list_folder(config: dict[str, Any]) -> Listing:
    root = Path(config["path"])
    if not root.is_dir():
        raise SourceUnreachableError(f"folder {root} does not exist or is not a directory (an unmounted share?)")
    if not os.access(root, os.R_OK | os.X_OK):
        raise SourceUnreachableError(f"folder {root} is not readable")
    listing = Listing()
    groups: dict[int, str | None] = {}

    def walk_error(exc: OSError) -> None:
        # A subfolder that cannot be read is not a folder whose files were deleted.
        listing.complete = False
        listing.notes.append(f"cannot read {exc.filename}: {exc.strerror}")

    real_root = root.resolve()
    for directory, dirs, files in os.walk(root, onerror=walk_error):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for file_name in sorted(files):
            if file_name.startswith(".") or not is_supported(file_name):
                continue
            path = Path(directory) / file_name
            if not path.resolve().is_relative_to(real_root):
                # A link out of the folder would publish whatever it points at under the folder's access list.
                listing.notes.append(f"skipped {path.relative_to(root).as_posix()}: a link to outside the folder")
                continue
            try:
                stat = path.stat()
            except OSError as exc:
                listing.complete = False
                listing.notes.append(f"cannot stat {path}: {exc.strerror}")
                continue
            key = path.relative_to(root).as_posix()
            hints: tuple[str, ...] = ()
            if config.get("posix_groups"):
                group = groups.setdefault(stat.st_gid, _group_name(stat.st_gid))
                hints = (f"group:{group}",) if group else ()
            listing.items.append(ListedItem(
                key=key, name=key, acl_path=key, quick=f"{stat.st_mtime_ns}:{stat.st_size}", hints=hints,
                reader=path.read_bytes,
            ))
    return listing


def _group_name(gid: int) -> str | None:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:  # a gid with no name on this host maps to no principal
        return None
