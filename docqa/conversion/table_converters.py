"""Spreadsheets to tables: XLSX (Haystack's `XLSXToDocument`), CSV (Haystack's `CSVToDocument`) and ODS (odfpy).

Each sheet becomes one `Table` section (`sheet`): its first non-empty row is the header, and every other row keeps
its row number in the file (as the spreadsheet shows it), so a chunk can cite "sheet Q3, rows 2-41". Chunking
repeats the header in every chunk (`docqa.conversion.chunking.table_windows`).

Large sheets are bounded by `ConversionLimits.max_table_rows` over all sheets of a file: an XLSX whose sheets
declare more rows fails before they are parsed, and any file fails as soon as it yields more (nothing is cut
silently). ODS rows and cells repeated by `number-*-repeated` are expanded only while they hold a value, so a
sheet declaring a million empty rows costs nothing.

Usage:
    sections, title = convert_xlsx(data, "budget.xlsx", limits)
    sections[0].table.sheet, sections[0].table.header, sections[0].table.rows[0]  # 'Q3', ('Region', ...), (2, ...)
"""

from __future__ import annotations

import csv
import io
import re
import zipfile
from collections.abc import Iterable, Iterator
from typing import Any

from docqa.conversion.conversion_box import ConversionLimits
from docqa.conversion.sections import Section, Table
from docqa.errors import FileTooLargeError, UnreadableFileError

# Columns kept per row: a sheet wider than this is cut at it (the header says which columns are shown).
MAX_COLUMNS = 200
_DIMENSION = re.compile(rb'<dimension ref="[A-Z]+\d+:[A-Z]+(\d+)"')


