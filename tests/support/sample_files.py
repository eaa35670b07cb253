"""Small real files of every supported type, built in memory for ingestion tests."""

from __future__ import annotations

import io


def pdf_bytes(lines: list[str]) -> bytes:
    """A minimal one-page PDF whose text layer holds `lines` (plain ASCII without parentheses)."""
    text_ops = " ".join(f"({line}) Tj T*" for line in lines)
    stream = f"BT /F1 12 Tf 14 TL 72 720 Td {text_ops} ET".encode()
    return one_page_pdf(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")


def one_page_pdf(contents: bytes) -> bytes:
    """A one-page PDF (Helvetica as /F1) whose content stream object is `contents` (dictionary and stream)."""
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        contents,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(objects) + 1, xref)
    return bytes(out)


def docx_bytes(paragraphs: list[str], title: str | None = None) -> bytes:
    import docx

    document = docx.Document()
    if title:
        document.core_properties.title = title
    for paragraph in paragraphs:
        document.add_paragraph(paragraph)
    buffer = io.BytesIO()
    document.save(buffer)
    return buffer.getvalue()


def html_bytes(title: str, paragraphs: list[str]) -> bytes:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (
        f"<html><head><title>{title}</title><script>var tracking = 1;</script></head>"
        f"<body><nav>Home | About</nav>{body}</body></html>"
    ).encode()
