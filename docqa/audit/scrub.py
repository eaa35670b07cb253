"""Make trace values safe to store: no credentials, and nothing a SQL JSON/text column would reject.

Pipelines already drop credential-named keys (`docqa.recording.to_jsonable`); this is the last line before
the database: it also masks the configured secret values wherever they appear inside text (a prompt that
echoes a header, an error message quoting a URL) and common token shapes, docqa API keys among them.
`scrub_log_records` masks the same token shapes in the process's log records.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Any

from sqlalchemy.engine import make_url

from docqa.recording import SECRET_KEYS
from docqa.settings import Settings

MASK = "***"
_TOKEN_PATTERNS = (
    re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    # docqa API keys, `dq_<16 hex key id>_<token_urlsafe secret>` (`docqa.accounts.keys`): a user who
    # pastes one into a question must not hand it to everyone who can read traces. No word boundary in front,
    # since `_` is a word character and `my_dq_...` still holds a working key; any secret length, since a
    # clipped step text may cut the key short and what is left still narrows a guess.
    re.compile(r"dq_[A-Za-z0-9-]{16}_[A-Za-z0-9_-]+"),
    # user:password@ in URLs (database, broker, Elasticsearch).
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
)
# Values this short are too likely to occur by chance to be masked everywhere.
_MIN_SECRET_CHARS = 6


def secret_values(settings: Settings) -> list[str]:
    """Every credential the settings hold, longest first so overlapping secrets mask completely."""
    found = [
        settings.llm_api_key,
        settings.elasticsearch_api_key,
        settings.audit_hmac_key,
        settings.audit_signing_key,
        *(endpoint.api_key for endpoint in settings.llm_roles.values()),
    ]
    values = [s.get_secret_value() for s in found if s is not None]
    # The rate-limit Redis URL is a server setting; core settings built outside the server lack it.
    urls = (settings.database_url, settings.broker_url, settings.elasticsearch_url,
            getattr(settings, "rate_limit_redis_url", None))
    for url in urls:
        if url:
            try:
                password = make_url(url).password
            except Exception:  # an unparsable URL holds no password we could find
                password = None
            if password:
                values.append(str(password))
    return sorted({v for v in values if len(v) >= _MIN_SECRET_CHARS}, key=len, reverse=True)


def clean(value: Any, secrets: list[str]) -> Any:
    """Recursively mask secrets, drop NUL characters and turn non-finite floats into strings."""
    if isinstance(value, str):
        return clean_text(value, secrets)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, dict):
        # Keys are scrubbed too: a step may key its outputs by the (sub-)question it asked.
        return {
            clean_text(str(k), secrets): MASK if str(k).lower() in SECRET_KEYS else clean(v, secrets)
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return [clean(v, secrets) for v in value]
    return clean_text(repr(value), secrets)


def clean_text(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    # PostgreSQL text and JSON cannot hold NUL.
    return mask_tokens(text).replace("\x00", "\ufffd")


def mask_tokens(text: str) -> str:
    """Mask what looks like a credential (docqa API keys, bearer tokens, `sk-` keys, URL passwords)."""
    for pattern in _TOKEN_PATTERNS:
        text = pattern.sub(MASK, text)
    return text


def scrub_log_records() -> None:
    """Mask credential shapes (`mask_tokens`) in every log record this process creates from now on.

    A question can reach the log inside an error message or a traceback. The record factory is the one place
    every record passes through: handlers are set up by gunicorn, uvicorn or pytest, and a logger's filter
    misses records propagated from its children. Installing twice is harmless.
    """
    current = logging.getLogRecordFactory()
    if getattr(current, "_docqa_scrubs", False):
        return

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = current(*args, **kwargs)
        _scrub_record(record)
        return record

    factory._docqa_scrubs = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)


def _scrub_record(record: logging.LogRecord) -> None:
    if isinstance(record.msg, str):
        record.msg = mask_tokens(record.msg)
    # Arguments are masked one by one, keeping their number: uvicorn's access formatter unpacks them.
    if isinstance(record.args, tuple):
        record.args = tuple(mask_tokens(a) if isinstance(a, str) else a for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: mask_tokens(v) if isinstance(v, str) else v for k, v in record.args.items()}
    try:
        message = record.getMessage()
    except Exception:  # a malformed call; logging reports it when the record is emitted
        message = None
    if message is not None and mask_tokens(message) != message:
        # Some other argument (an exception, an object) renders a token: keep the rendered, masked text.
        record.msg, record.args = mask_tokens(message), ()
    if record.exc_info and record.exc_info[0] is not None and not record.exc_text:
        text = logging.Formatter().formatException(record.exc_info)
        masked = mask_tokens(text)
        if masked != text:
            record.exc_text = masked
    if record.stack_info:
        record.stack_info = mask_tokens(record.stack_info)
