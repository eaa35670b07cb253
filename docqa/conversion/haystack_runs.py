"""One file's bytes through one of Haystack's converters, with its failure as an exception.

Haystack's converters skip a source they cannot read and log why (`logger.warning(..., error=exc)`); a caller
converting one file needs that reason, so the warning is caught and raised as `UnreadableFileError`.

Usage:
    from haystack.components.converters import PPTXToDocument
    outputs = run_converter(PPTXToDocument(), data, "deck.pptx", "pptx")
    outputs["documents"][0].content
"""

from __future__ import annotations

import logging
from typing import Any

from haystack.dataclasses import ByteStream

from docqa.errors import UnreadableFileError


class _Skipped(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.reasons: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        error = record.__dict__.get("error")
        self.reasons.append(str(error) if error is not None else record.getMessage())


def run_converter(converter: Any, data: bytes, name: str, file_type: str, **meta: Any) -> dict[str, Any]:
    """`converter.run` on one source; raises `UnreadableFileError` with the converter's reason when it returns no
    document for it."""
    module_logger = logging.getLogger(type(converter).__module__)
    handler = _Skipped()
    module_logger.addHandler(handler)
    propagate, module_logger.propagate = module_logger.propagate, False
    try:
        outputs = converter.run(sources=[ByteStream(data=data, meta={"file_path": name, **meta})])
    finally:
        module_logger.removeHandler(handler)
        module_logger.propagate = propagate
    if not outputs.get("documents"):
        reason = (handler.reasons[0].splitlines() or ["no content"])[0] if handler.reasons else "no content"
        raise UnreadableFileError(f"cannot parse {file_type.upper()} file ({reason[:300]})")
    return outputs
