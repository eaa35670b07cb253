"""Verification: recompute the chain from the stored rows and report the first broken link.

Usage:
    with session_factory(settings)() as session:
        report = verify_chain(session, hmac_key(settings), checkpoint=cp, public_key=verify_key(settings))
        mine = verify_for_tenant(session, hmac_key(settings), "acme")  # what acme's auditor may be told
    report.ok, report.broken  # BrokenLink(seq, trace_id, reason) or None
"""

from __future__ import annotations

import heapq
import hmac
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from docqa.audit.canonical import canonical_bytes, link_payload
from docqa.audit.chain import GENESIS_MAC, ChainPosition, anchor_mac, link_mac
from docqa.audit.checkpoint import KIND_CHAIN, Checkpoint
from docqa.audit.models import AuditAnchor, AuditEvent, AuditStep, AuditTrace

BATCH = 500


@dataclass(frozen=True)
class BrokenLink:
    seq: int | None
    trace_id: str | None
    reason: str


@dataclass
class VerifyReport:
    ok: bool
    checked: int
    start_seq: int
    head_seq: int
    head_mac: str
    broken: BrokenLink | None = None
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class LinkChecker:
    """Walks links in seq order from a known position; stops believing the chain at the first break."""

    def __init__(self, key: bytes, start: ChainPosition, watch_seq: int | None = None) -> None:
        self.key = key
        self.start = start
        self.head = start
        self.checked = 0
        self.broken: BrokenLink | None = None
        self.watch_seq = watch_seq
        self.watched_mac: str | None = None

    def check(self, seq: int, trace_id: str | None, prev_mac: str, mac: str, payload: bytes) -> bool:
        if self.broken is not None:
            return False
        expected = self.head.seq + 1
        if seq != expected:
            reason = (
                f"link {expected} is missing (next stored link is {seq}): deleted or truncated"
                if seq > expected
                else f"link {seq} is out of place (expected {expected}): inserted, duplicated or reordered"
            )
            self.broken = BrokenLink(expected if seq > expected else seq, trace_id, reason)
            return False
        if not hmac.compare_digest(prev_mac, self.head.mac):
            self.broken = BrokenLink(seq, trace_id, "previous-link MAC does not match: links reordered or replaced")
            return False
        if not hmac.compare_digest(link_mac(self.key, seq, prev_mac, payload), mac):
            self.broken = BrokenLink(
                seq, trace_id, "MAC does not match the content: trace edited or link forged without the key"
            )
            return False
        self.checked += 1
        self.head = ChainPosition(seq, mac)
        if seq == self.watch_seq:
            self.watched_mac = mac
        return True


class StoredTrace:
    """A trace row and its step rows, read without the ORM (verification reads every row of the chain)."""

    __slots__ = ("row", "steps")

    def __init__(self, row: Row, steps: list[Row]) -> None:
        self.row = row
        self.steps = steps

    def __getattr__(self, name: str) -> Any:
        return getattr(self.row, name)


def iter_traces(session: Session, after_seq: int = 0, batch: int = BATCH) -> Iterator[StoredTrace]:
    """Traces in seq order with their steps, a batch at a time (keyset pagination, one step query per batch)."""
    traces, steps = AuditTrace.__table__, AuditStep.__table__
    last = after_seq
    while True:
        rows = session.execute(select(traces).where(traces.c.seq > last).order_by(traces.c.seq).limit(batch)).all()
        if not rows:
            return
        by_trace: dict[str, list[Row]] = {row.id: [] for row in rows}
        step_rows = session.execute(
            select(steps).where(steps.c.trace_id.in_(list(by_trace))).order_by(steps.c.trace_id, steps.c.position)
        )
        for step in step_rows:
            by_trace[step.trace_id].append(step)
        for row in rows:
            yield StoredTrace(row, by_trace[row.id])
        last = rows[-1].seq


def iter_events(session: Session, after_seq: int = 0, batch: int = BATCH) -> Iterator[Row]:
    """Event rows in seq order, a batch at a time."""
    events = AuditEvent.__table__
    last = after_seq
    while True:
        rows = session.execute(select(events).where(events.c.seq > last).order_by(events.c.seq).limit(batch)).all()
        if not rows:
            return
        yield from rows
        last = rows[-1].seq


def iter_links(session: Session, after_seq: int = 0, batch: int = BATCH) -> Iterator[StoredTrace | Row]:
    """Every link in seq order: traces (`StoredTrace`) and event rows merged, as the chain orders them."""
    return heapq.merge(iter_traces(session, after_seq, batch), iter_events(session, after_seq, batch),
                       key=lambda link: int(link.seq))


def is_event(link: Any) -> bool:
    return hasattr(link, "action")


