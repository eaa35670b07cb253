"""The places of a converted file: a PDF page, a slide, a sheet's rows, a mail message or one of its attachments.

A converter hands back `Section`s instead of one flat text, so every chunk can say where in its file it stands
(`location_meta`, `location_label`): that is what a citation names and what "show in context" opens. A section
holding a `Table` is chunked by rows with the table's header repeated in every chunk (`docqa.conversion.chunking`).

Usage:
    Section("Revenue grew 4%.", {"slide": 3})
    Section(table=Table(sheet="Q3", header=("Region", "Revenue"), rows=((2, ("North", "1200")),)),
            location={"sheet": "Q3"})
    location_label({"attachment": "invoice.pdf", "page": 2})  # 'attachment invoice.pdf, page 2'
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

# Chunk metadata a location may set, with its type (stores map each field to one type across documents).
LOCATION_FIELDS: dict[str, type] = {
    "page": int,
    "slide": int,
    "sheet": str,
    "row_start": int,
    "row_end": int,
    "attachment": str,
    "attachment_index": int,
    "message": str,
}
# A cell longer than this is cut in a table chunk: one cell must not fill a chunk on its own.
MAX_CELL_CHARS = 300


@dataclass(frozen=True)
class Table:
    """One sheet: its column names and its rows, each with its row number in the file (1-based, as shown)."""

    sheet: str
    header: tuple[str, ...]
    rows: tuple[tuple[int, tuple[str, ...]], ...]

    def header_lines(self) -> str:
        width = len(self.header)
        return f"{markdown_row(self.header)}\n|{'---|' * width}"

    def row_line(self, cells: tuple[str, ...]) -> str:
        width = len(self.header)
        padded = tuple(cells[:width]) + ("",) * (width - len(cells))
        return markdown_row(padded)

    def markdown(self) -> str:
        return "\n".join([self.header_lines(), *(self.row_line(cells) for _, cells in self.rows)])


@dataclass(frozen=True)
class Section:
    """Text (or a table) at one place of a file; `ocr` marks text recognised from an image of the page."""

    text: str = ""
    location: Mapping[str, Any] = field(default_factory=dict)
    ocr: bool = False
    table: Table | None = None

    def plain_text(self) -> str:
        return self.table.markdown() if self.table is not None else self.text


def markdown_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(_cell(cell) for cell in cells) + " |"


def _cell(value: str) -> str:
    text = " ".join(str(value).split()).replace("|", "\\|")
    return text if len(text) <= MAX_CELL_CHARS else text[: MAX_CELL_CHARS - 1] + "…"


def within(sections: Iterable[Section], **outer: Any) -> list[Section]:
    """`sections` placed inside an outer place (an attachment of a message). The outer place names the message
    and the attachment; an attachment inside an attached message is named by both ("fwd.eml › scan.pdf")."""
    placed = []
    for section in sections:
        location = {**section.location, **outer}
        inner = section.location.get("attachment")
        if inner and outer.get("attachment"):
            location["attachment"] = f"{outer['attachment']} › {inner}"
        placed.append(Section(section.text, location, section.ocr, section.table))
    return placed


def location_meta(location: Mapping[str, Any]) -> dict[str, Any]:
    """The chunk metadata of a location: known fields only, each of its one type."""
    meta: dict[str, Any] = {}
    for key, kind in LOCATION_FIELDS.items():
        value = location.get(key)
        if value is not None and value != "":
            meta[key] = kind(value)
    return meta


def location_label(meta: Mapping[str, Any]) -> str | None:
    """Where a chunk stands in its file, as a person reads it: 'page 3', 'slide 2', 'sheet Q3, rows 2-41',
    'attachment invoice.pdf, page 1'; None for a file without places (plain text)."""
    parts = []
    if meta.get("attachment"):
        parts.append(f"attachment {meta['attachment']}")
    elif meta.get("message"):
        parts.append("message")
    for key in ("page", "slide"):
        if meta.get(key) is not None:
            parts.append(f"{key} {meta[key]}")
    if meta.get("sheet"):
        parts.append(f"sheet {meta['sheet']}")
    start, end = meta.get("row_start"), meta.get("row_end")
    if start is not None:
        parts.append(f"row {start}" if end in (None, start) else f"rows {start}-{end}")
    return ", ".join(parts) or None
