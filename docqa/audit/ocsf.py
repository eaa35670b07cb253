"""OCSF export: the audit chain as Open Cybersecurity Schema Framework events (JSON Lines), with chain proofs.

Each link becomes one event of one of three OCSF classes, the ones a SIEM's OCSF parsers (Amazon Security Lake,
Splunk, Sentinel's ASIM, Elastic) already map:

- Authentication (3002, category 3 Identity & Access Management): failed sign-ins.
- Account Change (3001, category 3): users created/changed/deactivated, keys issued/revoked, group membership.
- API Activity (6003, category 6 Application Activity): everything else (documents and their access lists,
  records, groups created, topic refits, configuration, retention, checkpoints) and answered questions.

Every event carries the base attributes OCSF requires (`class_uid`, `category_uid`, `activity_id`, `type_uid`
= class_uid * 100 + activity_id, `time` in epoch milliseconds, `severity_id`, `metadata.version/product`) and
`status_id`; what OCSF has no attribute for goes under `unmapped.docqa`, including the chain proof
(`chain.seq/prev_mac/mac`) and the canonical `payload` the MAC covers, so the receiving side can check with the
HMAC key that nothing was dropped, reordered or changed on the way (`verify_ocsf_lines`).

Usage:
    for line in ocsf_lines(session, after_seq=last_shipped):
        sink.write(line)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from sqlalchemy.orm import Session

from docqa.audit import events as ev
from docqa.audit.canonical import canonical_bytes, link_payload
from docqa.audit.chain import ChainPosition
from docqa.audit.export import link_time
from docqa.audit.verify import BrokenLink, LinkChecker, VerifyReport, is_event, iter_links

OCSF_VERSION = "1.3.0"
PRODUCT = {"name": "docqa", "vendor_name": "docqa", "version": "0.1.0"}

AUTHENTICATION, ACCOUNT_CHANGE, API_ACTIVITY = 3002, 3001, 6003
_CATEGORY = {AUTHENTICATION: 3, ACCOUNT_CHANGE: 3, API_ACTIVITY: 6}
_CLASS_NAME = {AUTHENTICATION: "Authentication", ACCOUNT_CHANGE: "Account Change", API_ACTIVITY: "API Activity"}
_CATEGORY_NAME = {3: "Identity & Access Management", 6: "Application Activity"}

# action -> (class_uid, activity_id, activity_name). Activity ids are the class's own enumeration: Account Change
# 1 Create, 5 Disable, 7 Attach Policy, 8 Detach Policy, 99 Other; API Activity 1 Create, 2 Read, 3 Update,
# 4 Delete, 99 Other; Authentication 1 Logon.
_MAPPING: dict[str, tuple[int, int, str]] = {
    ev.SIGNIN_FAILED: (AUTHENTICATION, 1, "Logon"),
    ev.USER_CREATED: (ACCOUNT_CHANGE, 1, "Create"),
    ev.USER_CHANGED: (ACCOUNT_CHANGE, 99, "Change"),
    ev.USER_DEACTIVATED: (ACCOUNT_CHANGE, 5, "Disable"),
    ev.KEY_ISSUED: (ACCOUNT_CHANGE, 99, "Key Issued"),
    ev.KEY_REVOKED: (ACCOUNT_CHANGE, 99, "Key Revoked"),
    ev.GROUP_MEMBER_ADDED: (ACCOUNT_CHANGE, 7, "Attach Policy"),
    ev.GROUP_MEMBER_REMOVED: (ACCOUNT_CHANGE, 8, "Detach Policy"),
    ev.GROUP_CREATED: (API_ACTIVITY, 1, "Create"),
    ev.DOCUMENT_INGESTED: (API_ACTIVITY, 1, "Create"),
    ev.RECORDS_INGESTED: (API_ACTIVITY, 1, "Create"),
    ev.DOCUMENT_ACCESS_CHANGED: (API_ACTIVITY, 3, "Update"),
    ev.DOCUMENT_DELETED: (API_ACTIVITY, 4, "Delete"),
    ev.TOPICS_REFIT: (API_ACTIVITY, 3, "Update"),
    ev.SOURCE_DEFINED: (API_ACTIVITY, 1, "Create"),
    ev.SOURCE_REMOVED: (API_ACTIVITY, 4, "Delete"),
    ev.CONFIG_LOADED: (API_ACTIVITY, 3, "Update"),
    ev.RETENTION_RUN: (API_ACTIVITY, 4, "Delete"),
    ev.CHECKPOINT_SIGNED: (API_ACTIVITY, 1, "Create"),
    ev.PASSAGES_SEARCHED: (API_ACTIVITY, 2, "Read"),
    ev.PASSAGE_READ: (API_ACTIVITY, 2, "Read"),
}
TRACE_ACTION = "question.answered"

STATUS_SUCCESS, STATUS_FAILURE = 1, 2
SEVERITY_INFORMATIONAL, SEVERITY_LOW = 1, 2


def _user(value: str) -> dict[str, Any]:
    # `cli:<os user>` and `system` are not docqa accounts: typed as OCSF "Other" (99), accounts as "User" (1).
    kind = (99, "Other") if value.startswith("cli:") or value == "system" else (1, "User")
    return {"name": value, "uid": value, "type_id": kind[0], "type": kind[1]}


def _target_user(event: Any) -> dict[str, Any]:
    """The account an Account Change is about: the target user, or for a group change the member."""
    after = event.after if isinstance(event.after, dict) else {}
    before = event.before if isinstance(event.before, dict) else {}
    if event.target.startswith("user:"):
        return _user(event.target.removeprefix("user:"))
    member = after.get("user") or before.get("user") or after.get("user_id") or before.get("user_id")
    if member:
        return _user(str(member))
    return {"uid": event.target, "name": event.target, "type_id": 0, "type": "Unknown"}


def ocsf_record(link: Any, *, proof: dict[str, Any] | None = None) -> dict[str, Any]:
    """One chain link (trace or event row) as an OCSF event dict; `proof` replaces its chain position (a tenant's
    view, `tenant_proof`)."""
    chain = proof or {"seq": int(link.seq), "prev_mac": link.prev_mac, "mac": link.mac}
    if is_event(link):
        class_uid, activity_id, activity_name = _MAPPING.get(link.action, (API_ACTIVITY, 99, "Other"))
        ok = link.result == ev.RESULT_SUCCESS
        actor, tenant, operation = link.actor, link.tenant, link.action
        request_id, target = link.request_id, link.target
        extra: dict[str, Any] = {"target": link.target, "before": link.before, "after": link.after,
                                 "result": link.result}
    else:
        class_uid, activity_id, activity_name = API_ACTIVITY, 2, "Read"
        ok = link.status == "completed"
        actor, tenant, operation = link.asked_by, link.tenant, TRACE_ACTION
        request_id, target = None, f"trace:{link.id}"
        extra = {"pipeline": link.pipeline, "status": link.status}
    category_uid = _CATEGORY[class_uid]
    record: dict[str, Any] = {
        "class_uid": class_uid,
        "class_name": _CLASS_NAME[class_uid],
        "category_uid": category_uid,
        "category_name": _CATEGORY_NAME[category_uid],
        "activity_id": activity_id,
        "activity_name": activity_name,
        "type_uid": class_uid * 100 + activity_id,
        "type_name": f"{_CLASS_NAME[class_uid]}: {activity_name}",
        "time": int(link_time(link).timestamp() * 1000),
        "severity_id": SEVERITY_INFORMATIONAL if ok else SEVERITY_LOW,
        "severity": "Informational" if ok else "Low",
        "status_id": STATUS_SUCCESS if ok else STATUS_FAILURE,
        "status": "Success" if ok else "Failure",
        "message": f"{operation} {target}",
        "metadata": {"version": OCSF_VERSION, "product": PRODUCT, "uid": link.id, "sequence": chain["seq"],
                     "log_name": "docqa.audit", "tenant_uid": tenant},
        "actor": {"user": _user(actor)},
        "unmapped": {"docqa": {**extra, "chain": chain, "payload": link_payload(link)}},
    }
    if request_id:
        record["metadata"]["correlation_uid"] = request_id
    if class_uid == API_ACTIVITY:
        record["api"] = {"operation": operation, "service": {"name": "docqa"}}
        if request_id:
            record["api"]["request"] = {"uid": request_id}
        record["resources"] = [{"uid": target, "type": target.split(":", 1)[0] if ":" in target else "resource"}]
        # docqa records no client address for admin calls; the endpoint names the interface the call came through.
        record["src_endpoint"] = {"name": "docqa-api" if request_id else "docqa-cli"}
    elif class_uid == ACCOUNT_CHANGE:
        record["user"] = _target_user(link)
    else:  # Authentication: who tried to sign in, from where
        after = link.after if isinstance(link.after, dict) else {}
        record["user"] = _user(actor)
        record["src_endpoint"] = {"ip": after["address"]} if after.get("address") else {"name": "unknown"}
        record["dst_endpoint"] = {"svc_name": "docqa"}
        record["is_mfa"] = False
    return record


def ocsf_line(link: Any) -> bytes:
    return json.dumps(ocsf_record(link), sort_keys=True, ensure_ascii=False).encode("utf-8") + b"\n"


def ocsf_lines(session: Session, *, after_seq: int = 0, tenant: str | None = None,
               events_only: bool = False) -> Iterator[tuple[int, bytes]]:
    """(seq, line) of the links after `after_seq`, in chain order (resume from the last shipped sequence)."""
    for link in iter_links(session, after_seq=after_seq):
        if (tenant is not None and link.tenant != tenant) or (events_only and not is_event(link)):
            continue
        yield int(link.seq), ocsf_line(link)


def verify_ocsf_lines(lines: Iterable[bytes], key: bytes, *, start: ChainPosition | None = None,
                      contiguous: bool = True) -> VerifyReport:
    """Check each OCSF line's MAC over its carried payload and the links between consecutive lines.

    Without `start` the lines may begin anywhere in the chain (a resumed export). `contiguous=False` accepts
    several runs of consecutive links (a tenant's or events-only export), each checked from its first line's
    `prev_mac`; by default a missing line breaks verification.
    """
    checker = LinkChecker(key, start or ChainPosition(0, ""))
    first_seq: int | None = None
    for number, raw in enumerate(lines, start=1):
        try:
            docqa = json.loads(raw)["unmapped"]["docqa"]
            seq, prev_mac, mac = int(docqa["chain"]["seq"]), str(docqa["chain"]["prev_mac"]), str(docqa["chain"]["mac"])
            payload, link_id = canonical_bytes(docqa["payload"]), str(docqa["payload"].get("id"))
        except (TypeError, KeyError, ValueError, AttributeError):
            checker.broken = BrokenLink(None, None, f"line {number} is not an OCSF docqa record with a chain proof")
            break
        if start is None and (first_seq is None or (not contiguous and seq != checker.head.seq + 1)):
            checker.head = ChainPosition(seq - 1, prev_mac)
        first_seq = seq if first_seq is None else first_seq
        if not checker.check(seq, link_id, prev_mac, mac, payload):
            break
    base = start.seq if start is not None else (first_seq or 1) - 1
    return VerifyReport(ok=checker.broken is None, checked=checker.checked, start_seq=base,
                        head_seq=checker.head.seq, head_mac=checker.head.mac, broken=checker.broken)
