"""Passages read outside a question, as audit events: with DOCQA_AUDIT_PASSAGE_READS set, each `search`
(`passages.searched`: the masked query and the chunk ids returned) and each `read_passage` (`passage.read`: the
chunk id and its neighbours shown; a passage refused as not found is a `failure`) is appended to the audit chain
under the caller's tenant. Off, they leave no event; questions are traced either way.

Usage:
    await record_read(context.settings, caller, PASSAGE_READ, f"chunk:{chunk_id}", {"shown": [...]})
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from docqa.accounts.identity import Caller
from docqa.audit.events import RESULT_FAILURE, RESULT_SUCCESS, record_event
from docqa.settings import Settings

logger = logging.getLogger(__name__)
# What the runs' selection and the access events name as the way in.
CHANNEL = "mcp"


async def record_read(settings: Settings, caller: Caller, action: str, target: str, after: dict[str, Any],
                      *, succeeded: bool = True) -> None:
    """Append the event when configured. Its write is blocking database work, kept off the event loop; a
    failed write is logged and the caller still gets the passages (the API's reads are not refused either)."""
    if not settings.audit_passage_reads:
        return
    try:
        await asyncio.to_thread(
            record_event, settings, tenant=caller.tenant, actor=caller.user_id, action=action, target=target,
            after={**after, "channel": CHANNEL}, result=RESULT_SUCCESS if succeeded else RESULT_FAILURE)
    except Exception:
        logger.exception("could not record a %s audit event", action)
