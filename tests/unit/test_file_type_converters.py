"""Office, mail, spreadsheet and scanned files made in the test: each converts to sections at their places (slide,
sheet rows, page, attachment), OCR text is marked, and broken, encrypted or oversized files fail with a reason."""

from __future__ import annotations

import io
import zipfile

import pytest

from docqa.conversion.chunking import ChunkSpec, build_section_chunks
from docqa.conversion.conversion_box import ConversionLimits
from docqa.conversion.converters import convert_bytes
from docqa.errors import FileTooLargeError, UnreadableFileError
from tests.support.office_files import (
    eml_bytes,
    image_bytes,
    odp_bytes,
    ods_bytes,
    odt_bytes,
    page_image,
    pptx_bytes,
    rtf_bytes,
    scanned_pdf_bytes,
    xlsx_bytes,
)
from tests.support.sample_files import pdf_bytes

LIMIT = 10_000_000
OCR = ConversionLimits(ocr_languages="eng")


def convert(data: bytes, name: str, limits: ConversionLimits = OCR):
    return convert_bytes(data, name, LIMIT, limits)


def places(converted) -> list[dict]:
    return [dict(section.location) for section in converted.sections]


class TestSlides:
    def test_pptx_is_read_slide_by_slide_with_speaker_notes(self) -> None:
        data = pptx_bytes([("Pricing", "The Gold plan costs 40 euros a month.", ""),
                           ("Discounts", "Ask sales.", "Tell them the partner discount is 12 percent.")])
        converted = convert(data, "deck.pptx")
        assert converted.file_type == "pptx" and places(converted) == [{"slide": 1}, {"slide": 2}]
        assert "Gold plan costs 40 euros" in converted.sections[0].text
        assert "Speaker notes: Tell them the partner discount is 12 percent." in converted.sections[1].text

    def test_odp_pages_and_notes(self) -> None:
        converted = convert(odp_bytes([("Roadmap 2027", "Launch is in May."), ("Risks", "")]), "talk.odp")
        assert places(converted) == [{"slide": 1}, {"slide": 2}]
        assert converted.sections[0].text == "Roadmap 2027\n\nSpeaker notes: Launch is in May."


class TestTables:
    def test_xlsx_sheets_become_tables_with_their_row_numbers(self) -> None:
        rows = [["Order", "Customer", "Amount"], *[[1000 + i, f"c{i}", i * 1.5] for i in range(1, 6)]]
        converted = convert(xlsx_bytes({"Q3": rows, "Blank": [], "Notes": [["Text"], ["Audit due in June"]]}),
                            "book.xlsx")
        assert places(converted) == [{"sheet": "Q3"}, {"sheet": "Notes"}]
        table = converted.sections[0].table
        assert table.header == ("Order", "Customer", "Amount")
        assert table.rows[0] == (2, ("1001", "c1", "1.5")) and table.rows[-1][0] == 6

    def test_every_table_chunk_repeats_the_header_and_names_its_rows(self) -> None:
        rows = [["Order", "Customer", "Amount"], *[[1000 + i, f"customer {i}", i] for i in range(1, 41)]]
        converted = convert(xlsx_bytes({"Orders": rows}), "orders.xlsx")
        chunks = build_section_chunks(converted.sections, ChunkSpec("orders.xlsx", "orders.xlsx", "Orders", "acme",
                                                                    ["everyone"]), chunk_words=60, overlap_words=10)
        assert len(chunks) > 3
        assert all(c.content.startswith("Sheet: Orders\n| Order | Customer | Amount |\n|---|---|---|\n")
                   for c in chunks)
        assert chunks[0].meta["row_start"] == 2 and chunks[-1].meta["row_end"] == 41
        assert [c.meta["row_start"] for c in chunks[1:]] == [c.meta["row_end"] + 1 for c in chunks[:-1]]
        hit = next(c for c in chunks if "| 1017 | customer 17 | 17 |" in c.content)
        assert hit.meta["location"] == f"sheet Orders, rows {hit.meta['row_start']}-{hit.meta['row_end']}"

    def test_csv_with_semicolons_and_windows_1252(self) -> None:
        data = "Item;Price\nCaf\u00e9 cr\u00e8me;3,20\nTh\u00e9;2,90\n".encode("cp1252")
        table = convert(data, "menu.csv").sections[0].table
        assert table.header == ("Item", "Price") and table.rows == ((2, ("Caf\u00e9 cr\u00e8me", "3,20")),
                                                                    (3, ("Th\u00e9", "2,90")))

    def test_ods_repeated_empty_rows_cost_nothing(self) -> None:
        from odf.opendocument import OpenDocumentSpreadsheet
        from odf.table import Table, TableCell, TableRow
        from odf.text import P

        document = OpenDocumentSpreadsheet()
        sheet = Table(name="Stock")
        for values, repeat in ((["Item", "Count"], 1), ([], 1_000_000), (["Bolts", "300"], 1)):
            row = TableRow(numberrowsrepeated=repeat)
            for value in values:
                cell = TableCell(valuetype="string")
                cell.addElement(P(text=value))
                row.addElement(cell)
            if not values:
                row.addElement(TableCell(numbercolumnsrepeated=16384))
            sheet.addElement(row)
        document.spreadsheet.addElement(sheet)
        buffer = io.BytesIO()
        document.write(buffer)
        table = convert(buffer.getvalue(), "stock.ods").sections[0].table
        assert table.rows == ((1_000_002, ("Bolts", "300")),)
        assert convert(ods_bytes({"S": [["A", "B"], ["x", "1"]]}), "s.ods").sections[0].table.header == ("A", "B")

    def test_too_many_rows_fail_the_file(self) -> None:
        data = xlsx_bytes({"Big": [["n"], *[[i] for i in range(30)]]})
        with pytest.raises(FileTooLargeError, match=r"big\.xlsx: the sheets declare 31 rows; the limit is 20"):
            convert(data, "big.xlsx", ConversionLimits(max_table_rows=20))
        with pytest.raises(FileTooLargeError, match="more than 20 spreadsheet rows"):
            convert(b"n\n" + b"".join(b"%d\n" % i for i in range(30)), "big.csv", ConversionLimits(max_table_rows=20))


