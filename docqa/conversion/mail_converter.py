"""E-mail messages (EML: RFC 5322 / MIME; MSG: Outlook, through Haystack's `MSGToDocument`) to sections.

A message becomes its headers (From, To, Cc, Date, Subject) and body (the plain part, else the HTML part's text),
followed by a list of its attachments, each saying whether it was read. Then every attachment of a supported type
is converted in turn by its own converter (a PDF by page, a spreadsheet by sheet, an attached message by its own
parts, up to `MAX_DEPTH` levels), as its own part of the message: its sections carry `attachment` (its file name),
`attachment_index` and `message` (the subject), which chunks keep and citations show ("attachment invoice.pdf,
page 2"). An attachment that cannot be read does not fail its message: the list says why it was left out.

Usage:
    sections, subject = convert_eml(data, "offer.eml", limits)
    sections[0].location  # {'message': 'Offer'}; sections[1].location: {'message': 'Offer', 'attachment': ...}
"""

from __future__ import annotations

import email
import email.policy
from email.message import EmailMessage
from pathlib import PurePath
from typing import Any

from docqa.conversion.conversion_box import ConversionLimits
from docqa.conversion.sections import Section, within
from docqa.errors import DocqaError, UnreadableFileError, UnsupportedFileError

# Attachments read per message, and messages attached within messages: a mail is not an archive format.
MAX_ATTACHMENTS = 50
MAX_DEPTH = 3
_HEADERS = ("From", "To", "Cc", "Date", "Subject")


def convert_eml(data: bytes, name: str, limits: ConversionLimits,
                depth: int = 0) -> tuple[list[Section], str | None]:
    """The message's headers and body, then each attachment's sections."""
    message = email.message_from_bytes(data, policy=email.policy.default)
    if not isinstance(message, EmailMessage) or not any(message.get(h) for h in (*_HEADERS, "Content-Type")):
        raise UnreadableFileError("cannot parse EML file (no message headers)")
    if message.get_content_type() in ("application/pkcs7-mime", "multipart/encrypted"):
        raise UnreadableFileError("EML message is encrypted (S/MIME or PGP)")
    subject = str(message.get("Subject") or "").strip() or None
    headers = "\n".join(f"{h}: {message.get(h)}" for h in _HEADERS if message.get(h))
    attachments = []
    for index, part in enumerate(message.iter_attachments(), start=1):
        filename = part.get_filename() or f"attachment-{index}{_suffix_of(part.get_content_type())}"
        attachments.append((index, filename, _attachment_bytes(part)))
    return _message_sections(headers, _body(message), subject or PurePath(name).stem, attachments, name, limits,
                             depth), subject


def convert_msg(data: bytes, name: str, limits: ConversionLimits,
                depth: int = 0) -> tuple[list[Section], str | None]:
    """Haystack's `MSGToDocument` reads the headers, body and attachments of an Outlook message."""
    from haystack.components.converters import MSGToDocument

    from docqa.conversion.haystack_runs import run_converter

    outputs = run_converter(MSGToDocument(), data, PurePath(name).name, "msg")
    content = outputs["documents"][0].content or ""
    head, _, body = content.partition("\n\n")
    subject = next((line.removeprefix("Subject: ").strip() for line in head.splitlines()
                    if line.startswith("Subject: ")), None)
    attachments = [(index, PurePath(str(stream.meta.get("file_path") or f"attachment-{index}")).name, stream.data)
                   for index, stream in enumerate(outputs.get("attachments") or [], start=1)]
    return _message_sections(head, body, subject or PurePath(name).stem, attachments, name, limits, depth), subject


def _message_sections(headers: str, body: str, subject: str, attachments: list[tuple[int, str, bytes | None]],
                      name: str, limits: ConversionLimits, depth: int) -> list[Section]:
    parts: list[Section] = []
    listed = []
    for index, filename, payload in attachments:
        if index > MAX_ATTACHMENTS:
            listed.append(f"{filename} (not read: more than {MAX_ATTACHMENTS} attachments)")
            continue
        try:
            sections = _convert_attachment(filename, payload, name, limits, depth)
        except UnsupportedFileError:
            listed.append(f"{filename} (not read: unsupported file type)")
            continue
        except DocqaError as exc:
            listed.append(f"{filename} (not read: {exc.message.removeprefix(f'{name} › {filename}: ')})")
            continue
        listed.append(filename)
        parts += within(sections, message=subject, attachment=filename, attachment_index=index)
    text = f"{headers}\n\n{body}".strip()
    if listed:
        text += "\n\nAttachments: " + "; ".join(listed)
    return [Section(text, {"message": subject}), *parts]


def _convert_attachment(filename: str, payload: bytes | None, name: str, limits: ConversionLimits,
                        depth: int) -> list[Section]:
    from docqa.conversion.converters import check_container, extract_sections, file_type_of

    label = f"{name} › {filename}"
    file_type = file_type_of(filename)
    if not payload or payload.isspace():
        raise UnreadableFileError(f"{label}: file is empty")
    check_container(file_type, payload, label, limits)
    if file_type in ("eml", "msg"):
        if depth + 1 >= MAX_DEPTH:
            raise UnreadableFileError(f"{label}: messages nested more than {MAX_DEPTH} deep")
        convert = convert_eml if file_type == "eml" else convert_msg
        return convert(payload, label, limits, depth + 1)[0]
    sections, _ = extract_sections(file_type, payload, label, limits)
    return sections


def _body(message: EmailMessage) -> str:
    part = message.get_body(preferencelist=("plain", "html"))
    if part is None:
        return ""
    content = part.get_content()
    if isinstance(content, bytes):
        content = content.decode("utf-8", "replace")
    if part.get_content_type() == "text/html":
        from docqa.conversion.converters import extract_text

        content, _ = extract_text("html", content.encode("utf-8"), "body.html")
    return str(content)


def _attachment_bytes(part: Any) -> bytes | None:
    if part.get_content_type() == "message/rfc822":
        # An attached message is parsed with its parent: its bytes are those of the inner message.
        inner = part.get_payload()
        inner = inner[0] if isinstance(inner, list) and inner else inner
        if isinstance(inner, email.message.Message):
            return inner.as_bytes()
    payload = part.get_payload(decode=True)
    return payload if isinstance(payload, bytes) else None


def _suffix_of(content_type: str) -> str:
    return {"message/rfc822": ".eml", "application/pdf": ".pdf", "text/plain": ".txt",
            "text/html": ".html"}.get(content_type, "")


CONVERTERS = {"eml": convert_eml, "msg": convert_msg}