def verify_chain(
    session: Session,
    key: bytes,
    *,
    checkpoint: Checkpoint | None = None,
    public_key: Ed25519PublicKey | None = None,
    on_verified: Callable[[StoredTrace], object] | None = None,
) -> VerifyReport:
    """Recompute every live link; with a checkpoint also detect truncation and a rewritten tail.

    :param key: the HMAC chain key.
    :param checkpoint: a signed chain checkpoint taken earlier; needs `public_key` to check its signature.
    :param on_verified: called with each link (trace or event row) that verified, in chain order.
    :returns: a report; `broken` is the first broken link, `None` when the chain verifies.
    """
    if checkpoint is not None and public_key is None:
        raise ValueError("verifying against a checkpoint needs the audit public key")
    if session.get_bind().dialect.name == "postgresql" and not session.in_transaction():
        # One snapshot for every batch, so a retention run meanwhile cannot look like deleted links.
        session.connection(execution_options={"isolation_level": "REPEATABLE READ"})
    anchors = list(session.scalars(select(AuditAnchor).order_by(AuditAnchor.up_to_seq)))
    start = ChainPosition(0, GENESIS_MAC)
    forged_anchor = None
    for anchor in anchors:
        if not hmac.compare_digest(anchor_mac(key, anchor), anchor.anchor_mac):
            forged_anchor = BrokenLink(anchor.up_to_seq, None, "retention anchor is not authentic")
            break
        start = ChainPosition(anchor.up_to_seq, anchor.mac)
    checker = LinkChecker(key, start, watch_seq=checkpoint.seq if checkpoint else None)
    checker.broken = forged_anchor
    if forged_anchor is None:
        for link in iter_links(session):
            if not checker.check(link.seq, link.id, link.prev_mac, link.mac, canonical_bytes(link_payload(link))):
                break
            if on_verified is not None:
                on_verified(link)
    report = VerifyReport(
        ok=checker.broken is None,
        checked=checker.checked,
        start_seq=start.seq,
        head_seq=checker.head.seq,
        head_mac=checker.head.mac,
        broken=checker.broken,
    )
    if start.seq:
        report.notes.append(f"links 1..{start.seq} were archived by retention; verify them with their archives")
    if checkpoint is not None and report.ok:
        _check_against(report, checkpoint, public_key, checker, anchors)  # type: ignore[arg-type]
    return report


@dataclass(frozen=True)
class TenantBreak:
    trace_id: str | None
    reason: str


@dataclass
class TenantVerifyReport:
    """A verification as one tenant's auditor may see it: no link numbers, MACs or other tenants' figures."""

    ok: bool
    checked: int
    broken: TenantBreak | None = None
    notes: list[str] = field(default_factory=list)
    events_checked: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def verify_for_tenant(session: Session, key: bytes, tenant: str) -> TenantVerifyReport:
    """Verify the whole chain (the tenant's links depend on every link before them) and report for `tenant`.

    `checked` counts the tenant's traces whose links verified, `events_checked` its events; `broken` names the
    trace or event at the break only when it is the tenant's own. Link numbers are left out: they count every
    tenant's links.
    """
    checked = events = 0

    def count(link: Any) -> None:
        nonlocal checked, events
        if is_event(link):
            events += link.tenant == tenant
        else:
            checked += link.tenant == tenant

    report = verify_chain(session, key, on_verified=count)
    result = TenantVerifyReport(ok=report.ok, checked=checked, events_checked=events)
    if report.broken is not None:
        trace_id = report.broken.trace_id
        own = trace_id is not None and tenant in (
            session.scalar(select(AuditTrace.tenant).where(AuditTrace.id == trace_id)),
            session.scalar(select(AuditEvent.tenant).where(AuditEvent.id == trace_id)),
        )
        result.broken = (
            TenantBreak(trace_id, "the chain breaks at this trace: it was changed, or links before it were "
                        "removed, inserted or reordered")
            if own
            else TenantBreak(None, "the chain breaks outside this tenant's traces")
        )
        result.notes.append("this tenant's traces after the break are not verified; the operator locates the break "
                            "with `docqa audit verify`")
    if report.start_seq:
        result.notes.append("older traces were archived by retention; the operator verifies them with their archives")
    return result


def _check_against(
    report: VerifyReport,
    checkpoint: Checkpoint,
    public_key: Ed25519PublicKey,
    checker: LinkChecker,
    anchors: list[AuditAnchor],
) -> None:
    def fail(seq: int | None, reason: str) -> None:
        report.ok = False
        report.broken = BrokenLink(seq, None, reason)

    if not checkpoint.signature_valid(public_key):
        fail(None, "checkpoint signature does not verify with the audit public key")
    elif checkpoint.kind != KIND_CHAIN:
        fail(None, f"not a chain checkpoint (kind {checkpoint.kind!r})")
    elif report.head_seq < checkpoint.seq:
        fail(report.head_seq + 1, f"chain truncated: the checkpoint covers {checkpoint.seq} links, "
             f"the database ends at {report.head_seq}")
    elif checkpoint.seq == 0:
        report.notes.append("checkpoint of an empty chain")
    elif checkpoint.seq <= report.start_seq:
        anchor = next((a for a in anchors if a.up_to_seq == checkpoint.seq), None)
        if anchor is not None and not hmac.compare_digest(anchor.mac, checkpoint.mac):
            fail(checkpoint.seq, "link differs from the checkpoint: chain rewritten")
        elif anchor is None:
            report.notes.append(f"checkpoint link {checkpoint.seq} was archived; verify it with the archive")
    elif checker.watched_mac is None or not hmac.compare_digest(checker.watched_mac, checkpoint.mac):
        fail(checkpoint.seq, "link differs from the checkpoint: chain rewritten")
    if report.ok:
        report.notes.append(f"matches checkpoint of {checkpoint.created_at} at link {checkpoint.seq}")