def convert_xlsx(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    from haystack.components.converters import XLSXToDocument

    from docqa.conversion.haystack_runs import run_converter

    _check_declared_rows(data, limits)
    documents = run_converter(XLSXToDocument(table_format="csv"), data, name, "xlsx")["documents"]
    budget = _RowBudget(limits)
    sections = []
    for document in documents:
        sheet = str((document.meta.get("xlsx") or {}).get("sheet_name") or "Sheet")
        # Haystack's CSV: a first line of column letters, then each row led by its row number in the sheet.
        reader = csv.reader(io.StringIO(document.content or ""))
        next(reader, None)
        rows = ((int(float(line[0])), line[1:]) for line in reader if line and line[0])
        table = _table(sheet, rows, budget)
        if table is not None:
            sections.append(Section(table=table, location={"sheet": sheet}))
    return sections, _xlsx_title(data)


def convert_csv(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    from haystack.components.converters import CSVToDocument

    from docqa.conversion.haystack_runs import run_converter

    if b"\x00" in data[:4096]:
        raise UnreadableFileError("cannot parse CSV file (binary content)")
    try:
        content = run_converter(CSVToDocument(encoding="utf-8-sig"), data, name, "csv")["documents"][0].content
    except UnreadableFileError:
        content = run_converter(CSVToDocument(encoding="cp1252"), data, name, "csv")["documents"][0].content
    text = content or ""
    try:
        dialect: Any = csv.Sniffer().sniff(text[:8192], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    reader = csv.reader(io.StringIO(text), dialect)
    rows = ((reader.line_num, line) for line in reader)
    sheet = name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    table = _table(sheet, rows, _RowBudget(limits))
    return ([Section(table=table, location={"sheet": sheet})] if table is not None else []), None


def convert_ods(data: bytes, name: str, limits: ConversionLimits) -> tuple[list[Section], str | None]:
    from odf import table as odf_table
    from odf.opendocument import load

    from docqa.conversion.office_converters import check_not_encrypted

    check_not_encrypted(data, "ODS")
    document = load(io.BytesIO(data))
    budget = _RowBudget(limits)
    sections = []
    for sheet in document.spreadsheet.getElementsByType(odf_table.Table):
        sheet_name = str(sheet.getAttribute("name") or f"Sheet{len(sections) + 1}")
        table = _table(sheet_name, _ods_rows(sheet, limits), budget)
        if table is not None:
            sections.append(Section(table=table, location={"sheet": sheet_name}))
    return sections, None


class _RowBudget:
    def __init__(self, limits: ConversionLimits) -> None:
        self.limit, self.used = limits.max_table_rows, 0

    def take(self) -> None:
        self.used += 1
        if self.used > self.limit:
            raise FileTooLargeError(f"more than {self.limit} spreadsheet rows (DOCQA_CONVERT_MAX_TABLE_ROWS)")


def _table(sheet: str, rows: Iterable[tuple[int, list[str]]], budget: _RowBudget) -> Table | None:
    header: tuple[str, ...] | None = None
    body = []
    for number, cells in rows:
        values = _trimmed(cells)
        if not values:
            continue
        budget.take()
        if header is None:
            header = values
        else:
            body.append((number, values))
    if header is None:
        return None
    width = min(max([len(header), *(len(cells) for _, cells in body)]), MAX_COLUMNS)
    named = tuple(header[i] if i < len(header) and header[i] else _column_letters(i) for i in range(width))
    return Table(sheet=sheet, header=named, rows=tuple(body))


def _trimmed(cells: Iterable[Any]) -> tuple[str, ...]:
    values = [str(cell).strip() if cell is not None else "" for cell in cells]
    while values and not values[-1]:
        values.pop()
    return tuple(values[:MAX_COLUMNS])


def _column_letters(index: int) -> str:
    letters = ""
    index += 1
    while index:
        index, remainder = divmod(index - 1, 26)
        letters = chr(65 + remainder) + letters
    return letters


def _check_declared_rows(data: bytes, limits: ConversionLimits) -> None:
    # Each worksheet declares its used range (<dimension ref="A1:F50001"/>) near its start: read before parsing.
    declared = 0
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for member in archive.namelist():
                if member.startswith("xl/worksheets/") and member.endswith(".xml"):
                    with archive.open(member) as stream:
                        found = _DIMENSION.search(stream.read(4096))
                    declared += int(found.group(1)) if found else 0
    except zipfile.BadZipFile as exc:
        raise UnreadableFileError(f"cannot parse XLSX file ({exc})") from exc
    if declared > limits.max_table_rows:
        raise FileTooLargeError(f"the sheets declare {declared} rows; the limit is {limits.max_table_rows} "
                                "(DOCQA_CONVERT_MAX_TABLE_ROWS)")


def _xlsx_title(data: bytes) -> str | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            core = archive.read("docProps/core.xml")[:65536]
    except (KeyError, zipfile.BadZipFile):
        return None
    found = re.search(rb"<dc:title>([^<]{1,300})</dc:title>", core)
    return found.group(1).decode("utf-8", "replace") if found else None


def _ods_rows(sheet: Any, limits: ConversionLimits) -> Iterator[tuple[int, list[str]]]:
    from odf import table as odf_table
    from odf import teletype

    number = 0
    for row in sheet.getElementsByType(odf_table.TableRow):
        repeat = int(row.getAttribute("numberrowsrepeated") or 1)
        cells: list[str] = []
        for cell in row.getElementsByType(odf_table.TableCell):
            value = teletype.extractText(cell).strip()
            times = int(cell.getAttribute("numbercolumnsrepeated") or 1)
            # A repeated empty cell is padding up to the sheet's edge: it only counts when a value follows.
            cells.extend([value] * min(times, MAX_COLUMNS - len(cells)) if value else [""] * min(times, MAX_COLUMNS))
            if len(cells) >= MAX_COLUMNS:
                break
        if not any(cells):
            number += repeat
            continue
        for _ in range(min(repeat, limits.max_table_rows + 1)):
            number += 1
            yield number, cells


CONVERTERS = {"xlsx": convert_xlsx, "csv": convert_csv, "ods": convert_ods}
