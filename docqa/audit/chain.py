"""The keyed hash chain: link MACs, anchors, and serialising appends across concurrent writers.

    mac(n) = HMAC-SHA256(key, "docqa-audit-chain-v1\\n" + n + "\\n" + mac(n-1) + "\\n" + canonical(trace n))

with mac(0) = 64 zeros. Without the key nobody can recompute a link after editing, inserting, deleting or
reordering traces; a signed checkpoint of the head also catches a truncated or key-holder-rewritten tail.
Events (`AuditEvent`) are links of the same chain, numbered in the same sequence as the traces.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

from sqlalchemy import select, text
from sqlalchemy.orm import Session

from docqa.audit.canonical import canonical_bytes, format_timestamp
from docqa.audit.models import AuditAnchor, AuditEvent, AuditTrace
from docqa.audit.tenant_numbering import next_tenant_seq

GENESIS_MAC = "0" * 64
_LINK_DOMAIN = b"docqa-audit-chain-v1\n"
_ANCHOR_DOMAIN = b"docqa-audit-anchor-v1\n"
# Arbitrary constant naming the chain's advisory lock on PostgreSQL ("docqaAUD" as ASCII).
CHAIN_LOCK_ID = 0x646F637161415544
IMMEDIATE_SESSION = "docqa_audit_immediate"


@dataclass(frozen=True)
class ChainPosition:
    seq: int
    mac: str


def link_mac(key: bytes, seq: int, prev_mac: str, payload: bytes) -> str:
    message = _LINK_DOMAIN + f"{seq}\n{prev_mac}\n".encode() + payload
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def anchor_mac(key: bytes, anchor: AuditAnchor) -> str:
    fields = {
        "up_to_seq": int(anchor.up_to_seq),
        "mac": anchor.mac,
        "archived_count": int(anchor.archived_count),
        "archive_sha256": anchor.archive_sha256,
        "created_at": format_timestamp(anchor.created_at),
    }
    return hmac.new(key, _ANCHOR_DOMAIN + canonical_bytes(fields), hashlib.sha256).hexdigest()


def lock_chain(session: Session) -> None:
    """Serialise appends until the transaction ends, so concurrent writers never fork or gap the chain.

    PostgreSQL: a transaction-scoped advisory lock. SQLite: the session must come from `audit_session`,
    whose transactions start with BEGIN IMMEDIATE (the database write lock).
    """
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": CHAIN_LOCK_ID})
    elif dialect == "sqlite":
        if not session.info.get(IMMEDIATE_SESSION):
            raise ValueError("on SQLite, append to the audit chain inside recorder.audit_session()")
    else:  # pragma: no cover - the project supports PostgreSQL and SQLite only
        raise ValueError(f"unsupported database for the audit chain: {dialect}")


def latest_anchor(session: Session) -> AuditAnchor | None:
    return session.scalars(select(AuditAnchor).order_by(AuditAnchor.up_to_seq.desc()).limit(1)).first()


def chain_start(session: Session) -> ChainPosition:
    """The link the live chain continues from: the latest retention anchor, else the genesis."""
    anchor = latest_anchor(session)
    return ChainPosition(0, GENESIS_MAC) if anchor is None else ChainPosition(anchor.up_to_seq, anchor.mac)


def chain_tail(session: Session) -> ChainPosition:
    """The last link, whichever table holds it: traces and events share one sequence of links."""
    rows = [
        session.execute(select(table.seq, table.mac).order_by(table.seq.desc()).limit(1)).first()
        for table in (AuditTrace, AuditEvent)
    ]
    found = [row for row in rows if row is not None]
    if not found:
        return chain_start(session)
    row = max(found, key=lambda r: int(r.seq))
    return ChainPosition(int(row.seq), row.mac)


def append_link(session: Session, row: AuditTrace | AuditEvent, kind: str, key: bytes, payload: bytes) -> None:
    """Link a built trace or event to the chain tail and stage it; the caller's transaction commits it.

    Traces and events share one sequence of links, so both are appended here: take the chain lock, number the row
    after the tail (globally and within its tenant for `kind`), chain its MAC over `payload`, flush.
    """
    lock_chain(session)
    tail = chain_tail(session)
    row.seq = tail.seq + 1
    row.tenant_seq = next_tenant_seq(session, row.tenant, kind)
    row.prev_mac = tail.mac
    row.mac = link_mac(key, row.seq, row.prev_mac, payload)
    session.add(row)
    session.flush()
