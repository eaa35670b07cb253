"""Make trace values safe to store: no credentials, and nothing a SQL JSON/text column would reject.

Pipelines already drop credential-named keys (`docqa.recording.to_jsonable`); this is the last line before
the database: it also masks the configured secret values wherever they appear inside text (a prompt that
echoes a header, an error message quoting a URL) and common token shapes, docqa API keys among them.
`scrub_log_records` masks the same token shapes in the process's log records, and `mask_secrets` masks them (with
the operator's own patterns) in every question where it enters docqa.
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
# Credential shapes masked everywhere: in questions at their entry (`mask_secrets`), in traces and in log records.
# Each is (pattern, replacement); a replacement keeps the name in front of the value it masks. The shapes are
# strict enough to leave ordinary words and numbers alone: vendor prefixes, fixed lengths, and a digit required
# where a word could otherwise match ("basic principles", "sk-learn-compatible").
_TOKEN_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(bearer|basic)(\s+)(?:(?=[A-Za-z0-9._~+/=-]*\d)[A-Za-z0-9._~+/=-]{12,}"
                r"|[A-Za-z0-9._~+/=-]{32,})"), rf"\1\2{MASK}"),
    (re.compile(r"\bsk-(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]{16,}"), MASK),
    # docqa API keys, `dq_<16 hex key id>_<token_urlsafe secret>` (`docqa.accounts.keys`): a user who
    # pastes one into a question must not hand it to everyone who can read traces. No word boundary in front,
    # since `_` is a word character and `my_dq_...` still holds a working key; any secret length, since a
    # clipped step text may cut the key short and what is left still narrows a guess.
    (re.compile(r"dq_[A-Za-z0-9-]{16}_[A-Za-z0-9_-]+"), MASK),
    # user:password@ in URLs (database, broker, Elasticsearch).
    (re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"), MASK),
    # AWS access key ids (long-term AKIA, temporary ASIA, ...) and a secret access key named as such.
    (re.compile(r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}\b"), MASK),
    (re.compile(r"(?i)\b(aws_?secret_?access_?key|aws_?secret_?key|secret_?access_?key)(\s*[=:]\s*[\"']?)"
                r"[A-Za-z0-9/+=]{40}(?![A-Za-z0-9/+=])"), rf"\1\2{MASK}"),
    # GitHub personal, OAuth, app and refresh tokens; fine-grained personal tokens.
    (re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,255}|github_pat_[A-Za-z0-9_]{22,255})"), MASK),
    # Slack tokens and incoming-webhook URLs.
    (re.compile(r"\bxox[abposre]-[A-Za-z0-9-]{10,}"), MASK),
    (re.compile(r"(https://hooks\.slack\.com/services/)[A-Za-z0-9/_-]+"), rf"\1{MASK}"),
    # Google API keys; Stripe secret and restricted keys.
    (re.compile(r"\bAIza[0-9A-Za-z_-]{35}"), MASK),
    (re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{16,}"), MASK),
    # JWTs: a base64url JSON header and payload (both start `{"`, hence `eyJ`) and a signature.
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*"), MASK),
    # A PEM private key, up to its END line (or the end of a clipped text).
    (re.compile(r"-----BEGIN (?:[A-Z0-9]+ )?(?:[A-Z0-9]+ )?PRIVATE KEY-----[\s\S]*?"
                r"(?:-----END (?:[A-Z0-9]+ )?(?:[A-Z0-9]+ )?PRIVATE KEY-----|\Z)"), MASK),
    # A value assigned to a credential's name ("password=Hunter2024", "client_secret: ..."), holding a digit.
    (re.compile(r"(?i)\b(password|passwd|client_secret|secret_key|api_key|apikey|access_token|auth_token)"
                r"(\s*[=:]\s*[\"']?)(?=[^\s\"'&]*\d)[^\s\"'&]{8,}"), rf"\1\2{MASK}"),
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
    """Mask what looks like a credential (docqa API keys, bearer tokens, cloud and chat-service keys, JWTs,
    private keys, URL passwords)."""
    for pattern, replacement in _TOKEN_PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def mask_secrets(text: str, settings: Settings) -> str:
    """A question (or conversation turn) with every secret in it masked: the server's own credentials, the
    credential shapes of `mask_tokens` and the operator's `DOCQA_SECRET_PATTERNS`.

    Called once where a question enters docqa (HTTP query, OpenAI chat, conversations, `docqa ask`, eval), before
    it is stored, sent to a model, echoed in steps or logged; every later copy is the masked one. Anything but a
    string is returned as it is, for the question's validation to refuse.

    Usage:
        question = mask_secrets("why is dq_0123456789abcdef_s3cr3t refused?", settings)  # "why is *** refused?"
    """
    if not isinstance(text, str):
        return text
    for secret in secret_values(settings):
        text = text.replace(secret, MASK)
    text = mask_tokens(text)
    for pattern in settings.secret_patterns:
        text = re.sub(pattern, MASK, text)
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
