"""File bytes -> text at its places (pages, slides, sheets, mail parts) and a title.

Types: text, Markdown, HTML, PDF (scanned pages by OCR), DOCX, PPTX, XLSX, CSV, ODT, ODS, ODP, RTF, EML, MSG and
images (PNG, JPEG, TIFF, by OCR). A converter returns `Section`s (`docqa.conversion.sections`): a PDF one per page,
a deck one per slide (speaker notes included), a spreadsheet one table per sheet, a mail message its headers and
body, then each attachment converted in turn as its own part.

Every failure is a `DocqaError` with a one-line reason, so a caller can report it per item and move on:
an unknown suffix is `UnsupportedFileError`, a corrupt, encrypted, undecodable or empty file is
`UnreadableFileError`, and anything over the configured size limit is `FileTooLargeError` (checked before
the bytes are read), as is an archive declaring too much, a sheet with too many rows, a scan with too many pages
or a conversion over its memory limit.

Files are parsed in a box (`docqa.conversion.conversion_box`): ZIP-based files (DOCX, PPTX, XLSX, ODF) are checked
first (`ZIP_FILE_TYPES`), then everything but small text and Markdown is converted in a child process within
`ConversionLimits` (memory, wall time, plus `ocr_timeout_s` for files that may need OCR), so the parsers and
Tesseract never run in the caller's process.

Usage:
    converted = convert_path(Path("handbook.pdf"), max_bytes=settings.max_file_bytes,
                             limits=ConversionLimits.from_settings(settings))
    converted.text, converted.title, converted.file_type, converted.sections
"""

from __future__ import annotations

import io
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

from docqa.conversion.conversion_box import ConversionLimits, check_zip_archive, preload_in_box, run_in_box
from docqa.conversion.sections import Section
from docqa.errors import FileTooLargeError, UnreadableFileError, UnsupportedFileError

FILE_TYPES: dict[str, str] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".pptx": "pptx",
    ".xlsx": "xlsx",
    ".csv": "csv",
    ".odt": "odt",
    ".ods": "ods",
    ".odp": "odp",
    ".rtf": "rtf",
    ".eml": "eml",
    ".msg": "msg",
    ".png": "image",
    ".jpg": "image",
    ".jpeg": "image",
    ".tif": "image",
    ".tiff": "image",
}
# ZIP containers: their directory is checked before any member is inflated.
ZIP_FILE_TYPES = frozenset({"docx", "pptx", "xlsx", "odt", "ods", "odp"})
# Types whose conversion may run Tesseract: their box gets `ocr_timeout_s` more wall time. A mail message may
# carry a scan as an attachment.
OCR_FILE_TYPES = frozenset({"pdf", "image", "eml", "msg"})
# An OLE2 compound file: what an encrypted (password-protected) Office file is, whatever its suffix says.
_OLE2_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
# Plain text and Markdown this small are converted in the caller's process (a child costs more than they do).
IN_PROCESS_TYPES = frozenset({"text", "markdown"})
IN_PROCESS_MAX_BYTES = 256 * 1024

# The box's server imports and warms the parsers once; the caller's process never imports them.
preload_in_box("docqa.conversion.parser_warmup")

# Libraries log their own complaints about malformed files; the converter reports one clear error instead.
for _noisy in ("pypdf", "trafilatura", "htmldate", "courlan"):
    logging.getLogger(_noisy).setLevel(logging.ERROR)


@dataclass(frozen=True)
class ConvertedText:
    """The extracted text of one file, its title (from the file's own metadata or its name), its type, and the
    same text at its places (`sections`: pages, slides, sheets, mail parts), which chunking follows."""

    text: str
    title: str
    file_type: str
    sections: tuple[Section, ...] = ()


