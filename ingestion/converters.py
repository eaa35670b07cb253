"""File bytes -> plain text and a title, for text, Markdown, HTML, PDF and DOCX.

Every failure is a `DocqaError` with a one-line reason, so a caller can report it per item and move on:
an unknown suffix is `UnsupportedFileError`, a corrupt, encrypted, undecodable or empty file is
`UnreadableFileError`, and anything over the configured size limit is `FileTooLargeError` (checked before
the bytes are read), as is an archive declaring too much or a conversion over its memory limit.

Files are parsed in a box (`docqa.ingestion.conversion_box`): DOCX archives are checked first (`ZIP_FILE_TYPES`),
then HTML, PDF, DOCX and any text or Markdown file over `IN_PROCESS_MAX_BYTES` are converted in a child process
within `ConversionLimits` (memory, wall time), so the parsers never run in the caller's process.

Usage:
    converted = convert_path(Path("handbook.pdf"), max_bytes=settings.max_file_bytes,
                             limits=ConversionLimits.from_settings(settings))
    converted.text, converted.title, converted.file_type
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePath

from docqa.errors import FileTooLargeError, UnreadableFileError, UnsupportedFileError
from docqa.ingestion.conversion_box import ConversionLimits, check_zip_archive, preload_in_box, run_in_box

FILE_TYPES: dict[str, str] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}
# ZIP containers: their directory is checked before any member is inflated (XLSX, PPTX and ODF files will be too).
ZIP_FILE_TYPES = frozenset({"docx"})
# Plain text and Markdown this small are converted in the caller's process (a child costs more than they do).
IN_PROCESS_TYPES = frozenset({"text", "markdown"})
IN_PROCESS_MAX_BYTES = 256 * 1024

# The box's server imports and warms the parsers once; the caller's process never imports them.
preload_in_box("docqa.ingestion.parser_warmup")

# Libraries log their own complaints about malformed files; the converter reports one clear error instead.
for _noisy in ("pypdf", "trafilatura", "htmldate", "courlan"):
    logging.getLogger(_noisy).setLevel(logging.ERROR)


@dataclass(frozen=True)
class ConvertedText:
    """The extracted text of one file, its title (from the file's own metadata or its name) and its type."""

    text: str
    title: str
    file_type: str


# Patient records are not documents: they have their own path, which keeps one record per Document.
_RECORD_HINTS = {
    ".json": ". A FHIR R4 bundle is ingested as patient records: `docqa records FILE_OR_FOLDER` "
             "(HTTP: POST /v1/records)",
    ".csv": ". A Synthea CSV export is ingested as patient records: `docqa records FOLDER` (the folder holding "
            "patients.csv)",
}


def file_type_of(name: str) -> str:
    """The file type of a name by suffix; raises `UnsupportedFileError` for anything not in `FILE_TYPES`."""
    suffix = PurePath(name).suffix.lower()
    if suffix not in FILE_TYPES:
        supported = ", ".join(sorted(FILE_TYPES))
        shown = suffix or "no suffix"
        hint = _RECORD_HINTS.get(suffix, "")
        raise UnsupportedFileError(f"{name}: unsupported file type ({shown}); supported: {supported}{hint}")
    return FILE_TYPES[suffix]


def is_supported(name: str) -> bool:
    return PurePath(name).suffix.lower() in FILE_TYPES


def check_size(name: str, size: int, max_bytes: int) -> None:
    if size > max_bytes:
        raise FileTooLargeError(f"{name}: file is {size} bytes; the limit is {max_bytes} bytes")


def convert_path(path: Path, max_bytes: int, limits: ConversionLimits | None = None) -> ConvertedText:
    """Read and convert one file; the type and size are checked before any bytes are read."""
    file_type_of(path.name)
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise UnreadableFileError(f"{path}: cannot read file ({exc.strerror or exc})") from exc
    check_size(str(path), size, max_bytes)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UnreadableFileError(f"{path}: cannot read file ({exc.strerror or exc})") from exc
    return convert_bytes(data, str(path), max_bytes, limits)


def convert_bytes(data: bytes, name: str, max_bytes: int, limits: ConversionLimits | None = None) -> ConvertedText:
    """Convert the bytes of a file called `name` (its suffix picks the converter) within `limits` (the
    DOCQA_CONVERT_* defaults when None)."""
    file_type = file_type_of(name)
    check_size(name, len(data), max_bytes)
    if not data or data.isspace():
        raise UnreadableFileError(f"{name}: file is empty")
    limits = limits or ConversionLimits()
    if file_type in ZIP_FILE_TYPES:
        try:
            check_zip_archive(data, name, limits)
        except UnreadableFileError as exc:
            reason = exc.message.removeprefix(f"{name}: ")
            raise UnreadableFileError(f"{name}: cannot parse {file_type.upper()} file ({reason})") from exc
    if file_type in IN_PROCESS_TYPES and len(data) <= IN_PROCESS_MAX_BYTES:
        text, title = extract_text(file_type, data, name)
    else:
        text, title = run_in_box(_extract_bounded, file_type, data, name, limits.max_text_chars, limits=limits,
                                 name=name)
    if not text.strip():
        raise UnreadableFileError(f"{name}: no extractable text")
    return ConvertedText(text=text, title=(title or "").strip() or PurePath(name).stem, file_type=file_type)


def extract_text(file_type: str, data: bytes, name: str) -> tuple[str, str | None]:
    """(text, title or None) of one file by its type's parser; what runs inside the box."""
    try:
        return _CONVERTERS[file_type](data)
    except UnreadableFileError as exc:
        raise UnreadableFileError(f"{name}: {exc.message}") from exc
    except MemoryError:
        raise
    except Exception as exc:  # parsers raise many unrelated types on malformed input
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnreadableFileError(f"{name}: cannot parse {file_type.upper()} file ({reason})") from exc


def _extract_bounded(file_type: str, data: bytes, name: str, max_chars: int) -> tuple[str, str | None]:
    # Checked in the child: a text past the bound is never sent to the caller, who would chunk and embed it all.
    text, title = extract_text(file_type, data, name)
    if len(text) > max_chars:
        raise FileTooLargeError(f"{name}: extracted text over {max_chars} characters")
    return text, title


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise UnreadableFileError("binary content in a text file")
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise UnreadableFileError("text is neither UTF-8 nor Windows-1252")


def _text(data: bytes) -> tuple[str, str | None]:
    return _decode(data), None


def _markdown(data: bytes) -> tuple[str, str | None]:
    from markdown_it import MarkdownIt
    from mdit_plain.renderer import RendererPlain

    source = _decode(data)
    title = next((line.lstrip("#").strip() for line in source.splitlines() if line.startswith("# ")), None)
    return MarkdownIt(renderer_cls=RendererPlain).render(source), title


def _html(data: bytes) -> tuple[str, str | None]:
    import lxml.html
    import trafilatura

    tree = lxml.html.fromstring(data)
    title = tree.findtext(".//title")
    text = trafilatura.extract(data, include_comments=False, include_tables=True, favor_recall=True)
    if not text:
        # trafilatura drops pages it judges to be boilerplate (very short ones included); keep their text.
        for node in tree.xpath("//script|//style|//noscript"):
            node.drop_tree()
        body = tree.find("body")
        text = (body if body is not None else tree).text_content()
    return text, title


def _pdf(data: bytes) -> tuple[str, str | None]:
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(data))
    if reader.is_encrypted:
        raise UnreadableFileError("PDF is encrypted")
    pages = [page.extract_text() or "" for page in reader.pages]
    title = reader.metadata.title if reader.metadata else None
    return "\n\n".join(pages), title


def _docx(data: bytes) -> tuple[str, str | None]:
    import docx

    document = docx.Document(io.BytesIO(data))
    parts = [paragraph.text for paragraph in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            parts.append(" | ".join(cell.text for cell in row.cells))
    return "\n".join(parts), document.core_properties.title


_CONVERTERS: dict[str, Callable[[bytes], tuple[str, str | None]]] = {
    "text": _text,
    "markdown": _markdown,
    "html": _html,
    "pdf": _pdf,
    "docx": _docx,
}
