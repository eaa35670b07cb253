"""Slide decks and word-processor files: PPTX (Haystack's `PPTXToDocument`), ODP, ODT (odfpy) and RTF (striprtf).

A deck gives one section per slide (`slide`, from 1), its speaker notes after its text; ODT and RTF have no pages
of their own (their page breaks depend on the renderer), so they are one section each.

Usage:
    sections, title = convert_pptx(data, "deck.pptx", limits)
    sections[1].location  # {'slide': 2}
"""

from __future__ import annotations

import io
from typing import Any

from docqa.conversion.conversion_box import ConversionLimits
from docqa.conversion.sections import Section
from docqa.errors import UnreadableFileError

NOTES_HEADING = "Speaker notes:"


def convert_pptx(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    from haystack.components.converters import PPTXToDocument
    from pptx import Presentation

    from docqa.conversion.haystack_runs import run_converter

    # Haystack's converter gives the slides' text, one slide per form feed; the notes come from python-pptx.
    content = run_converter(PPTXToDocument(), data, name, "pptx")["documents"][0].content or ""
    deck = Presentation(io.BytesIO(data))
    sections = []
    for number, (text, slide) in enumerate(zip(content.split("\f"), deck.slides, strict=False), start=1):
        notes = slide.notes_slide.notes_text_frame.text if slide.has_notes_slide else ""
        if notes and notes.strip():
            text = f"{text}\n\n{NOTES_HEADING} {notes}"
        sections.append(Section(text, {"slide": number}))
    return sections, deck.core_properties.title


def convert_odt(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    document = _load_odf(data, "ODT")
    return [Section("\n".join(_paragraphs(document.text)))], _odf_title(document)


def _paragraphs(node: Any) -> list[str]:
    """The text of each paragraph and heading under `node`, in document order."""
    from odf import teletype
    from odf.namespaces import TEXTNS

    found: list[str] = []
    stack = [node]
    while stack:
        current = stack.pop()
        if getattr(current, "qname", None) in ((TEXTNS, "p"), (TEXTNS, "h")):
            found.append(teletype.extractText(current))
            continue
        stack.extend(reversed(getattr(current, "childNodes", [])))
    return found


def convert_odp(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    from odf import draw, presentation, teletype, text

    document = _load_odf(data, "ODP")
    sections = []
    for number, page in enumerate(document.presentation.getElementsByType(draw.Page), start=1):
        notes = page.getElementsByType(presentation.Notes)
        note_nodes = {id(node) for note in notes for node in note.getElementsByType(text.P)}
        body = [teletype.extractText(node) for node in page.getElementsByType(text.P) if id(node) not in note_nodes]
        spoken = [teletype.extractText(node) for note in notes for node in note.getElementsByType(text.P)]
        slide_text = "\n".join(body)
        if any(line.strip() for line in spoken):
            slide_text += f"\n\n{NOTES_HEADING} " + "\n".join(spoken)
        sections.append(Section(slide_text, {"slide": number}))
    return sections, _odf_title(document)


def convert_rtf(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    from striprtf.striprtf import rtf_to_text

    source = data.decode("latin-1")
    if not source.lstrip().startswith("{\\rtf"):
        raise UnreadableFileError("cannot parse RTF file (no {\\rtf header)")
    return [Section(rtf_to_text(source, errors="replace"))], None


def _load_odf(data: bytes, kind: str) -> Any:
    from odf.opendocument import load

    check_not_encrypted(data, kind)
    return load(io.BytesIO(data))


def check_not_encrypted(data: bytes, kind: str) -> None:
    """An encrypted ODF file lists its members' encryption in its manifest (its content is then unreadable)."""
    if b"encryption-data" in _manifest(data):
        raise UnreadableFileError(f"{kind} file is encrypted (password-protected)")


def _manifest(data: bytes) -> bytes:
    import zipfile

    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        try:
            return archive.read("META-INF/manifest.xml")
        except KeyError:
            return b""


def _odf_title(document: Any) -> str | None:
    from odf import dc

    titles = document.meta.getElementsByType(dc.Title)
    return str(titles[0]) if titles else None


CONVERTERS = {"pptx": convert_pptx, "odt": convert_odt, "odp": convert_odp, "rtf": convert_rtf}
