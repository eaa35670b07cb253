"""The conversion box: the ZIP pre-check refuses what a DOCX declares before anything is inflated, and the child
process holds every conversion within its memory and time limits while normal files convert as before."""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from docqa.conversion import converters
from docqa.conversion.conversion_box import ConversionLimits, check_zip_archive, run_in_box, zip_members
from docqa.conversion.converters import convert_bytes, extract_text
from docqa.errors import FileTooLargeError, UnreadableFileError
from tests.support.conversion_bombs import billion_laughs_docx, lying_docx, pdf_bomb, xlsx_bomb, zip_bomb_docx
from tests.support.sample_files import docx_bytes, html_bytes, pdf_bytes

MB = 1024 * 1024
LIMIT = 50 * MB


# Run in the child: module-level so that the child can import them.
def _double(value: int) -> int:
    return value * 2


def _allocate(megabytes: int) -> int:
    blocks = [bytearray(MB) for _ in range(megabytes)]
    return len(blocks)


def _sleep(seconds: float) -> None:
    time.sleep(seconds)


def _raise_docqa() -> None:
    raise UnreadableFileError("x.pdf: PDF is encrypted")


def _raise_other() -> None:
    raise KeyError("no such object")


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


class TestZipPrecheck:
    def test_a_normal_docx_passes_and_its_directory_is_read_as_zipfile_reads_it(self):
        data = docx_bytes(["Travel must be approved."], title="Policy")
        check_zip_archive(data, "p.docx", ConversionLimits())
        listed = [(i.filename, i.file_size, i.compress_size) for i in zipfile.ZipFile(io.BytesIO(data)).infolist()]
        assert list(zip_members(data)) == listed

    def test_the_zip_bomb_is_refused_for_its_member_size(self):
        with pytest.raises(FileTooLargeError, match=r"^bomb\.docx: decompressed size over 67108864 bytes "
                                                     r"\(word/document\.xml declares 230\d{6} bytes\)$"):
            check_zip_archive(zip_bomb_docx(), "bomb.docx", ConversionLimits())

    @pytest.mark.parametrize("limits,reason", [
        (ConversionLimits(max_uncompressed_bytes=4 * MB), "decompressed size over 4194304 bytes (the members"),
        (ConversionLimits(max_member_bytes=2 * MB), "decompressed size over 2097152 bytes (word/document.xml"),
        (ConversionLimits(max_ratio=20), "compression ratio over 20 (word/document.xml inflates"),
        (ConversionLimits(max_members=2), "more than 2 archive members"),
    ])
    def test_each_bound(self, limits, reason):
        with pytest.raises(FileTooLargeError) as raised:
            check_zip_archive(zip_bomb_docx(8 * MB), "b.docx", limits)
        assert raised.value.message.startswith(f"b.docx: {reason}")

    def test_the_xlsx_bomb_is_refused_by_the_same_check(self):
        with pytest.raises(FileTooLargeError, match=r"sheet1\.xml declares"):
            check_zip_archive(xlsx_bomb(70 * MB), "bomb.xlsx", ConversionLimits())

    def test_not_a_zip(self):
        with pytest.raises(UnreadableFileError, match="not a ZIP archive"):
            check_zip_archive(b"PK\x03\x04 not really a zip", "bad.docx", ConversionLimits())

    def test_a_refused_docx_never_reaches_the_box(self, monkeypatch):
        def no_box(*args, **kwargs):
            raise AssertionError("the box was started")

        monkeypatch.setattr(converters, "run_in_box", no_box)
        with pytest.raises(FileTooLargeError, match="decompressed size over"):
            convert_bytes(zip_bomb_docx(8 * MB), "bomb.docx", LIMIT, ConversionLimits(max_member_bytes=4 * MB))

    def test_a_member_that_lies_about_its_size_is_not_inflated_past_it(self):
        # 20 MB of XML declared as 4 KB: the pre-check passes, zipfile stops at 4 KB and the CRC check fails.
        data = lying_docx(20 * MB)
        check_zip_archive(data, "liar.docx", ConversionLimits())
        with pytest.raises(UnreadableFileError, match=r"cannot parse DOCX file \(Bad CRC-32"):
            convert_bytes(data, "liar.docx", LIMIT, ConversionLimits(max_memory_mb=128))


