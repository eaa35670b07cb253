"""JSON Lines export: one chain link per line with its proof, verifiable away from the database.

Each line is `{"trace": <canonical payload>, "proof": {"seq", "prev_mac", "mac"}}`, or for an event
`{"event": <canonical payload>, "proof": ...}`; anyone holding the HMAC key recomputes `mac` from the line
alone, and consecutive lines must link through `prev_mac`.

Usage:
    count = export_jsonl(session, Path("traces.jsonl"), since=datetime(2026, 1, 1, tzinfo=UTC))
    verify_jsonl(Path("traces.jsonl"), key).ok
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from docqa.audit.canonical import canonical_bytes, event_payload, trace_payload
from docqa.audit.chain import ChainPosition
from docqa.audit.models import AuditTrace
from docqa.audit.tenant_numbering import tenant_proof
from docqa.audit.timestamps import as_utc
from docqa.audit.verify import BrokenLink, LinkChecker, StoredTrace, VerifyReport, is_event, iter_links


def export_line(trace: AuditTrace | StoredTrace | Any) -> bytes:
    """The line of one link: a trace, or an event row (`AuditEvent` or a row of its table)."""
    body = {"event": event_payload(trace)} if is_event(trace) else {"trace": trace_payload(trace)}
    record = {**body, "proof": {"seq": trace.seq, "prev_mac": trace.prev_mac, "mac": trace.mac}}
    return canonical_bytes(record) + b"\n"


def tenant_export_line(link: AuditTrace | Any) -> bytes:
    """The line of one link for its tenant's auditors: the same payload, the proof of `tenant_proof`."""
    body = {"event": event_payload(link)} if is_event(link) else {"trace": trace_payload(link)}
    return canonical_bytes({**body, "proof": tenant_proof(link)}) + b"\n"


def link_time(link: Any) -> datetime:
    """When a link happened: an event's time, a trace's question time."""
    return as_utc(link.at if is_event(link) else link.asked_at)


def export_jsonl(
    session: Session, out: Path, *, since: datetime | None = None, until: datetime | None = None
) -> int:
    """Write the traces asked and events that happened in [since, until) in chain order; returns how many."""
    tmp = out.with_name(f".{out.name}.tmp")
    count = 0
    with tmp.open("wb") as fh:
        for trace in iter_links(session):
            asked = link_time(trace)
            if (since is not None and asked < as_utc(since)) or (until is not None and asked >= as_utc(until)):
                continue
            fh.write(export_line(trace))
            count += 1
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out)
    return count


def read_lines(path: Path) -> Iterator[tuple[int, dict[str, Any] | None]]:
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                record = json.loads(raw)
            except json.JSONDecodeError:
                record = None
            yield number, record if isinstance(record, dict) else None


def verify_jsonl(path: Path, key: bytes, *, start: ChainPosition | None = None) -> VerifyReport:
    """Check every line's MAC and the links between consecutive lines.

    :param start: the link the file must continue from (an archive); without it the file may hold several
        runs of consecutive links (a filtered export), each checked from its first line's `prev_mac`.
    """
    checker = LinkChecker(key, start or ChainPosition(0, ""))
    first_seq: int | None = None
    for number, record in read_lines(path):
        try:
            proof = record["proof"]  # type: ignore[index]
            seq, prev_mac, mac = int(proof["seq"]), str(proof["prev_mac"]), str(proof["mac"])
            body = record["event"] if "event" in record else record["trace"]  # type: ignore[index,operator]
            payload = canonical_bytes(body)
            trace_id = str(body.get("id"))
        except (TypeError, KeyError, ValueError, AttributeError):
            if isinstance(record, dict) and isinstance(record.get("proof"), dict) and "prev_mac" not in record["proof"]:
                checker.broken = BrokenLink(None, None, f"line {number} is from a tenant's export, numbered within "
                                            "the tenant: verify its links against the chain (docqa audit verify)")
                break
            checker.broken = BrokenLink(None, None, f"line {number} is not a trace or event record with a proof")
            break
        if start is None and (first_seq is None or seq != checker.head.seq + 1):
            checker.head = ChainPosition(seq - 1, prev_mac)
        first_seq = seq if first_seq is None else first_seq
        if not checker.check(seq, trace_id, prev_mac, mac, payload):
            break
    base = start.seq if start is not None else (first_seq or 1) - 1
    return VerifyReport(
        ok=checker.broken is None, checked=checker.checked, start_seq=base,
        head_seq=checker.head.seq, head_mac=checker.head.mac, broken=checker.broken,
    )
