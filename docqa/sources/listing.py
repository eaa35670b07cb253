"""What a source holds right now: one `ListedItem` per document, gathered into a `Listing` by its type's lister.

A lister says what each item is (`key` within the source, `name` with the suffix the converter reads, the path
the ACL map matches) and how to tell whether it changed: a `fingerprint` known without reading it (Git blob id,
message UID), or None when only its bytes tell (their SHA-256, computed by the sync), and a cheap `quick` check
(mtime and size, an ETag) that spares reading an unchanged item. A listing that could not see everything (a
crawl stopped at its bounds, a page that failed) is not `complete`: the sync then deletes nothing it did not see.

Usage:
    with open_listing(source_row, known) as listing:
        for item in listing.items: ...
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from docqa.errors import DocqaError


class SourceUnreachableError(DocqaError):
    """The source could not be listed (path gone, server down, authentication refused): the sync fails with
    this reason and keeps every document it holds."""

    code = "source_unreachable"
    http_status = 502


@dataclass
class ListedItem:
    key: str
    name: str
    acl_path: str
    fingerprint: str | None = None
    quick: str | None = None
    hints: tuple[str, ...] = ()
    data: bytes | None = None
    reader: Callable[[], bytes] | None = field(default=None, repr=False)

    def read(self) -> bytes:
        if self.data is None:
            if self.reader is None:
                raise DocqaError(f"{self.key}: nothing to read")
            self.data = self.reader()
        return self.data

    def content_fingerprint(self) -> str:
        """The fingerprint the lister gave, else the SHA-256 of the bytes (read now)."""
        if self.fingerprint is None:
            self.fingerprint = "sha256:" + hashlib.sha256(self.read()).hexdigest()
        return self.fingerprint


@dataclass
class Listing:
    items: list[ListedItem] = field(default_factory=list)
    complete: bool = True
    # Keys the source still has but could not be read this time (a page answering 500): kept, never deleted.
    keep: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)


Known = dict[str, tuple[str | None, str | None]]  # key -> (fingerprint, quick) as docqa stored it


@contextmanager
def open_listing(source_type: str, config: dict[str, Any], known: Known, *, settings: Any,
                 tenant: str, name: str) -> Iterator[Listing]:
    """List a source of `source_type`; resources the items read from (a mailbox connection) stay open inside."""
    if source_type == "folder":
        from docqa.sources.folder import list_folder

        yield list_folder(config)
    elif source_type == "git":
        from docqa.sources.git import list_git

        yield list_git(config, settings.data_dir / "sources" / "git" / tenant / name)
    elif source_type == "website":
        from docqa.sources.website import list_website

        yield list_website(config, known)
    elif source_type == "imap":
        from docqa.sources.imap import imap_listing

        with imap_listing(config, settings.max_file_bytes) as listing:
            yield listing
    else:
        raise DocqaError(f"unknown source type {source_type!r}")