class TestBox:
    def test_the_result_comes_back(self):
        assert run_in_box(_double, 21, limits=ConversionLimits(), name="n") == 42

    def test_a_docqa_error_is_raised_as_it_was(self):
        with pytest.raises(UnreadableFileError, match=r"^x\.pdf: PDF is encrypted$"):
            run_in_box(_raise_docqa, limits=ConversionLimits(), name="x.pdf")

    def test_another_error_is_one_line(self):
        with pytest.raises(UnreadableFileError, match=r"^f\.pdf: conversion failed \('no such object'\)$"):
            run_in_box(_raise_other, limits=ConversionLimits(), name="f.pdf")

    def test_over_the_memory_limit(self):
        with pytest.raises(FileTooLargeError, match=r"^big\.pdf: conversion used more than 64 MB$"):
            run_in_box(_allocate, 512, limits=ConversionLimits(max_memory_mb=64), name="big.pdf")

    def test_over_the_time_limit_the_child_is_killed(self):
        started = time.monotonic()
        with pytest.raises(UnreadableFileError, match=r"^slow\.pdf: conversion took longer than 0\.5 s$"):
            run_in_box(_sleep, 30, limits=ConversionLimits(timeout_s=0.5), name="slow.pdf")
        assert time.monotonic() - started < 5
        assert multiprocessing.active_children() == []

    def test_a_child_killed_by_a_signal(self):
        with pytest.raises(UnreadableFileError, match=r"^d\.pdf: conversion stopped by signal 9"):
            run_in_box(_die, limits=ConversionLimits(), name="d.pdf")


    def test_a_child_does_not_import_the_callers_main_script(self, tmp_path):
        # Each import of this script adds a line; a forkserver child would otherwise import it before its work.
        marks = tmp_path / "imports.txt"
        script = tmp_path / "caller.py"
        script.write_text(
            "import pathlib\n"
            f"pathlib.Path({str(marks)!r}).open('a').write('imported\\n')\n"
            "if __name__ == '__main__':\n"
            "    from docqa.conversion.conversion_box import ConversionLimits, run_in_box\n"
            "    print(run_in_box(abs, -7, limits=ConversionLimits(), name='n'))\n"
        )
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                              cwd=Path(__file__).resolve().parents[2])
        assert done.stdout.strip() == "7", done.stderr
        assert marks.read_text() == "imported\n"


class TestConversionInTheBox:
    @pytest.mark.parametrize("name,data,file_type", [
        ("p.docx", docx_bytes(["Travel must be approved.", "Hotels up to 200 EUR."], title="Policy"), "docx"),
        ("p.pdf", pdf_bytes(["Expense reports are due within 30 days."]), "pdf"),
        ("p.html", html_bytes("Expenses", ["Reports are due within 30 days of travel."]), "html"),
    ])
    def test_normal_files_convert_as_in_process(self, name, data, file_type):
        converted = convert_bytes(data, name, LIMIT)
        text, title = extract_text(file_type, data, name)
        assert (converted.text, converted.title) == (text, title or converted.title)
        assert converted.text.strip()

    def test_a_docx_within_the_precheck_but_over_the_memory_limit(self):
        # 40 MB of XML passes every declared bound; python-docx's tree for it does not fit in 256 MB.
        data = zip_bomb_docx(40 * MB)
        with pytest.raises(FileTooLargeError, match=r"^big\.docx: conversion used more than 256 MB$"):
            convert_bytes(data, "big.docx", LIMIT, ConversionLimits(max_memory_mb=256))

    def test_a_text_past_its_bound_is_not_handed_back(self):
        data = docx_bytes(["Forty characters of text in a paragraph."] * 100)
        with pytest.raises(FileTooLargeError, match=r"^long\.docx: extracted text over 1000 characters$"):
            convert_bytes(data, "long.docx", LIMIT, ConversionLimits(max_text_chars=1000))

    def test_a_pdf_decompression_bomb_is_bounded(self):
        started = time.monotonic()
        with pytest.raises((FileTooLargeError, UnreadableFileError)) as raised:
            convert_bytes(pdf_bomb(), "bomb.pdf", LIMIT, ConversionLimits(max_memory_mb=256, timeout_s=30))
        assert time.monotonic() - started < 30
        assert raised.value.message.startswith("bomb.pdf: ")

    def test_xml_entity_expansion_is_refused(self):
        # python-docx's parser does not resolve entities, and libxml2 refuses the amplification outright.
        with pytest.raises(UnreadableFileError, match=r"^laughs\.docx: cannot parse DOCX file \(Maximum entity "
                                                      r"amplification factor exceeded"):
            convert_bytes(billion_laughs_docx(), "laughs.docx", LIMIT, ConversionLimits(max_memory_mb=256))
