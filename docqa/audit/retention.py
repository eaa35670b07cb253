"""Retention: move the oldest traces to a JSON Lines archive without breaking verification.

The archived prefix is written (with chain proofs) and signed (`<archive>.checkpoint.json`, kind `archive`)
before the rows are deleted; a keyed anchor row records the last archived link, so the live chain still
verifies from there and the archive verifies on its own against its checkpoint.

Retention is a policy with a floor: without `before` the cut-off is `audit_retention_days` ago (default 183,
about six months), and a cut-off or policy keeping less than `audit_retention_floor_days` is refused.

Usage:
    report = retain(settings, archive=Path("audit-2025.jsonl"))  # the policy's cut-off
    report = retain(settings, before=datetime(2025, 1, 1, tzinfo=UTC), archive=Path("audit-2024.jsonl"))
    verify_archive(Path("audit-2025.jsonl"), hmac_key(settings), verify_key(settings)).ok
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from sqlalchemy import delete, select, text
from sqlalchemy.orm import Session

from docqa.audit.canonical import canonical_bytes, link_payload
from docqa.audit.chain import ChainPosition, anchor_mac, chain_start, lock_chain
from docqa.audit.checkpoint import KIND_ARCHIVE, create_checkpoint, load_checkpoint, write_checkpoint
from docqa.audit.events import RETENTION_RUN, SYSTEM_TENANT, append_event
from docqa.audit.export import as_utc, export_line, link_time, verify_jsonl
from docqa.audit.keys import hmac_key, signing_key
from docqa.audit.models import AuditAnchor, AuditEvent, AuditStep, AuditTrace
from docqa.audit.recorder import audit_session
from docqa.audit.verify import BrokenLink, LinkChecker, VerifyReport, iter_links
from docqa.settings import Settings


class ArchiveIntegrityError(RuntimeError):
    """The chain to be archived does not verify: archiving it would destroy the evidence."""


class RetentionFloorError(ValueError):
    """A retention run or policy would keep less than the configured floor."""


def check_policy(settings: Settings) -> None:
    """:raises RetentionFloorError: the configured retention is shorter than the configured floor."""
    if settings.audit_retention_days < settings.audit_retention_floor_days:
        raise RetentionFloorError(
            f"audit retention of {settings.audit_retention_days} days is below the floor of "
            f"{settings.audit_retention_floor_days} days (DOCQA_AUDIT_RETENTION_FLOOR_DAYS)")


def policy_cutoff(settings: Settings, now: datetime | None = None) -> datetime:
    """The policy's cut-off: links older than `audit_retention_days` before `now` may be archived."""
    check_policy(settings)
    return (now or datetime.now(UTC)).astimezone(UTC) - timedelta(days=settings.audit_retention_days)


def check_floor(settings: Settings, cutoff: datetime, now: datetime | None = None) -> None:
    """:raises RetentionFloorError: archiving before `cutoff` would drop links younger than the floor."""
    check_policy(settings)
    floor = (now or datetime.now(UTC)).astimezone(UTC) - timedelta(days=settings.audit_retention_floor_days)
    if settings.audit_retention_floor_days and as_utc(cutoff) > floor:
        raise RetentionFloorError(
            f"refusing to archive links after {floor.isoformat()}: the audit trail keeps at least "
            f"{settings.audit_retention_floor_days} days (DOCQA_AUDIT_RETENTION_FLOOR_DAYS)")


@dataclass(frozen=True)
class RetentionReport:
    archived: int
    from_seq: int
    up_to_seq: int
    archive: Path | None
    checkpoint: Path | None


def checkpoint_path(archive: Path) -> Path:
    return archive.with_name(archive.name + ".checkpoint.json")


