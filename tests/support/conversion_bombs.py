"""Hostile files for the conversion box's tests and benchmark, built in memory by streaming (a 220 MB zip bomb
takes about two seconds): office files whose XML inflates far past their size, one whose directory lies about
it, a PDF whose content stream inflates to gigabytes, and an XML entity-expansion (billion laughs) DOCX."""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

from tests.support.sample_files import one_page_pdf

_W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/word/document.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>'
    "</Types>"
)
_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" '
    'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
    'Target="word/document.xml"/></Relationships>'
)
_DOCUMENT_HEAD = f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><w:document xmlns:w="{_W}"><w:body>'
_DOCUMENT_TAIL = "</w:body></w:document>"
_CLAUSE = "of this agreement applies to every party named above."


def _paragraph_block(numbered_every: int) -> bytes:
    # Every few paragraphs carry a number, so the XML compresses about 100:1 as a real bomb's did (2.3 MB for
    # 220 MB), not 1000:1.
    return "".join(
        f"<w:p><w:r><w:t>Clause {{n}}{i} {_CLAUSE}</w:t></w:r></w:p>"
        if i % numbered_every == 0
        else f"<w:p><w:r><w:t>Clause {_CLAUSE}</w:t></w:r></w:p>"
        for i in range(2000)
    ).encode()


def _write_document_xml(archive: zipfile.ZipFile, xml_bytes: int, numbered_every: int = 5) -> None:
    template = _paragraph_block(numbered_every)
    with archive.open("word/document.xml", "w", force_zip64=True) as member:
        member.write(_DOCUMENT_HEAD.encode())
        written, block = 0, 0
        while written < xml_bytes:
            chunk = template.replace(b"{n}", b"%d-" % block)
            member.write(chunk)
            written += len(chunk)
            block += 1
        member.write(_DOCUMENT_TAIL.encode())


def zip_bomb_docx(xml_bytes: int = 220 * 1024 * 1024) -> bytes:
    """A well-formed DOCX whose document.xml holds `xml_bytes` of paragraphs (220 MB -> about 2.2 MB)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        _write_document_xml(archive, xml_bytes)
    return buffer.getvalue()


_S = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_XLSX_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/xl/workbook.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
    '<Override PartName="/xl/worksheets/sheet1.xml" '
    'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
    "</Types>"
)
_XLSX_RELS = _RELS.replace("word/document.xml", "xl/workbook.xml")
_WORKBOOK = (
    f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><workbook xmlns="{_S}" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships">'
    '<sheets><sheet name="Sheet1" sheetId="1" r:id="rId1"/></sheets></workbook>'
)
_WORKBOOK_RELS = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
    '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
    '<Relationship Id="rId1" '
    'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/worksheet" '
    'Target="worksheets/sheet1.xml"/></Relationships>'
)


def xlsx_bomb(xml_bytes: int = 220 * 1024 * 1024) -> bytes:
    """A well-formed XLSX whose one worksheet holds `xml_bytes` of one-cell rows (220 MB -> about 2 MB): rows
    without `r` attributes (a reader counts them) and a number every fifth one, so it compresses like the DOCX."""
    template = "".join(
        f'<row><c t="inlineStr"><is><t>Clause {{n}}{i} {_CLAUSE}</t></is></c></row>'
        if i % 5 == 0
        else f'<row><c t="inlineStr"><is><t>Clause {_CLAUSE}</t></is></c></row>'
        for i in range(2000)
    ).encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _XLSX_CONTENT_TYPES)
        archive.writestr("_rels/.rels", _XLSX_RELS)
        archive.writestr("xl/workbook.xml", _WORKBOOK)
        archive.writestr("xl/_rels/workbook.xml.rels", _WORKBOOK_RELS)
        with archive.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as member:
            member.write(
                f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?><worksheet xmlns="{_S}"><sheetData>'.encode()
            )
            written, block = 0, 0
            while written < xml_bytes:
                chunk = template.replace(b"{n}", b"%d-" % block)
                member.write(chunk)
                written += len(chunk)
                block += 1
            member.write(b"</sheetData></worksheet>")
    return buffer.getvalue()


def lying_docx(xml_bytes: int, declared_bytes: int = 4096) -> bytes:
    """A DOCX whose document.xml inflates to `xml_bytes` but whose headers declare `declared_bytes`."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        _write_document_xml(archive, xml_bytes)
    data = bytearray(buffer.getvalue())
    name = b"word/document.xml"
    # The local header (sizes at offset 22) and the central directory entry (sizes at 24) of that member.
    local = data.find(b"PK\x03\x04")
    while local >= 0 and data[local + 30 : local + 30 + len(name)] != name:
        local = data.find(b"PK\x03\x04", local + 4)
    central = data.rfind(b"PK\x01\x02")
    while data[central + 46 : central + 46 + len(name)] != name:
        central = data.rfind(b"PK\x01\x02", 0, central)
    struct.pack_into("<I", data, local + 22, declared_bytes)
    struct.pack_into("<I", data, central + 24, declared_bytes)
    return bytes(data)


def billion_laughs_docx(levels: int = 10) -> bytes:
    """A DOCX whose document.xml defines nested entities that would expand to 10**levels copies of a word."""
    entities = ['<!ENTITY lol0 "lol">'] + [
        f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10}">' for i in range(1, levels + 1)
    ]
    xml = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f"<!DOCTYPE w:document [{''.join(entities)}]>"
        f'<w:document xmlns:w="{_W}"><w:body><w:p><w:r><w:t>Before &lol{levels}; after</w:t></w:r></w:p>'
        "<w:p><w:r><w:t>A plain paragraph.</w:t></w:r></w:p></w:body></w:document>"
    )
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        archive.writestr("word/document.xml", xml)
    return buffer.getvalue()


def pdf_bomb(inflated_bytes: int = 2 * 1024 * 1024 * 1024) -> bytes:
    """A one-page PDF whose FlateDecode content stream inflates to `inflated_bytes` of spaces (2 GiB -> 2 MB)."""
    stream = deflate_repeated(b" " * (1024 * 1024), inflated_bytes // (1024 * 1024))
    return one_page_pdf(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream")


def deflate_repeated(chunk: bytes, times: int) -> bytes:
    """The zlib stream of `chunk` repeated `times` times, built in a second: after a full flush the compressor
    forgets its history, so every repetition compresses to the same bytes and only the checksum is computed."""
    raw = zlib.compressobj(9, zlib.DEFLATED, -15)
    block = raw.compress(chunk) + raw.flush(zlib.Z_FULL_FLUSH)
    checksum = 1
    for _ in range(times):
        checksum = zlib.adler32(chunk, checksum)
    return b"\x78\xda" + block * times + raw.flush() + struct.pack(">I", checksum)


def slow_pdf(operator_bytes: int = 5 * 1024 * 1024) -> bytes:
    """A 15 KB PDF whose content stream holds `operator_bytes` of text operators: pypdf's text extraction takes
    minutes over 5 MB of them."""
    operators = b"BT /F1 12 Tf 72 720 Td " + b"(slow words) Tj " * 4000 + b"ET "
    stream = deflate_repeated(operators, max(operator_bytes // len(operators), 1))
    return one_page_pdf(b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream")
