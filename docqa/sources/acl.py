"""Who may read a source's documents: the `--allow` principals, an ACL map, and what the source itself says.

An ACL map is a text file, one rule per line: a glob over the item's path in the source (a file path below the
folder or repository, `FOLDER/...` for a mail folder, the URL path for a site) and the principals it grants:

    # glob                 principals
    finance/**             group:finance
    hr/*.pdf               group:hr user:dana
    *                      group:staff

The first rule whose glob matches decides (`*` also matches `/`); an item no rule matches gets the `--allow`
principals. To that, a folder source adds each file's POSIX group as `group:NAME` (`--posix-groups`), and an
imap source's definition already holds the mailbox owner's `user:` principal. The map is read at every sync, so
editing it re-applies access to the stored chunks without re-embedding them.

Usage:
    rules = AclMap.load("/etc/docqa/handbook.acl")
    rules.principals_for("finance/2026/budget.xlsx", default=["group:staff"])   # ["group:finance"]
"""

from __future__ import annotations

import fnmatch
import hashlib
from dataclasses import dataclass
from pathlib import Path

from docqa.errors import DocqaError

MAX_RULES = 10_000


class AclMapError(DocqaError):
    code = "invalid_acl_map"
    http_status = 422


@dataclass(frozen=True)
class AclMap:
    rules: tuple[tuple[str, tuple[str, ...]], ...]
    digest: str = ""

    @classmethod
    def parse(cls, text: str, origin: str = "ACL map") -> AclMap:
        rules: list[tuple[str, tuple[str, ...]]] = []
        for number, raw in enumerate(text.splitlines(), start=1):
            line = raw.split("#", 1)[0].strip()
            if not line:
                continue
            glob, *principals = line.split()
            if not principals:
                raise AclMapError(f"{origin} line {number}: {glob!r} names no principal")
            bad = [p for p in principals if ":" not in p and p != "everyone"]
            if bad:
                raise AclMapError(f"{origin} line {number}: {bad[0]!r} is not a principal (user:ID, group:NAME "
                                  "or everyone)")
            rules.append((glob, tuple(sorted(set(principals)))))
            if len(rules) > MAX_RULES:
                raise AclMapError(f"{origin}: more than {MAX_RULES} rules")
        return cls(tuple(rules), hashlib.sha256(text.encode("utf-8")).hexdigest())

    @classmethod
    def load(cls, path: str | Path) -> AclMap:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise AclMapError(f"cannot read ACL map {path}: {getattr(exc, 'strerror', None) or exc}") from exc
        return cls.parse(text, origin=str(path))

    def principals_for(self, path: str, default: list[str] | tuple[str, ...]) -> list[str]:
        for glob, principals in self.rules:
            if fnmatch.fnmatchcase(path, glob):
                return list(principals)
        return list(default)


def access_for(path: str, allow: list[str], acl_map: AclMap | None, hints: tuple[str, ...] = ()) -> list[str]:
    """The sorted access list of one item: the map's rule (else `allow`) plus what the source says (`hints`)."""
    base = acl_map.principals_for(path, allow) if acl_map is not None else list(allow)
    return sorted(set(base) | set(hints))