def retain(settings: Settings, *, before: datetime | None = None, archive: Path, actor: str = "system",
           now: datetime | None = None) -> RetentionReport:
    """Archive and delete the longest chain prefix asked before `before` (default: the policy's cut-off,
    `audit_retention_days` ago); nothing happens if it is empty.

    :raises RetentionFloorError: `before` (or the policy) would keep less than `audit_retention_floor_days`.
    :raises FileExistsError: the archive file already exists (archives are never overwritten).
    :raises ArchiveIntegrityError: the prefix does not verify.
    """
    before = policy_cutoff(settings, now) if before is None else before
    check_floor(settings, before, now)
    if archive.exists():
        raise FileExistsError(f"archive {archive} already exists")
    key, signer, cutoff = hmac_key(settings), signing_key(settings), as_utc(before)
    tmp = archive.with_name(f".{archive.name}.tmp")
    with audit_session(settings) as session:
        # Appends wait while the prefix is archived, so the anchor is the exact chain position it names.
        lock_chain(session)
        start = chain_start(session)
        checker = LinkChecker(key, start)
        try:
            digest = _write_prefix(session, checker, cutoff, tmp)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        if checker.checked == 0:
            tmp.unlink()
            return RetentionReport(0, start.seq + 1, start.seq, None, None)
        head = checker.head
        checkpoint = create_checkpoint(
            seq=head.seq, mac=head.mac, signer=signer, kind=KIND_ARCHIVE,
            extra={"from_seq": start.seq + 1, "prev_mac": start.mac, "archive_sha256": digest.hexdigest(),
                   "archived_count": checker.checked},
        )
        os.replace(tmp, archive)
        write_checkpoint(checkpoint, checkpoint_path(archive))
        anchor = AuditAnchor(
            up_to_seq=head.seq, mac=head.mac, archived_count=checker.checked,
            archive_sha256=digest.hexdigest(), created_at=datetime.now(UTC),
        )
        anchor.anchor_mac = anchor_mac(key, anchor)
        session.add(anchor)
        if session.get_bind().dialect.name == "postgresql":
            # Lets the append-only trigger pass these deletes; the app role has no DELETE privilege anyway.
            session.execute(text("SET LOCAL docqa.audit_retention = 'on'"))
        archived_ids = select(AuditTrace.id).where(AuditTrace.seq <= head.seq)
        session.execute(delete(AuditStep).where(AuditStep.trace_id.in_(archived_ids)))
        session.execute(delete(AuditTrace).where(AuditTrace.seq <= head.seq))
        session.execute(delete(AuditEvent).where(AuditEvent.seq <= head.seq))
        # The run itself is the first link after the new anchor, committed with the deletion.
        append_event(session, settings, tenant=SYSTEM_TENANT, actor=actor, action=RETENTION_RUN,
                     target=f"archive:{archive.name}",
                     after={"archived": checker.checked, "from_seq": start.seq + 1, "up_to_seq": head.seq,
                            "before": cutoff.isoformat(), "archive_sha256": digest.hexdigest(),
                            "policy_days": settings.audit_retention_days,
                            "floor_days": settings.audit_retention_floor_days})
    return RetentionReport(checker.checked, start.seq + 1, head.seq, archive, checkpoint_path(archive))


def _write_prefix(session: Session, checker: LinkChecker, cutoff: datetime, path: Path) -> hashlib._Hash:
    digest = hashlib.sha256()
    with path.open("wb") as fh:
        for trace in iter_links(session, after_seq=checker.start.seq):
            if link_time(trace) >= cutoff:
                break
            if not checker.check(trace.seq, trace.id, trace.prev_mac, trace.mac, canonical_bytes(link_payload(trace))):
                raise ArchiveIntegrityError(f"refusing to archive a broken chain: {checker.broken}")
            line = export_line(trace)
            fh.write(line)
            digest.update(line)
        fh.flush()
        os.fsync(fh.fileno())
    return digest


def verify_archive(archive: Path, key: bytes, public_key: Ed25519PublicKey) -> VerifyReport:
    """Verify an archive against its signed checkpoint: signature, file digest, every link, and the end."""
    def failed(reason: str) -> VerifyReport:
        return VerifyReport(False, 0, 0, 0, "", BrokenLink(None, None, reason))

    try:
        checkpoint = load_checkpoint(checkpoint_path(archive))
    except ValueError as exc:
        return failed(str(exc))
    if checkpoint.kind != KIND_ARCHIVE or not checkpoint.signature_valid(public_key):
        return failed("archive checkpoint signature does not verify with the audit public key")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != checkpoint.extra.get("archive_sha256"):
        return failed("archive file differs from the one its checkpoint signed")
    start = ChainPosition(int(checkpoint.extra["from_seq"]) - 1, str(checkpoint.extra["prev_mac"]))
    report = verify_jsonl(archive, key, start=start)
    if report.ok and (report.head_seq, report.head_mac) != (checkpoint.seq, checkpoint.mac):
        report.ok = False
        report.broken = BrokenLink(report.head_seq + 1, None, "archive ends before its checkpoint")
    return report
