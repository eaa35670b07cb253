"""Configuration that changes answers, recorded by hash: the model of each LLM role and every strategy loaded from
a YAML file (`DOCQA_PIPELINES_DIR`, prompts included, by SHA-256 of the file).

The server records a `config.loaded` event when it starts with a configuration that differs from the last one
recorded, so the chain says from which link on answers came from which models and pipeline files; restarting
with the same configuration records nothing. Workers starting together record it once (the check runs under
the chain lock).

Usage:
    record_config_if_changed(settings)   # at start-up, after load_pipelines_dir(settings)
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from sqlalchemy import select

from docqa.audit.canonical import canonical_bytes
from docqa.audit.chain import lock_chain
from docqa.audit.events import CONFIG_LOADED, SYSTEM_TENANT, append_event
from docqa.audit.models import AuditEvent
from docqa.audit.recorder import audit_session, models_from_settings
from docqa.settings import Settings


def answer_config(settings: Settings) -> dict[str, Any]:
    """What decides an answer besides the question and the documents: models by role, YAML strategies by hash."""
    pipelines: dict[str, str] = {}
    directory = settings.pipelines_dir
    if directory is not None and Path(directory).is_dir():
        for path in sorted(Path(directory).glob("*.yaml")):
            if path.is_file():
                pipelines[path.name] = hashlib.sha256(path.read_bytes()).hexdigest()
    return {"models": models_from_settings(settings), "pipeline_files": pipelines}


def config_digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_bytes(config)).hexdigest()


def record_config_if_changed(settings: Settings, actor: str = "system") -> str | None:
    """Append a `config.loaded` event when the configuration differs from the last recorded; its id, else None."""
    config = answer_config(settings)
    digest = config_digest(config)
    with audit_session(settings) as session:
        lock_chain(session)  # concurrent starts: the second sees the first one's event
        last = session.scalars(select(AuditEvent).where(AuditEvent.action == CONFIG_LOADED)
                               .order_by(AuditEvent.seq.desc()).limit(1)).first()
        previous = last.after if last is not None and isinstance(last.after, dict) else None
        if previous is not None and previous.get("hash") == digest:
            return None
        event = append_event(
            session, settings, tenant=SYSTEM_TENANT, actor=actor, action=CONFIG_LOADED, target=f"config:{digest}",
            before=None if previous is None else {"hash": previous.get("hash")},
            after={"hash": digest, **config})
        return event.id
