from pathlib import Path

import pytest

from docqa.conversion.converters import convert_bytes, convert_path, file_type_of
from docqa.errors import FileTooLargeError, UnreadableFileError, UnsupportedFileError
from tests.support.sample_files import docx_bytes, html_bytes, pdf_bytes

LIMIT = 1_000_000


class TestConvertBytes:
    def test_text(self) -> None:
        converted = convert_bytes("Caf\u00e9 opens at nine.\n".encode(), "notes.txt", LIMIT)
        assert converted.text.strip() == "Caf\u00e9 opens at nine."
        assert converted.title == "notes"
        assert converted.file_type == "text"

    def test_windows_1252_text_is_decoded(self) -> None:
        converted = convert_bytes("na\u00efve r\u00e9sum\u00e9".encode("cp1252"), "old.txt", LIMIT)
        assert converted.text == "na\u00efve r\u00e9sum\u00e9"

    def test_markdown_is_rendered_plain_with_heading_title(self) -> None:
        converted = convert_bytes(b"# Travel policy\n\nBook **economy** class.\n\n- Keep receipts", "t.md", LIMIT)
        assert converted.title == "Travel policy"
        assert "Book economy class." in converted.text
        assert "**" not in converted.text
        assert "Keep receipts" in converted.text

    def test_html_keeps_text_and_title_and_drops_scripts(self) -> None:
        data = html_bytes("Expenses", ["Reports are due within 30 days of travel."])
        converted = convert_bytes(data, "page.html", LIMIT)
        assert converted.title == "Expenses"
        assert "Reports are due within 30 days of travel." in converted.text
        assert "tracking" not in converted.text

    def test_pdf(self) -> None:
        converted = convert_bytes(pdf_bytes(["Expense reports are due within 30 days."]), "policy.pdf", LIMIT)
        assert "Expense reports are due within 30 days." in converted.text
        assert converted.file_type == "pdf"

    def test_docx_with_title(self) -> None:
        converted = convert_bytes(docx_bytes(["Travel must be approved."], title="Policy"), "p.docx", LIMIT)
        assert converted.text.strip() == "Travel must be approved."
        assert converted.title == "Policy"


class TestConversionErrors:
    def test_corrupt_pdf(self) -> None:
        with pytest.raises(UnreadableFileError, match=r"^bad\.pdf: cannot parse PDF"):
            convert_bytes(pdf_bytes(["truncated"])[:120], "bad.pdf", LIMIT)

    def test_corrupt_docx(self) -> None:
        with pytest.raises(UnreadableFileError, match="cannot parse DOCX"):
            convert_bytes(b"PK\x03\x04 not really a zip", "bad.docx", LIMIT)

    def test_pdf_without_text(self) -> None:
        with pytest.raises(UnreadableFileError, match="no extractable text"):
            convert_bytes(pdf_bytes([]), "scan.pdf", LIMIT)

    @pytest.mark.parametrize("data", [b"", b"  \n\t"])
    def test_empty_file(self, data: bytes) -> None:
        with pytest.raises(UnreadableFileError, match="empty"):
            convert_bytes(data, "empty.txt", LIMIT)

    def test_binary_content_in_text_file(self) -> None:
        with pytest.raises(UnreadableFileError, match="binary"):
            convert_bytes(b"\x00\x01\x02abc", "blob.txt", LIMIT)

    @pytest.mark.parametrize("name", ["sheet.xls", "archive.zip", "README"])
    def test_unsupported_type(self, name: str) -> None:
        with pytest.raises(UnsupportedFileError, match="unsupported file type"):
            convert_bytes(b"content", name, LIMIT)

    @pytest.mark.parametrize(("name", "command"), [("Max_Kris.json", "docqa records FILE_OR_FOLDER")])
    def test_records_files_point_at_the_records_command(self, name: str, command: str) -> None:
        with pytest.raises(UnsupportedFileError, match="unsupported file type") as raised:
            convert_bytes(b"{}", name, LIMIT)
        assert command in str(raised.value)

    def test_oversized(self) -> None:
        with pytest.raises(FileTooLargeError, match="the limit is 10 bytes"):
            convert_bytes(b"x" * 11, "big.txt", 10)

    def test_oversized_path_is_rejected_before_reading(self, tmp_path: Path, monkeypatch) -> None:
        path = tmp_path / "big.md"
        path.write_bytes(b"word " * 100)
        monkeypatch.setattr(Path, "read_bytes", lambda self: pytest.fail("file was read"))
        with pytest.raises(FileTooLargeError):
            convert_path(path, 100)

    def test_unreadable_path(self, tmp_path: Path) -> None:
        with pytest.raises(UnreadableFileError, match="cannot read file"):
            convert_path(tmp_path / "missing.txt", LIMIT)

    def test_suffix_is_case_insensitive(self) -> None:
        assert file_type_of("REPORT.PDF") == "pdf"
