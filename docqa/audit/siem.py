"""SIEM export: the audit chain as ECS-shaped JSON Lines (Elastic Common Schema field names).

One JSON object per line, in chain order, for any collector that reads JSON lines (Filebeat, Fluent Bit,
Splunk HEC, Sentinel's AMA): `@timestamp`, `event.*` (kind, category, type, action, outcome, id, sequence),
`user.name`, `organization.id`, `source.ip` for failed sign-ins, and `docqa.*` holding what ECS has no field
for (target, before/after, the chain proof). The proof (`docqa.chain.seq/prev_mac/mac`) lets the receiving side
check, with the HMAC key, that nothing was dropped or changed on the way (`docqa audit export` JSON Lines
verify line by line; an ECS line carries the same canonical payload under `docqa.payload`).

Usage:
    count = export_ecs(session, Path("docqa-ecs.jsonl"), after_seq=last_shipped_seq)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from docqa.audit import events as ev
from docqa.audit.canonical import link_payload
from docqa.audit.export import link_time
from docqa.audit.verify import is_event, iter_links

# ECS categorisation of each action: (event.category, event.type).
_CATEGORIES: dict[str, tuple[list[str], list[str]]] = {
    ev.KEY_ISSUED: (["iam"], ["creation"]),
    ev.KEY_REVOKED: (["iam"], ["deletion"]),
    ev.USER_CREATED: (["iam"], ["user", "creation"]),
    ev.USER_CHANGED: (["iam"], ["user", "change"]),
    ev.USER_DEACTIVATED: (["iam"], ["user", "deletion"]),
    ev.GROUP_CREATED: (["iam"], ["group", "creation"]),
    ev.GROUP_MEMBER_ADDED: (["iam"], ["group", "change"]),
    ev.GROUP_MEMBER_REMOVED: (["iam"], ["group", "change"]),
    ev.DOCUMENT_INGESTED: (["file"], ["creation"]),
    ev.RECORDS_INGESTED: (["file"], ["creation"]),
    ev.DOCUMENT_ACCESS_CHANGED: (["file", "iam"], ["change"]),
    ev.DOCUMENT_DELETED: (["file"], ["deletion"]),
    ev.SIGNIN_FAILED: (["authentication"], ["start"]),
    ev.TOPICS_REFIT: (["configuration"], ["change"]),
    ev.SOURCE_DEFINED: (["configuration", "iam"], ["creation"]),
    ev.SOURCE_REMOVED: (["configuration", "iam"], ["deletion"]),
    ev.RETENTION_RUN: (["configuration"], ["deletion"]),
    ev.CHECKPOINT_SIGNED: (["configuration"], ["info"]),
    ev.CONFIG_LOADED: (["configuration"], ["change"]),
    ev.PASSAGES_SEARCHED: (["file"], ["access"]),
    ev.PASSAGE_READ: (["file"], ["access"]),
}


def _timestamp(value: datetime) -> str:
    return value.isoformat().replace("+00:00", "Z")


def ecs_record(link: Any, *, proof: dict[str, Any] | None = None) -> dict[str, Any]:
    """One chain link (trace or event) as an ECS document; `proof` replaces its chain position (a tenant's view,
    `tenant_proof`)."""
    payload = link_payload(link)
    chain = proof or {"seq": int(link.seq), "prev_mac": link.prev_mac, "mac": link.mac}
    if is_event(link):
        category, kind = _CATEGORIES.get(link.action, (["configuration"], ["info"]))
        record: dict[str, Any] = {
            "@timestamp": _timestamp(link_time(link)),
            "event": {"kind": "event", "category": category, "type": kind, "action": link.action,
                      "outcome": link.result, "id": link.id, "sequence": chain["seq"], "dataset": "docqa.audit"},
            "user": {"name": link.actor},
            "organization": {"id": link.tenant},
            "docqa": {"target": link.target, "before": link.before, "after": link.after,
                      "request_id": link.request_id, "chain": chain, "payload": payload},
        }
        if link.action == ev.SIGNIN_FAILED and isinstance(link.after, dict) and link.after.get("address"):
            record["source"] = {"ip": link.after["address"]}
        return record
    return {
        "@timestamp": _timestamp(link_time(link)),
        "event": {"kind": "event", "category": ["process"], "type": ["info"], "action": "question.answered",
                  "outcome": "success" if link.status == "completed" else "failure", "id": link.id,
                  "sequence": chain["seq"], "dataset": "docqa.audit"},
        "user": {"name": link.asked_by},
        "organization": {"id": link.tenant},
        "docqa": {"pipeline": link.pipeline, "status": link.status, "chain": chain, "payload": payload},
    }


def ecs_lines(session: Session, *, after_seq: int = 0, tenant: str | None = None,
              events_only: bool = False) -> Iterator[bytes]:
    """ECS lines of the links after `after_seq` (resume from the last shipped `event.sequence`)."""
    for link in iter_links(session, after_seq=after_seq):
        if (tenant is not None and link.tenant != tenant) or (events_only and not is_event(link)):
            continue
        yield json.dumps(ecs_record(link), sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n"


def ecs_seq_lines(session: Session, *, after_seq: int = 0, tenant: str | None = None,
                  events_only: bool = False) -> Iterator[tuple[int, bytes]]:
    """(seq, ECS line) pairs, for `shipping.ship`."""
    for link in iter_links(session, after_seq=after_seq):
        if (tenant is not None and link.tenant != tenant) or (events_only and not is_event(link)):
            continue
        yield int(link.seq), json.dumps(ecs_record(link), sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n"


def export_ecs(session: Session, out: Path | None, *, after_seq: int = 0, events_only: bool = False) -> int:
    """Write ECS lines to `out` (`None`: stdout); returns how many were written."""
    count = 0
    if out is None:
        for line in ecs_lines(session, after_seq=after_seq, events_only=events_only):
            sys.stdout.buffer.write(line)
            count += 1
        sys.stdout.buffer.flush()
        return count
    tmp = out.with_name(f".{out.name}.tmp")
    with tmp.open("wb") as fh:
        for line in ecs_lines(session, after_seq=after_seq, events_only=events_only):
            fh.write(line)
            count += 1
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out)
    return count
