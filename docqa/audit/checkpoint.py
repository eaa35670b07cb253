"""Signed checkpoints: a chain head (seq, MAC, count, time) signed with Ed25519, kept outside the database.

A checkpoint proves what the chain looked like when it was taken: verifying the database against it detects
a truncated tail and a tail rewritten by someone holding the HMAC key. Retention writes one per archive.

Usage:
    cp = create_checkpoint(seq=report.head_seq, mac=report.head_mac, signer=signing_key(settings))
    write_checkpoint(cp, Path("head.json"));  load_checkpoint(Path("head.json")).signature_valid(public_key)
"""

from __future__ import annotations

import base64
import json
import os
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from docqa.audit.canonical import canonical_bytes
from docqa.audit.keys import public_key_b64

KIND_CHAIN = "chain"
KIND_ARCHIVE = "archive"
_SIGNATURE_DOMAIN = b"docqa-audit-checkpoint-v1\n"


@dataclass(frozen=True)
class Checkpoint:
    """`seq`/`mac`: the last link covered; `count`: links from genesis up to it (seq numbers have no gaps)."""

    kind: str
    seq: int
    mac: str
    count: int
    created_at: str
    public_key: str
    extra: dict[str, Any] = field(default_factory=dict)
    signature: str = ""

    def signed_bytes(self) -> bytes:
        fields = asdict(self)
        fields.pop("signature")
        return _SIGNATURE_DOMAIN + canonical_bytes(fields)

    def signature_valid(self, public_key: Ed25519PublicKey) -> bool:
        """Checked against the auditor's trusted key, never against the key the file claims."""
        try:
            public_key.verify(base64.b64decode(self.signature, validate=True), self.signed_bytes())
        except (InvalidSignature, ValueError):
            return False
        return True


def create_checkpoint(
    *, seq: int, mac: str, signer: Ed25519PrivateKey, kind: str = KIND_CHAIN, extra: dict[str, Any] | None = None
) -> Checkpoint:
    unsigned = Checkpoint(
        kind=kind,
        seq=seq,
        mac=mac,
        count=seq,
        created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        public_key=public_key_b64(signer.public_key()),
        extra=dict(extra or {}),
    )
    signature = base64.b64encode(signer.sign(unsigned.signed_bytes())).decode()
    return Checkpoint(**{**asdict(unsigned), "signature": signature})


def write_checkpoint(checkpoint: Checkpoint, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(asdict(checkpoint), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> Checkpoint:
    """Parse a checkpoint file; raises `ValueError` when it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return Checkpoint(
            kind=str(data["kind"]),
            seq=int(data["seq"]),
            mac=str(data["mac"]),
            count=int(data["count"]),
            created_at=str(data["created_at"]),
            public_key=str(data["public_key"]),
            extra=dict(data.get("extra") or {}),
            signature=str(data["signature"]),
        )
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{path} is not a readable audit checkpoint: {exc}") from None
