"""The `git` lister: the files at a branch head of a repository, read with the `git` CLI.

The repository is kept as a bare clone under the data directory and fetched at every sync; each file's
fingerprint is its blob id, so only files whose content changed are read. Only the file, HTTP(S), SSH and git
transports are allowed (never `ext::`), no terminal prompt, and every git call has a time limit.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from docqa.conversion.converters import is_supported
from docqa.sources.listing import ListedItem, Listing, SourceUnreachableError

GIT_TIMEOUT_S = 600
_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_ALLOW_PROTOCOL": "file:http:https:ssh:git", "GIT_ASKPASS": "true",
        "LC_ALL": "C"}


def list_git(config: dict[str, Any], cache: Path) -> Listing:
    url, branch = config["url"], config["branch"]
    ref = f"refs/heads/{branch}"
    if not (cache / "HEAD").exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        _git(["clone", "--bare", "--quiet", "--no-tags", "--single-branch", "--branch", branch, "--", url,
              str(cache)], cwd=None, what=f"cannot clone {url} (branch {branch})")
    else:
        _git(["fetch", "--quiet", "--prune", "--no-tags", "--", url, f"+{ref}:{ref}"], cwd=cache,
             what=f"cannot fetch {url} (branch {branch})")
    out = _git(["ls-tree", "-r", "-z", "--full-tree", ref], cwd=cache, what=f"cannot list branch {branch}")
    listing = Listing()
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, path_bytes = record.split(b"\t", 1)
        _mode, kind, blob = meta.decode().split()
        path = path_bytes.decode("utf-8", "surrogateescape")
        if kind != "blob" or any(part.startswith(".") for part in path.split("/")) or not is_supported(path):
            continue
        listing.items.append(ListedItem(key=path, name=path, acl_path=path, fingerprint=f"git:{blob}",
                                        reader=_blob_reader(cache, blob)))
    return listing


def _blob_reader(cache: Path, blob: str) -> Callable[[], bytes]:
    return lambda: _git(["cat-file", "blob", blob], cwd=cache, what=f"cannot read blob {blob}")


def _git(args: list[str], cwd: Path | None, what: str) -> bytes:
    try:
        done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, check=False,
                              env={**os.environ, **_ENV})
    except FileNotFoundError as exc:
        raise SourceUnreachableError("the git command is not installed") from exc
    except subprocess.TimeoutExpired as exc:
        raise SourceUnreachableError(f"{what}: git did not finish within {GIT_TIMEOUT_S} s") from exc
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip().splitlines()
        raise SourceUnreachableError(f"{what}: {detail[-1] if detail else f'git exited with {done.returncode}'}")
    return done.stdout
