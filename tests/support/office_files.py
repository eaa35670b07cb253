"""Real files of the types enterprises keep, made in memory for tests and benchmarks (tests only).

Slide decks (python-pptx), workbooks (openpyxl), mail (the email package), OpenDocument files (odfpy), RTF, and
scans: lines of text drawn with Pillow on a page at 200 dpi with speckle noise and a slight tilt, saved as an
image-only PDF (no text layer) or as PNG/JPEG/TIFF.

Usage:
    data = pptx_bytes([("Pricing", "Gold costs 40 euros", "Say it twice")])
    data = scanned_pdf_bytes([["The contract ends on 3 March 2031."]])
"""

from __future__ import annotations

import io
import random
from email.message import EmailMessage
from typing import Any

DPI = 200
PAGE_SIZE = (1654, 2339)  # A4 at 200 dpi


def pptx_bytes(slides: list[tuple[str, str, str]]) -> bytes:
    """One slide per (title, body, speaker notes); empty notes add none."""
    from pptx import Presentation

    deck = Presentation()
    for title, body, notes in slides:
        slide = deck.slides.add_slide(deck.slide_layouts[1])
        slide.shapes.title.text = title
        slide.placeholders[1].text = body
        if notes:
            slide.notes_slide.notes_text_frame.text = notes
    buffer = io.BytesIO()
    deck.save(buffer)
    return buffer.getvalue()


def xlsx_bytes(sheets: dict[str, list[list[Any]]]) -> bytes:
    """A workbook with one sheet per name, its rows as given (the first one is the header)."""
    from openpyxl import Workbook

    workbook = Workbook()
    workbook.remove(workbook.active)
    for name, rows in sheets.items():
        sheet = workbook.create_sheet(name)
        for row in rows:
            sheet.append(row)
    buffer = io.BytesIO()
    workbook.save(buffer)
    return buffer.getvalue()


def eml_bytes(subject: str, body: str, attachments: list[tuple[str, bytes]] = ()) -> bytes:  # type: ignore[assignment]
    message = EmailMessage()
    message["From"] = "Ann Example <ann@example.com>"
    message["To"] = "bob@example.com"
    message["Date"] = "Mon, 02 Nov 2026 10:00:00 +0000"
    message["Subject"] = subject
    message.set_content(body)
    for filename, data in attachments:
        if filename.endswith(".eml"):
            import email
            import email.policy

            inner = email.message_from_bytes(data, policy=email.policy.default)
            message.add_attachment(inner, filename=filename)
        else:
            message.add_attachment(data, maintype="application", subtype="octet-stream", filename=filename)
    return message.as_bytes()


def odt_bytes(paragraphs: list[str]) -> bytes:
    from odf.opendocument import OpenDocumentText
    from odf.text import P

    document = OpenDocumentText()
    for paragraph in paragraphs:
        document.text.addElement(P(text=paragraph))
    return _odf(document)


def ods_bytes(sheets: dict[str, list[list[str]]]) -> bytes:
    from odf.opendocument import OpenDocumentSpreadsheet
    from odf.table import Table, TableCell, TableRow
    from odf.text import P

    document = OpenDocumentSpreadsheet()
    for name, rows in sheets.items():
        table = Table(name=name)
        for row in rows:
            table_row = TableRow()
            for value in row:
                cell = TableCell(valuetype="string")
                cell.addElement(P(text=str(value)))
                table_row.addElement(cell)
            table.addElement(table_row)
        document.spreadsheet.addElement(table)
    return _odf(document)


def odp_bytes(slides: list[tuple[str, str]]) -> bytes:
    """One page per (text, speaker notes)."""
    from odf.draw import Frame, Page, TextBox
    from odf.opendocument import OpenDocumentPresentation
    from odf.presentation import Notes
    from odf.style import MasterPage, PageLayout
    from odf.text import P

    document = OpenDocumentPresentation()
    layout = PageLayout(name="layout")
    document.automaticstyles.addElement(layout)
    master = MasterPage(name="master", pagelayoutname=layout)
    document.masterstyles.addElement(master)
    for index, (text, notes) in enumerate(slides, start=1):
        page = Page(name=f"page{index}", masterpagename=master)
        frame = Frame(width="20cm", height="5cm", x="1cm", y="1cm")
        box = TextBox()
        box.addElement(P(text=text))
        frame.addElement(box)
        page.addElement(frame)
        if notes:
            note = Notes()
            note_frame = Frame(width="20cm", height="5cm", x="1cm", y="10cm")
            note_box = TextBox()
            note_box.addElement(P(text=notes))
            note_frame.addElement(note_box)
            note.addElement(note_frame)
            page.addElement(note)
        document.presentation.addElement(page)
    return _odf(document)


def _odf(document: Any) -> bytes:
    buffer = io.BytesIO()
    document.write(buffer)
    return buffer.getvalue()


def rtf_bytes(paragraphs: list[str]) -> bytes:
    body = "".join(f"\\pard {paragraph}\\par\n" for paragraph in paragraphs)
    return ("{\\rtf1\\ansi\\deff0 {\\fonttbl {\\f0 Times New Roman;}}\n" + body + "}").encode("ascii")


def page_image(lines: list[str], seed: int = 0, noise: float = 0.01, tilt: float = 0.4) -> Any:
    """A white A4 page at 200 dpi with `lines` in black, speckled with `noise` of random pixels, tilted."""
    from PIL import Image, ImageDraw, ImageFont

    page = Image.new("L", PAGE_SIZE, 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.load_default(size=34)
    y = 160
    for line in lines:
        draw.text((140, y), line, fill=0, font=font)
        y += 58
    rng = random.Random(seed)
    pixels = page.load()
    width, height = PAGE_SIZE
    for _ in range(int(width * height * noise)):
        pixels[rng.randrange(width), rng.randrange(height)] = rng.choice((0, 96, 160))
    return page.rotate(tilt, fillcolor=255, resample=Image.Resampling.BILINEAR)


def scanned_pdf_bytes(pages: list[list[str]], seed: int = 0) -> bytes:
    """An image-only PDF (no text layer): one scanned page per list of lines."""
    images = [page_image(lines, seed=seed + index) for index, lines in enumerate(pages)]
    buffer = io.BytesIO()
    images[0].save(buffer, format="PDF", resolution=DPI, save_all=True, append_images=images[1:])
    return buffer.getvalue()


def image_bytes(lines: list[str], image_format: str = "PNG", seed: int = 0) -> bytes:
    buffer = io.BytesIO()
    page_image(lines, seed=seed).save(buffer, format=image_format, dpi=(DPI, DPI))
    return buffer.getvalue()