class TestMail:
    def test_headers_body_and_each_attachment_as_its_own_part(self) -> None:
        inner = eml_bytes("Re: site visit", "The visit is on Thursday.", [("agenda.rtf", rtf_bytes(["Agenda."]))])
        data = eml_bytes("Offer for Globex", "Please find our offer attached.", [
            ("offer.pdf", pdf_bytes(["The discount for Globex is 17 percent.", "Valid until June."])),
            ("prices.xlsx", xlsx_bytes({"2027": [["Plan", "Euros"], ["Gold", 40]]})),
            ("forwarded.eml", inner),
            ("tools.zip", b"PK\x05\x06" + b"\0" * 18),
            ("broken.pdf", b"%PDF-1.4 cut"),
        ])
        converted = convert(data, "offer.eml")
        assert converted.title == "Offer for Globex"
        message = converted.sections[0]
        assert message.location == {"message": "Offer for Globex"}
        assert message.text.startswith("From: Ann Example <ann@example.com>\nTo: bob@example.com\n")
        assert "Please find our offer attached." in message.text
        assert ("Attachments: offer.pdf; prices.xlsx; forwarded.eml; tools.zip (not read: unsupported file type); "
                "broken.pdf (not read: cannot parse PDF file") in message.text
        parts = [(s.location.get("attachment"), s.location.get("attachment_index"), s.location.get("page"),
                  s.location.get("sheet")) for s in converted.sections[1:]]
        assert parts == [("offer.pdf", 1, 1, None), ("prices.xlsx", 2, None, "2027"), ("forwarded.eml", 3, None, None),
                         ("forwarded.eml › agenda.rtf", 3, None, None)]
        assert "discount for Globex is 17 percent" in converted.sections[1].text
        assert "The visit is on Thursday." in converted.sections[3].text
        assert all(s.location["message"] == "Offer for Globex" for s in converted.sections)

    def test_not_a_message(self) -> None:
        with pytest.raises(UnreadableFileError, match=r"^x\.eml: cannot parse EML file \(no message headers\)"):
            convert(b"\x89PNG\r\n\x1a\n not a mail at all", "x.eml")

    def test_a_broken_msg_fails_with_haystacks_reason(self) -> None:
        with pytest.raises(UnreadableFileError, match=r"^bad\.msg: cannot parse MSG file \(.*not an Outlook MSG"):
            convert(b"definitely not OLE", "bad.msg")


class TestDocuments:
    def test_odt_and_rtf(self) -> None:
        assert convert(odt_bytes(["Notice", "The notice period is 45 days."]), "m.odt").text == (
            "Notice\nThe notice period is 45 days.")
        assert "The dividend is 0.42 euros." in convert(rtf_bytes(["Minutes.", "The dividend is 0.42 euros."]),
                                                        "m.rtf").text


