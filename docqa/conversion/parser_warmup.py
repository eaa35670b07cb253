"""Imported only by the conversion box's server (`preload_in_box`): one tiny conversion of most file types, so
that what the parsers load on their first use (trafilatura's extractors alone take about a second) is loaded
once, before the children fork from that server, rather than in every child."""

from __future__ import annotations

import contextlib
import io


def _docx() -> bytes:
    import docx

    document = docx.Document()
    document.add_paragraph("warm")
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def _pdf() -> bytes:
    from pypdf import PdfWriter

    writer = PdfWriter()
    writer.add_blank_page(width=72, height=72)
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


def _pptx() -> bytes:
    from pptx import Presentation

    deck = Presentation()
    deck.slides.add_slide(deck.slide_layouts[5]).shapes.title.text = "warm"
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def _xlsx() -> bytes:
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.active.append(["warm", 1])
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def warm_up() -> None:
    from docqa.conversion.converters import extract_text

    samples = [
        ("html", lambda: b"<html><head><title>w</title></head><body><p>warm up the extractor</p></body></html>"),
        ("markdown", lambda: b"# w\n\nwarm"),
        ("docx", _docx),
        ("pdf", _pdf),
        # Haystack's converters, pandas (XLSX) and python-pptx take seconds to import.
        ("pptx", _pptx),
        ("xlsx", _xlsx),
        ("csv", lambda: b"a,b\n1,2\n"),
        ("eml", lambda: b"Subject: w\n\nwarm"),
    ]
    for file_type, build in samples:
        # A failed warm-up only costs the children the time it would have saved.
        with contextlib.suppress(Exception):
            extract_text(file_type, build(), f"warm-up.{file_type}")


warm_up()