# Patient records are not documents: they have their own path, which keeps one record per Document.
_RECORD_HINTS = {
    ".json": ". A FHIR R4 bundle is ingested as patient records: `docqa records FILE_OR_FOLDER` "
             "(HTTP: POST /v1/records)",
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
    DOCQA_CONVERT_* defaults when None, which do no OCR)."""
    file_type = file_type_of(name)
    check_size(name, len(data), max_bytes)
    if not data or data.isspace():
        raise UnreadableFileError(f"{name}: file is empty")
    limits = limits or ConversionLimits()
    check_container(file_type, data, name, limits)
    if file_type in IN_PROCESS_TYPES and len(data) <= IN_PROCESS_MAX_BYTES:
        sections, title = extract_sections(file_type, data, name, limits)
    else:
        box_limits = limits
        if file_type in OCR_FILE_TYPES and limits.ocr_languages:
            box_limits = replace(limits, timeout_s=limits.timeout_s + limits.ocr_timeout_s)
        sections, title = run_in_box(_extract_bounded, file_type, data, name, limits, limits=box_limits, name=name)
    sections = tuple(section for section in sections if section.table is not None or section.text.strip())
    text = "\n\n".join(section.plain_text() for section in sections)
    if not text.strip():
        raise UnreadableFileError(f"{name}: no extractable text{_no_text_hint(file_type, limits)}")
    return ConvertedText(text=text, title=(title or "").strip() or PurePath(name).stem, file_type=file_type,
                         sections=sections)


def check_container(file_type: str, data: bytes, name: str, limits: ConversionLimits) -> None:
    """A ZIP-based file's directory within `limits`, before anything is inflated; an encrypted Office file (an
    OLE2 container under a ZIP type's name) is refused as such."""
    if file_type not in ZIP_FILE_TYPES:
        return
    if data.startswith(_OLE2_MAGIC):
        raise UnreadableFileError(f"{name}: {file_type.upper()} file is encrypted (password-protected) or in a "
                                  "legacy binary format; save it without a password in the current format")
    try:
        check_zip_archive(data, name, limits)
    except UnreadableFileError as exc:
        reason = exc.message.removeprefix(f"{name}: ")
        raise UnreadableFileError(f"{name}: cannot parse {file_type.upper()} file ({reason})") from exc


def _no_text_hint(file_type: str, limits: ConversionLimits) -> str:
    if file_type in ("pdf", "image") and not limits.ocr_languages:
        return " (OCR is off: DOCQA_OCR_ENABLED)"
    return ""


def extract_text(file_type: str, data: bytes, name: str) -> tuple[str, str | None]:
    """(text, title or None) of one file by its type's parser, without OCR."""
    sections, title = extract_sections(file_type, data, name, ConversionLimits())
    return "\n\n".join(section.plain_text() for section in sections), title


def extract_sections(file_type: str, data: bytes, name: str,
                     limits: ConversionLimits) -> tuple[list[Section], str | None]:
    """(sections, title or None) of one file by its type's parser; what runs inside the box."""
    try:
        return _converter(file_type)(data, name, limits)
    except (UnreadableFileError, FileTooLargeError) as exc:
        message = exc.message if exc.message.startswith(f"{name}: ") else f"{name}: {exc.message}"
        raise type(exc)(message) from exc
    except MemoryError:
        raise
    except Exception as exc:  # parsers raise many unrelated types on malformed input
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UnreadableFileError(f"{name}: cannot parse {file_type.upper()} file ({reason})") from exc


def _extract_bounded(file_type: str, data: bytes, name: str,
                     limits: ConversionLimits) -> tuple[list[Section], str | None]:
    # Checked in the child: a text past the bound is never sent to the caller, who would chunk and embed it all.
    sections, title = extract_sections(file_type, data, name, limits)
    if sum(len(section.plain_text()) for section in sections) > limits.max_text_chars:
        raise FileTooLargeError(f"{name}: extracted text over {limits.max_text_chars} characters")
    return sections, title


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise UnreadableFileError("binary content in a text file")
    for encoding in ("utf-8-sig", "cp1252"):
        try:
            return data.decode(encoding)
        except UnicodeDecodeError:
            continue
    raise UnreadableFileError("text is neither UTF-8 nor Windows-1252")


Converter = Callable[[bytes, str, ConversionLimits], tuple[list[Section], str | None]]


def _whole(parse: Callable[[bytes], tuple[str, str | None]]) -> Converter:
    """A parser of a file without places (one section)."""

    def convert(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
        text, title = parse(data)
        return [Section(text)], title

    return convert


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


def _docx(data: bytes) -> tuple[str, str | None]:
    import docx

    document = docx.Document(io.BytesIO(data))
    parts = [paragraph.text for paragraph in document.paragraphs]
    for table in document.tables:
        for row in table.rows:
            parts.append(" | ".join(cell.text for cell in row.cells))
    return "\n".join(parts), document.core_properties.title


def _converter(file_type: str) -> Converter:
    # The office, mail, table and OCR converters import their parsers only when called (inside the box).
    if file_type == "pdf":
        from docqa.conversion.ocr import convert_pdf

        return convert_pdf
    if file_type == "image":
        from docqa.conversion.ocr import convert_image

        return convert_image
    if file_type in ("pptx", "odt", "odp", "rtf"):
        from docqa.conversion import office_converters

        return office_converters.CONVERTERS[file_type]
    if file_type in ("xlsx", "ods", "csv"):
        from docqa.conversion import table_converters

        return table_converters.CONVERTERS[file_type]
    if file_type in ("eml", "msg"):
        from docqa.conversion import mail_converter

        return mail_converter.CONVERTERS[file_type]
    return _CONVERTERS[file_type]


_CONVERTERS: dict[str, Converter] = {
    "text": _whole(_text),
    "markdown": _whole(_markdown),
    "html": _whole(_html),
    "docx": _whole(_docx),
}
