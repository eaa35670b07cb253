"""Audit keys: the HMAC chain key and the Ed25519 checkpoint signing key.

From settings (`DOCQA_AUDIT_HMAC_KEY`, `DOCQA_AUDIT_SIGNING_KEY`) in production; otherwise generated once
into `data_dir/audit/` with 0600 permissions, safely when several processes start at the same time.
"""

from __future__ import annotations

import base64
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from docqa.errors import ConfigurationError
from docqa.settings import Settings

MIN_HMAC_KEY_BYTES = 32


def key_dir(settings: Settings) -> Path:
    return settings.data_dir / "audit"


def hmac_key(settings: Settings) -> bytes:
    if settings.audit_hmac_key is not None:
        key = settings.audit_hmac_key.get_secret_value().encode()
        if len(key) < MIN_HMAC_KEY_BYTES:
            raise ConfigurationError(f"DOCQA_AUDIT_HMAC_KEY must be at least {MIN_HMAC_KEY_BYTES} characters")
        return key
    return _read_or_create(key_dir(settings) / "hmac.key", lambda: secrets.token_hex(32).encode()).strip()


def signing_key(settings: Settings) -> Ed25519PrivateKey:
    if settings.audit_signing_key is not None:
        return parse_private_key(settings.audit_signing_key.get_secret_value())
    pem = _read_or_create(key_dir(settings) / "signing.key", _new_private_pem)
    return parse_private_key(pem.decode())


def verify_key(settings: Settings) -> Ed25519PublicKey:
    return signing_key(settings).public_key()


def parse_private_key(value: str) -> Ed25519PrivateKey:
    value = value.strip()
    try:
        if value.startswith("-----BEGIN"):
            key = serialization.load_pem_private_key(value.encode(), password=None)
        else:
            key = Ed25519PrivateKey.from_private_bytes(base64.b64decode(value, validate=True))
    except (ValueError, TypeError) as exc:
        raise ConfigurationError(f"the audit signing key is not a valid Ed25519 key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigurationError("the audit signing key must be an Ed25519 key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """An auditor's copy of the verification key (PEM), for checking checkpoints away from the server."""
    key = serialization.load_pem_public_key(path.read_bytes())
    if not isinstance(key, Ed25519PublicKey):
        raise ConfigurationError(f"{path} is not an Ed25519 public key")
    return key


def public_key_pem(key: Ed25519PublicKey) -> str:
    return key.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def public_key_b64(key: Ed25519PublicKey) -> str:
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return base64.b64encode(raw).decode()


def _new_private_pem() -> bytes:
    return Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _read_or_create(path: Path, make: Callable[[], bytes]) -> bytes:
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, make())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            # link() fails if another process created the key first; its key wins and ours is discarded.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    if stat.S_IMODE(path.stat().st_mode) & 0o077:
        raise ConfigurationError(f"audit key file {path} must not be readable by others (chmod 600)")
    return path.read_bytes()