class TestScans:
    def test_a_scanned_pdf_page_is_recognised_and_marked(self) -> None:
        data = scanned_pdf_bytes([["The lease of the Lyon warehouse ends on 3 March 2031."],
                                  ["The deposit is 12,000 euros."]])
        converted = convert(data, "lease.pdf")
        assert places(converted) == [{"page": 1}, {"page": 2}]
        assert all(section.ocr for section in converted.sections)
        assert "Lyon warehouse ends on 3 March 2031" in converted.sections[0].text
        assert "deposit is 12,000 euros" in converted.sections[1].text

    def test_a_page_with_a_text_layer_is_not_recognised(self) -> None:
        converted = convert(pdf_bytes(["Meals are reimbursed up to 60 euros per day."]), "p.pdf")
        assert [s.ocr for s in converted.sections] == [False]

    def test_images_and_tiff_pages(self) -> None:
        png = convert(image_bytes(["Invoice 5521: total due 980 euros."]), "invoice.png")
        assert png.sections[0].ocr and "total due 980 euros" in png.sections[0].text
        buffer = io.BytesIO()
        first, second = page_image(["Page one says alpha."]), page_image(["Page two says omega."], seed=2)
        first.save(buffer, format="TIFF", save_all=True, append_images=[second])
        tiff = convert(buffer.getvalue(), "fax.tiff")
        assert places(tiff) == [{"page": 1}, {"page": 2}] and "omega" in tiff.sections[1].text

    def test_ocr_bounds_and_ocr_off(self) -> None:
        data = scanned_pdf_bytes([["one"], ["two"], ["three"]])
        with pytest.raises(FileTooLargeError, match=r"3 PDF pages without a text layer need OCR; the limit is 2"):
            convert(data, "long.pdf", ConversionLimits(ocr_languages="eng", ocr_max_pages=2))
        with pytest.raises(UnreadableFileError, match=r"no extractable text \(OCR is off"):
            convert(data, "long.pdf", ConversionLimits())
        with pytest.raises(UnreadableFileError, match=r"OCR failed .*DOCQA_OCR_LANGUAGES=xyz"):
            convert(image_bytes(["text"]), "x.png", ConversionLimits(ocr_languages="xyz"))


class TestBrokenAndEncrypted:
    def test_encrypted_pdf(self) -> None:
        from pypdf import PdfReader, PdfWriter

        writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(["Secret numbers."]))))
        writer.encrypt(user_password="pw", owner_password="owner", algorithm="RC4-128")
        buffer = io.BytesIO()
        writer.write(buffer)
        with pytest.raises(UnreadableFileError, match=r"^locked\.pdf: .*PDF is encrypted"):
            convert(buffer.getvalue(), "locked.pdf")

    @pytest.mark.parametrize("name", ["locked.xlsx", "locked.pptx", "locked.docx"])
    def test_password_protected_office_files(self, name: str) -> None:
        ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\0" * 1024
        with pytest.raises(UnreadableFileError, match="encrypted \\(password-protected\\)"):
            convert(ole, name)

    def test_encrypted_odf(self) -> None:
        buffer = io.BytesIO()
        with zipfile.ZipFile(buffer, "w") as archive:
            archive.writestr("mimetype", "application/vnd.oasis.opendocument.text")
            archive.writestr("META-INF/manifest.xml", '<manifest:manifest><manifest:file-entry manifest:full-path='
                             '"content.xml"><manifest:encryption-data/></manifest:file-entry></manifest:manifest>')
            archive.writestr("content.xml", b"\x8f\x00 ciphertext")
        with pytest.raises(UnreadableFileError, match=r"ODT file is encrypted"):
            convert(buffer.getvalue(), "secret.odt")

    @pytest.mark.parametrize("name", ["bad.pptx", "bad.xlsx", "bad.ods"])
    def test_broken_zip_files(self, name: str) -> None:
        with pytest.raises(UnreadableFileError, match=r"cannot parse (PPTX|XLSX|ODS) file \(not a ZIP archive\)"):
            convert(b"PK\x03\x04 truncated", name)

    def test_a_truncated_pptx(self) -> None:
        data = pptx_bytes([("t", "b", "")])
        with pytest.raises(UnreadableFileError, match=r"^cut\.pptx: cannot parse PPTX file"):
            convert(data[: len(data) // 2] + data[-200:], "cut.pptx")

    def test_an_xlsx_bomb_is_refused_before_anything_is_inflated(self) -> None:
        from tests.support.conversion_bombs import xlsx_bomb

        with pytest.raises(FileTooLargeError, match=r"^bomb\.xlsx: decompressed size over 67108864 bytes"):
            convert(xlsx_bomb(70 * 1024 * 1024), "bomb.xlsx")
