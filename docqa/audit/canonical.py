"""Canonical serialisation of a trace: the exact bytes its chain link authenticates.

Rules: UTF-8 JSON with sorted keys, no whitespace, no NaN/Infinity; floats in Python's shortest round-trip
form (`repr`, identical on every platform); timestamps as UTC ISO-8601 with microseconds and a `Z`.
The payload is rebuilt from the stored rows on verification, so any edited column changes the bytes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from docqa.audit.models import AuditEvent, AuditStep, AuditTrace

FORMAT_VERSION = 1


def canonical_bytes(value: Any) -> bytes:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def format_timestamp(value: datetime) -> str:
    # SQLite hands timestamps back without a zone; they were written in UTC.
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def step_payload(step: AuditStep | Any) -> dict[str, Any]:
    return {
        "position": int(step.position),
        "parent": None if step.parent is None else int(step.parent),
        "kind": step.kind,
        "name": step.name,
        "inputs": step.inputs,
        "outputs": step.outputs,
        "documents": step.documents,
        # Float columns may hand back ints written as ints; the payload always says float.
        "started_at": float(step.started_at),
        "duration_s": float(step.duration_s),
        "llm_calls": int(step.llm_calls),
        "prompt_tokens": int(step.prompt_tokens),
        "completion_tokens": int(step.completion_tokens),
        "error": step.error,
    }


def trace_payload(trace: AuditTrace | Any) -> dict[str, Any]:
    """Everything recorded about a question except its chain link (`seq`, `prev_mac`, `mac`).

    :param trace: an `AuditTrace`, or any object with its column attributes and `steps` (`verify.StoredTrace`).
    """
    return {
        "format": FORMAT_VERSION,
        "id": trace.id,
        "asked_by": trace.asked_by,
        "tenant": trace.tenant,
        "asked_at": format_timestamp(trace.asked_at),
        "question": trace.question,
        "pipeline": trace.pipeline,
        "config_hash": trace.config_hash,
        "config": trace.config,
        "models": trace.models,
        "answer": trace.answer,
        "citations": trace.citations,
        "status": trace.status,
        "error": trace.error,
        "stop_reason": trace.stop_reason,
        "totals": trace.totals,
        "steps": [step_payload(s) for s in sorted(trace.steps, key=lambda s: s.position)],
    }


EVENT_FORMAT_VERSION = 1


def event_payload(event: AuditEvent | Any) -> dict[str, Any]:
    """Everything recorded about an event except its chain link. `"type": "event"` keeps an event's bytes
    distinct from any trace's (a trace payload has no `type`), so one can never pass for the other."""
    return {
        "type": "event",
        "format": EVENT_FORMAT_VERSION,
        "id": event.id,
        "at": format_timestamp(event.at),
        "tenant": event.tenant,
        "actor": event.actor,
        "action": event.action,
        "target": event.target,
        "before": event.before,
        "after": event.after,
        "result": event.result,
        "request_id": event.request_id,
    }


def link_payload(link: Any) -> dict[str, Any]:
    """The payload of a chain link, trace or event (an event row has an `action`, a trace a `question`)."""
    return event_payload(link) if hasattr(link, "action") else trace_payload(link)
