"""Canonical serialisation of a trace: the exact bytes its chain link authenticates.

Rules: UTF-8 JSON with sorted keys, no whitespace, no NaN/Infinity; floats in Python's shortest round-trip
form (`repr`, identical on every platform); timestamps as UTC ISO-8601 with microseconds and a `Z`.
The payload is rebuilt from the stored rows on verification, so any edited column changes the bytes.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

from docqa.server.audit.models import AuditStep, AuditTrace

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
