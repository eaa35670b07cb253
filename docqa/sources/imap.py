"""The `imap` lister: the messages of a mailbox's folders, over IMAP with TLS (or plain IMAP on loopback).

The password comes from the environment variable the definition names, at every sync, and is never stored.
Folders are opened read-only (`EXAMINE`), so syncing marks nothing as read. A message's key is its folder, the
folder's UIDVALIDITY and its UID: messages do not change, so the key is also the fingerprint, and a folder whose
UIDVALIDITY was reset is read again as new. Each message is ingested as an `.eml` file (headers, body and each
attachment converted by the mail converter); its ACL path is its folder, and its readers by default the mailbox
owner's `user:` principal. Messages larger than the file limit are not fetched.
"""

from __future__ import annotations

import imaplib
import re
import ssl
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any

from docqa.errors import DocqaError, FileTooLargeError
from docqa.sources.definitions import secret_from_env
from docqa.sources.listing import ListedItem, Listing, SourceUnreachableError

TIMEOUT_S = 60
_SIZE = re.compile(rb"UID (\d+).*RFC822\.SIZE (\d+)|RFC822\.SIZE (\d+).*UID (\d+)")


class _Mailbox:
    def __init__(self, connection: imaplib.IMAP4) -> None:
        self.connection = connection
        self.selected: str | None = None

    def select(self, folder: str) -> str:
        """Open `folder` read-only; returns its UIDVALIDITY."""
        typ, data = self.connection.select(_quoted(folder), readonly=True)
        if typ != "OK":
            raise SourceUnreachableError(f"cannot open mail folder {folder}: {_text(data)}")
        self.selected = folder
        validity = self.connection.response("UIDVALIDITY")[1]
        return _text(validity) if validity and validity[0] else "0"

    def fetch(self, folder: str, uid: str) -> bytes:
        if self.selected != folder:
            self.select(folder)
        typ, data = self.connection.uid("FETCH", uid, "(BODY.PEEK[])")
        parts = [part[1] for part in data or [] if isinstance(part, tuple) and len(part) > 1]
        if typ != "OK" or not parts:
            raise DocqaError(f"message {uid} of {folder} could not be fetched (deleted meanwhile?)")
        return parts[0]


@contextmanager
def imap_listing(config: dict[str, Any], max_bytes: int) -> Iterator[Listing]:
    host, port, user = config["host"], config["port"], config["user"]
    try:
        password = secret_from_env(config["password_env"])
    except DocqaError as exc:
        raise SourceUnreachableError(exc.message) from exc
    try:
        if config.get("tls", True):
            connection: imaplib.IMAP4 = imaplib.IMAP4_SSL(host, port, ssl_context=ssl.create_default_context(),
                                                          timeout=TIMEOUT_S)
        else:
            connection = imaplib.IMAP4(host, port, timeout=TIMEOUT_S)
    except (OSError, imaplib.IMAP4.error) as exc:
        raise SourceUnreachableError(f"cannot connect to {host}:{port}: {exc}") from exc
    try:
        try:
            connection.login(user, password)
        except imaplib.IMAP4.error as exc:
            raise SourceUnreachableError(f"{host}:{port} refused the login of {user}: {_text([exc.args[0]])}") from exc
        mailbox = _Mailbox(connection)
        listing = Listing()
        for folder in config["folders"]:
            validity = mailbox.select(folder)
            typ, data = connection.uid("FETCH", "1:*", "(UID RFC822.SIZE)")
            if typ != "OK":
                raise SourceUnreachableError(f"cannot list mail folder {folder}: {_text(data)}")
            for uid, size in _sizes(data):
                key = f"{folder}/{validity}/{uid}"
                listing.items.append(ListedItem(
                    key=key, name=f"{folder}/{uid}.eml", acl_path=folder, fingerprint=f"imap:{validity}:{uid}",
                    reader=_reader(mailbox, folder, uid, size, max_bytes)))
        yield listing
    finally:
        with suppress(OSError, imaplib.IMAP4.error):
            connection.logout()


def _reader(mailbox: _Mailbox, folder: str, uid: str, size: int, max_bytes: int) -> Callable[[], bytes]:
    def read() -> bytes:
        if size > max_bytes:
            raise FileTooLargeError(f"message is {size} bytes; the limit is {max_bytes} bytes")
        return mailbox.fetch(folder, uid)

    return read


def _sizes(data: list[Any]) -> list[tuple[str, int]]:
    """(UID, size) of each message in a `UID FETCH 1:* (UID RFC822.SIZE)` answer (empty for an empty folder)."""
    found = []
    for line in data or []:
        raw = line[0] if isinstance(line, tuple) else line
        if not isinstance(raw, bytes):
            continue
        match = _SIZE.search(raw)
        if match:
            uid, size = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
            found.append((uid.decode(), int(size)))
    return found


def _quoted(folder: str) -> str:
    return '"' + folder.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _text(data: Any) -> str:
    first = (data or [b""])[0]
    return first.decode("utf-8", "replace") if isinstance(first, bytes) else str(first)
