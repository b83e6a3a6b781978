"""A user's CSV file written as one span of TFRecord tf.Examples (`python -m pipeline prepare-data --csv`).

Reading: pyarrow's CSV reader (installed with TFX) parses the file in blocks of BLOCK_BYTES, streaming:
quoting, doubled quotes, delimiters and line breaks inside quoted cells, a UTF-8 byte-order mark; a gzip-compressed
file (`.csv.gz`) and UTF-16 text (Excel's "Unicode text") are read as their UTF-8 text would be (CsvSource). Every cell
is read as text and our rules, applied to whole blocks with pyarrow's compute functions, decide what it is
(a wide file's blocks are joined up to JOINED_ROWS rows first: the rules' work is per column per block).
Two passes over the file: the first decides each column's type, the second writes. Memory holds a block at a
time and per-column counters, whatever the number of rows.

Record contract, as for the bundled taxi data: one tf.Example per row, one feature per column under the
column's own name (any text a header holds). The rules:
- missing: an empty cell, or one of the missing-value tokens (`MISSING_TOKENS`, compared without case:
  NA, N/A, null, None, -, ?, nan, inf, -inf, ...; `--na` replaces the list) is an absent feature;
- int64: every present cell an integer (`-12`, `0`), within int64's range; a number with a leading zero
  (`02134`) is a code and keeps its column text; Python-only forms (`1_000`, `0x1F`) are not numbers;
- float: every present cell a decimal number (`1.5`, `-2e-3`); in a comma-delimited file, a quoted number
  with thousands separators (`"1,234.5"`) is a number too;
- date: every present cell a date or date-time of one form (DATE_FORMS: ISO 8601 with or without time and
  zone, `YYYY/MM/DD`, day-first or month-first `DD/MM/YYYY` when the whole column tells which), or of the
  form `--date-format COLUMN=FORMAT` gives; written as int64 seconds since 1970-01-01 UTC (a time without a
  zone is taken as UTC);
- a number column may carry one unit, the same in every cell: a percent sign (`12%` is 12) or a currency
  symbol (`$1,234.50` is 1234.5; thousands separators allowed); with `decimal=","` numbers are written
  `4,5` and `1.466,14` (a European spreadsheet); `--dates` reads integer columns as Unix seconds (dates);
- a few unreadable cells (`unknown`, `—` among numbers, `2023-02-30`, `soon` among dates of one form), at most
  UNREADABLE_SHARE of a column's present cells, leave it a number or date column: they are written as missing
  values, and the summary and the span's note (SPAN_NOTE_FILE `unread`) name how many, with examples;
- else string (UTF-8 bytes). Notes name the text columns that look like numbers with a decimal comma, dates
  of several forms, numbers or dates but for too many unreadable cells, or integers that look like Unix
  seconds, with the option that reads them.
A column empty in every row is written as no feature and recorded as empty: a later span may fill it.
Rows whose every cell is empty (a spreadsheet's trailing `,,,`) are skipped and counted; rows with a missing
cell in a `required` column (and, once `init` chose it, the label) are left out and counted.

Later spans keep the types the first one fixed: the first span's columns and types are kept in COLUMNS_FILE
in the data root, and a later span is written with them (a float column whose new cells are all whole numbers
stays float), or with the types of a curated schema (`--schema`). A cell that does not fit its column's type
(a fraction in an integer column) is an error naming the file, line, column and cell, and so are unreadable
cells beyond UNREADABLE_SHARE of a column; a later span that lacks a column of the first span
(removed or renamed) is an error naming the missing and the new columns. Re-preparing the span that fixed
the types, when it is the only span, infers them again.

Bad input raises CsvError naming the file and line or column (not UTF-8 or UTF-16 text, a ZIP archive such as
an Excel workbook, a cell holding a NUL character, no header, an empty or repeated
column name, a row with too many or too few cells, no data rows, a cell that does not fit a fixed type), and
nothing is written: the span is written into a hidden folder beside it (`.span-N.partial`, never read as a
span) and renamed into place only when every row was read and every file closed; on any failure (a full disk
included) that folder is removed and an existing span stays as it was.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import json
import os
import re
import struct
import typing

import numpy as np

from components.core.contract import DATE_RANGE, DATE_RANGE_TEXT
from components.core.path_operations import file_system
from components.core.missing_values import MISSING_TOKENS

DELIMITERS = ",;\t|"
SHARDS = 4
SNIFF_BYTES = 64 * 1024
BLOCK_BYTES = 1 << 20  # pyarrow reads the CSV in blocks of this many bytes (and reads ahead about 35 of them)
# A wide file's blocks hold few rows, and the rules' work is per column per block: consecutive blocks are
# joined until they hold JOINED_ROWS rows, or JOINED_BYTES of text, whichever comes first
JOINED_ROWS, JOINED_BYTES = 4096, 16 << 20
COLUMNS_FILE = ".csv_columns.json"  # in the data root: the types the first span fixed (hidden: never read as data)
SPAN_NOTE_FILE = ".span.json"  # in a span folder: how it was prepared (its source, the rows left out and why)
EMPTY = "empty"  # the kind a summary shows for a column with no value in any row (written as no feature)
UNITS = ("%", "$", "€", "£", "¥", "₹")  # a number column may carry one of these in every cell
UNIX_SECONDS = "unix"  # the date form of an integer column declared a date (--dates): seconds since 1970-01-01 UTC
PLAUSIBLE_SECONDS = (631_152_000, 2_208_988_800)  # 1990-01-01 to 2040-01-01: integers that may be Unix seconds
# A column of numbers or dates may hold a few cells its type does not read (`unknown`, `—`, `2023-02-30`): at most
# this share of its present cells, which are then written as missing values and named in a note; more, and the
# column stays text
UNREADABLE_SHARE = 0.02
EXAMPLES = 3  # the unread cells a note quotes

_INT = r"^[+-]?(0|[1-9][0-9]*)$"
_CODE = r"^[+-]?0[0-9]+$"  # a leading zero: a code (zip code, account), kept as text
_FLOAT = r"^[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_THOUSANDS = r"^[+-]?[1-9][0-9]{0,2}(,[0-9]{3})+(\.[0-9]+)?$"
_FLOAT_COMMA = r"^[+-]?((0|[1-9][0-9]*)(,[0-9]*)?|,[0-9]+)([eE][+-]?[0-9]+)?$"  # decimal comma: 4,5
_THOUSANDS_DOT = r"^[+-]?[1-9][0-9]{0,2}(\.[0-9]{3})+(,[0-9]+)?$"  # decimal comma, dots between thousands: 1.466,14
_COMMA_NUMBER = r"^[+-]?([0-9]+,[0-9]+|[1-9][0-9]{0,2}(\.[0-9]{3})+(,[0-9]+)?)$"  # only a decimal comma reads it
_TIME = r"(?:[T ](?P<H>[0-9]{1,2}):(?P<M>[0-9]{2})(?::(?P<S>[0-9]{2})(?:[.,][0-9]+)?)?)?"
DATE_FORMS = {  # name -> regular expression with named parts; day-first and month-first share one shape
    "iso": r"^(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})-(?P<d>[0-9]{1,2})" + _TIME
           + r"\s*(?P<z>Z|[+-][0-9]{2}(?::?[0-9]{2})?)?$",
    "ymd": r"^(?P<y>[0-9]{4})/(?P<m>[0-9]{1,2})/(?P<d>[0-9]{1,2})" + _TIME + "$",
    "dmy": r"^(?P<d>[0-9]{1,2})[/.-](?P<m>[0-9]{1,2})[/.-](?P<y>[0-9]{4})" + _TIME + "$",
    "mdy": r"^(?P<m>[0-9]{1,2})[/.-](?P<d>[0-9]{1,2})[/.-](?P<y>[0-9]{4})" + _TIME + "$",
}
_DATE_SHAPE = r"^[0-9]{1,4}[/.-][0-9]{1,2}[/.-][0-9]{1,4}"  # what a cell of every DATE_FORMS form starts with
DATE_FORM_NAMES = {"iso": "ISO 8601", "ymd": "YYYY/MM/DD", "dmy": "day first (DD/MM/YYYY)",
                   "mdy": "month first (MM/DD/YYYY)", UNIX_SECONDS: "Unix seconds"}


class CsvError(ValueError):
    """The CSV cannot be read as a table; the message names the file and line, or the column."""


@dataclasses.dataclass
class CsvSummary:
    """What prepare-data wrote: the span folder, the rows, each column's type and missing cells."""
    span_dir: str
    rows: int
    skipped_rows: int  # rows left out for a missing required cell
    empty_rows: int  # rows whose every cell was empty, skipped
    delimiter: str
    types: dict[str, str]  # column -> int | float | string | date
    missing: dict[str, int]  # column -> rows without a value
    date_forms: dict[str, str]  # date column -> its form (a DATE_FORMS name, UNIX_SECONDS or a strptime format)
    fixed_by: str = ""  # where the types came from when not inferred: the first span's record, or a schema
    notes: list[str] = dataclasses.field(default_factory=list)  # what was not read as it may have been meant
    units: dict[str, str] = dataclasses.field(default_factory=dict)  # number column -> the unit its cells carry
    empty: list[str] = dataclasses.field(default_factory=list)  # columns with no value in any row
    required: tuple[str, ...] = ()  # the columns a row must have a value in (the label init chose among them)
    label: str = ""  # the label `init` chose for the data root ("" before init)
    decimal: str = "."

    def render(self) -> str:
        width = max(len(column) for column in self.types)
        decimal = ", decimal comma" if self.decimal == "," else ""
        lines = [f"wrote {self.rows:,} tf.Examples to {self.span_dir} (delimiter {self.delimiter!r}{decimal})"]
        if self.fixed_by:
            lines.append(f"column types fixed by {self.fixed_by}")
        if self.skipped_rows:
            names = ", ".join(f"{column!r}" + (" (the label init chose)" if column == self.label else "")
                              for column in self.required)
            lines.append(f"left out {self.skipped_rows:,} row(s) with a missing value in a required column: {names}")
        if self.empty_rows:
            lines.append(f"skipped {self.empty_rows:,} empty row(s)")
        for column, kind in self.types.items():
            detail = ""
            if column in self.empty:
                kind, detail = EMPTY, "  (no value in any row: no feature; a later span may fill it)"
            elif kind == "date":
                form = self.date_forms[column]
                detail = f"  ({DATE_FORM_NAMES.get(form, form)}; written as int64 seconds since 1970-01-01 UTC)"
            elif column in self.units:
                unit = self.units[column]
                detail = "  (percent sign dropped: 12% is 12)" if unit == "%" else f"  (currency symbol {unit} dropped)"
            lines.append(f"  {column:<{width}}  {kind:<6}  {self.missing[column]:,} missing{detail}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------- reading blocks

@dataclasses.dataclass(frozen=True)
class CsvSource:
    """How a CSV file's bytes hold its text: gzip-compressed or not (`.csv.gz`), and the text's encoding
    (UTF-8, with or without a byte-order mark; UTF-16, as Excel's "Unicode text" saves it)."""
    path: str
    gzip: bool = False
    encoding: str = "utf-8-sig"

    @classmethod
    def of(cls, path: str) -> "CsvSource":
        """Input: a file. Output: how to read it. Raises CsvError naming the file when it is a ZIP archive (an
        Excel workbook is one) or another compression than gzip."""
        with open(path, "rb") as handle:
            head = handle.read(4)
        compressed = head[:2] == b"\x1f\x8b"
        if compressed:
            with gzip.open(path, "rb") as handle:
                try:
                    head = handle.read(SNIFF_BYTES)
                except (OSError, EOFError) as error:
                    raise CsvError(f"{path}: gzip-compressed, but cannot be decompressed ({error})") from None
        else:
            with open(path, "rb") as handle:
                head = handle.read(SNIFF_BYTES)
        for magic, what in ((b"PK\x03\x04", "a ZIP archive (an Excel .xlsx workbook is one)"),
                            (b"BZh", "bzip2-compressed"), (b"\xfd7zXZ", "xz-compressed"),
                            (b"\x28\xb5\x2f\xfd", "zstd-compressed")):
            if head.startswith(magic):
                raise CsvError(f"{path}: {what}, not CSV text; save it as CSV (UTF-8), or compress it with gzip")
        return cls(path, compressed, _encoding_of(head))

    def binary(self):
        """The file's bytes, decompressed, as a binary file object."""
        return gzip.open(self.path, "rb") if self.gzip else open(self.path, "rb")

    def text(self):
        """The file's text, as a text file object for Python's csv module (undecodable bytes replaced)."""
        return io.TextIOWrapper(self.binary(), encoding=self.encoding, errors="replace", newline="")

    def arrow(self):
        """The file's bytes, decompressed, as a pyarrow input stream (read, not memory-mapped: a mapped file's
        pages would count in the process's memory)."""
        import pyarrow as pa

        raw = pa.OSFile(self.path)
        return pa.CompressedInputStream(raw, "gzip") if self.gzip else raw

    @property
    def described(self) -> str:
        """"gzip-compressed UTF-16 text", "UTF-8 text"..."""
        encoding = "UTF-8" if self.encoding.startswith("utf-8") else self.encoding.upper()
        return ("gzip-compressed " if self.gzip else "") + f"{encoding} text"


def _encoding_of(head: bytes) -> str:
    """The text encoding of a file from its first bytes: UTF-16 or UTF-32 by their byte-order mark, UTF-16 without
    one when every other byte of mostly ASCII text is zero, else UTF-8 (a byte-order mark skipped)."""
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "utf-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "utf-16"
    sample = head[:4096 - 4096 % 2]
    if len(sample) >= 4:
        even, odd = sample[0::2], sample[1::2]
        if odd.count(0) > 0.9 * len(odd) and even.count(0) < 0.1 * len(even):
            return "utf-16-le"
        if even.count(0) > 0.9 * len(even) and odd.count(0) < 0.1 * len(odd):
            return "utf-16-be"
    return "utf-8-sig"


def detect_delimiter(path: str) -> str:
    """The delimiter of a CSV file: the one of DELIMITERS csv.Sniffer finds in its first 64 KiB, else ','."""
    source = CsvSource.of(path)
    with source.binary() as handle:
        sample = handle.read(SNIFF_BYTES)
    try:
        text = sample.decode(source.encoding)
    except UnicodeDecodeError as error:
        if error.start < len(sample) - 4:  # not a character cut off at the end of the sample
            raise CsvError(f"{path}: not {source.described} (byte {error.start}: {error.reason}); save it as UTF-8"
                           + (" (UTF-16 and gzip-compressed files are read too)" if source.encoding == "utf-8-sig"
                              else "")) from None
        text = sample[:error.start].decode(source.encoding)
    try:
        return csv.Sniffer().sniff(text, delimiters=DELIMITERS).delimiter
    except csv.Error:
        return ","


def read_header(path: str, delimiter: str) -> list[str]:
    """The header's cells as written. Raises CsvError naming line 1 when the file is empty, a name is empty
    or two names cannot be told apart (the same once surrounding spaces are dropped), or the first row looks
    like data."""
    with CsvSource.of(path).text() as handle:
        try:
            header = next(csv.reader(handle, delimiter=delimiter), None)
        except csv.Error as error:
            raise CsvError(f"{path}: line 1: {error}") from None
    if not header or header == [""]:
        raise CsvError(f"{path}: the file is empty (a header row and data rows expected)")
    names = [name.strip() for name in header]
    if "" in names:
        raise CsvError(f"{path}: line 1: the header has an empty column name (column {names.index('') + 1}); "
                       "the first row must name every column")
    numbers = [name for name in names if re.match(_FLOAT, name)]
    if len(numbers) > len(names) / 2:
        raise CsvError(f"{path}: line 1: the first row looks like data ({', '.join(names[:4])}...), not a header; "
                       "add a header row naming the columns")
    seen: dict[str, int] = {}
    for position, name in enumerate(names):
        if name in seen:
            first = seen[name]
            raise CsvError(f"{path}: line 1: the header repeats the column name(s) {name} (columns {first + 1} "
                           f"{header[first]!r} and {position + 1} {header[position]!r} cannot be told apart)")
        seen[name] = position
    return header


def _blocks(path: str, delimiter: str, header: list[str]):
    """The data rows in blocks: {column (the stripped header name): pyarrow array of its text cells}, in file
    order, pyarrow's blocks joined up to JOINED_ROWS rows or JOINED_BYTES. Raises CsvError naming the line of a
    row whose cell count differs from the header's, or of a row that repeats the header (two exports joined
    into one file)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    bad_rows = []

    def on_invalid_row(row):
        bad_rows.append(row)
        return "error"

    source = CsvSource.of(path)
    try:
        reader = pa_csv.open_csv(
            source.arrow(),
            read_options=pa_csv.ReadOptions(block_size=BLOCK_BYTES, encoding=(
                "utf8" if source.encoding == "utf-8-sig" else source.encoding)),
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, newlines_in_values=True, ignore_empty_lines=True,
                                              invalid_row_handler=on_invalid_row),
            convert_options=pa_csv.ConvertOptions(column_types={name: pa.string() for name in header},
                                                  strings_can_be_null=False, quoted_strings_can_be_null=False,
                                                  null_values=[], check_utf8=True))
        names = [name.strip() for name in header]
        rows, waiting, waiting_rows, waiting_bytes = 0, [], 0, 0
        for batch in reader:
            block = {name: batch.column(i) for i, name in enumerate(names)}
            repeated = _header_row(block)
            if repeated is not None:
                line = _line_of(path, delimiter, row_index=rows + repeated)
                raise CsvError(f"{path}: line {line} repeats the header row: two files joined into one? Prepare "
                               f"each as a span of its own (prepare-data --csv FILE --span N), or delete the "
                               f"repeated header lines")
            rows += batch.num_rows
            waiting.append(block)
            waiting_rows, waiting_bytes = waiting_rows + batch.num_rows, waiting_bytes + batch.nbytes
            if waiting_rows >= JOINED_ROWS or waiting_bytes >= JOINED_BYTES:
                yield _joined(waiting, names)
                waiting, waiting_rows, waiting_bytes = [], 0, 0
        if waiting:
            yield _joined(waiting, names)
    except UnicodeDecodeError as error:  # pyarrow decodes a text other than UTF-8 with Python's codec
        raise CsvError(f"{path}: not {source.described} (byte {error.start}: {error.reason}); save it as "
                       "UTF-8") from None
    except pa.ArrowInvalid as error:
        if bad_rows:
            row = bad_rows[0]
            line = _line_of(path, delimiter, row.text)
            raise CsvError(f"{path}: line {line}: {row.actual_columns} cells where the header names "
                           f"{row.expected_columns} columns") from None
        if "UTF8" in str(error) or "UTF-8" in str(error):
            raise CsvError(f"{path}: not {source.described} ({_first_line(error)}); save it as UTF-8") from None
        raise CsvError(f"{path}: {_first_line(error)}") from None


def _header_row(block: dict) -> int | None:
    """The index of the block's first row whose every cell is its column's name (trimmed), or None."""
    import pyarrow.compute as pc

    same = None
    for name, cells in block.items():
        matches = pc.equal(pc.utf8_trim_whitespace(cells), name)
        same = matches if same is None else pc.and_(same, matches)
    if same is None or not pc.any(same).as_py():
        return None
    return int(np.flatnonzero(same.to_numpy(zero_copy_only=False))[0])


def _first_line(error: Exception) -> str:
    return str(error).strip().splitlines()[0][:200]


def _line_of(path: str, delimiter: str, row_text: str | None = None, row_index: int | None = None) -> int | str:
    """The line a data row starts on, found again with Python's csv reader (only when reporting an error):
    the row whose raw text is `row_text` (as pyarrow reports a bad row: quotes, delimiters and line breaks of
    quoted cells included, so it is compared cell by cell), or the `row_index`-th data row (0-based, empty rows
    skipped)."""
    wanted = None
    if row_text is not None:
        wanted = next(csv.reader(io.StringIO(row_text.rstrip("\r\n"), newline=""), delimiter=delimiter), [])
    with CsvSource.of(path).text() as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        next(reader, None)
        index, start = 0, reader.line_num + 1
        for cells in reader:
            if cells:
                if wanted is not None and (cells == wanted or delimiter.join(cells) == row_text.rstrip("\r\n")):
                    return start
                if row_index is not None and index == row_index:
                    return start
                index += 1
            start = reader.line_num + 1
    return "?"


# ----------------------------------------------------------------------------------------- cell rules

@dataclasses.dataclass
class Unreadable:
    """Present cells of a column that its type does not read: how many, how many it does read, a few of them."""
    cells: int = 0
    readable: int = 0
    examples: list = dataclasses.field(default_factory=list)  # up to EXAMPLES distinct cells, in file order
    over: bool = False  # more than the file could ever hold few of: later blocks are not counted
    partial: bool = False  # ...and some were not: `cells` is a lower bound
    first_row: int = -1  # the data row (0-based, empty rows skipped) of the first, when the writing pass counts

    def add(self, cells, unread: np.ndarray) -> None:
        """Input: a block's present cells and which of them are not read."""
        count = int(unread.sum())
        self.cells += count
        self.readable += len(unread) - count
        if count and len(self.examples) < EXAMPLES:
            for position in np.flatnonzero(unread)[:8 * EXAMPLES]:
                cell = cells[int(position)].as_py()
                if cell not in self.examples and len(self.examples) < EXAMPLES:
                    self.examples.append(cell)

    def few(self, present: int) -> bool:
        """At most UNREADABLE_SHARE of `present` cells, so that the column keeps its type."""
        return self.cells <= UNREADABLE_SHARE * present

    def described(self) -> str:
        """"at least 40 of its cells ('n.a.', 'soon', ...)": how many, and the examples."""
        more = ", ..." if self.cells > len(self.examples) else ""
        examples = ", ".join(repr(cell) for cell in self.examples) + more
        return f"{'at least ' if self.partial else ''}{self.cells:,} of its cells ({examples})"


@dataclasses.dataclass
class ColumnState:
    """What the first pass has seen of one column."""
    kind: str = "int"  # int -> float -> string, widened as the readable cells require
    present: int = 0
    date_forms: tuple[str, ...] = tuple(DATE_FORMS)  # the date forms every readable date so far fits
    code_example: str = ""  # a cell with a leading zero, which made the column text
    unit: str = ""  # the unit (UNITS) the column's numbers carry, "" for none
    comma_numbers: bool = True  # every present cell a number only a decimal comma reads, or an integer
    comma_seen: bool = False  # ... and one of them has a decimal comma (or dots between thousands)
    dated: bool = True  # every present cell a date of some DATE_FORMS form (not necessarily one form)
    forms_seen: set = dataclasses.field(default_factory=set)  # the DATE_FORMS forms some cell has
    int_range: tuple[int, int] | None = None  # least and greatest value of an integer column
    # present cells no number reads (nor a code: a leading zero makes the column text), and cells that are a date
    # of none of date_forms: a column is read as numbers (dates) with them missing while they are few
    unreadable: Unreadable = dataclasses.field(default_factory=Unreadable)
    undated: Unreadable = dataclasses.field(default_factory=Unreadable)


def _missing_mask(cells, tokens: tuple[str, ...]):
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pc.equal(cells, "")
    if tokens:
        mask = pc.or_(mask, pc.is_in(pc.utf8_lower(cells), value_set=pa.array(tokens)))
    return mask


def _number_text(cells, delimiter: str, decimal: str = ".", unit: str = ""):
    """Input: present text cells, the file's delimiter, the decimal mark ("." or ","), and the unit the
    column's numbers carry ("" or one of UNITS; optional in each cell). Output: (each cell as plain number
    text: unit and thousands separators dropped, "." as the decimal mark; is an integer; is a number).
    Thousands separators count in a comma-delimited file or beside a currency symbol (`"1,234.5"`,
    `$1,234.50`), and always with a decimal comma (`1.466,14`)."""
    import pyarrow.compute as pc

    if unit:
        symbol = re.escape(unit)
        cells = pc.replace_substring_regex(cells, rf"^([+-]?)\s*{symbol}?\s*(.*?)\s*{symbol}?$", r"\1\2")
    if decimal == ",":
        thousands = pc.match_substring_regex(cells, _THOUSANDS_DOT)
        is_number = pc.or_(pc.match_substring_regex(cells, _FLOAT_COMMA), thousands)
        is_int = pc.or_(pc.match_substring_regex(cells, _INT), pc.and_(thousands, pc.invert(
            pc.match_substring(cells, ","))))
        plain = pc.replace_substring(pc.replace_substring(cells, ".", ""), ",", ".")
        return plain, is_int, is_number
    is_int = pc.match_substring_regex(cells, _INT)
    is_number = pc.match_substring_regex(cells, _FLOAT)
    if delimiter == "," or unit not in ("", "%"):
        thousands = pc.match_substring_regex(cells, _THOUSANDS)
        is_number = pc.or_(is_number, thousands)
        is_int = pc.or_(is_int, pc.and_(thousands, pc.invert(pc.match_substring(cells, "."))))
        return pc.replace_substring(cells, ",", ""), is_int, is_number
    return cells, is_int, is_number


def _unit_of(cells) -> str | None:
    """The one unit of UNITS the cells hold ("" for none), or None when they hold several."""
    import pyarrow.compute as pc

    if not pc.any(pc.match_substring_regex(cells, "[" + "".join(map(re.escape, UNITS)) + "]")).as_py():
        return ""
    found = [unit for unit in UNITS if pc.any(pc.match_substring(cells, unit)).as_py()]
    return None if len(found) > 1 else found[0]


def parse_dates(cells, form: str) -> tuple[np.ndarray, np.ndarray]:
    """Input: text cells (a pyarrow string array) and a date form (a DATE_FORMS name, UNIX_SECONDS, or a
    strptime format). Output: (int64 seconds since 1970-01-01 UTC, True where the cell is a valid date of that
    form)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if form == UNIX_SECONDS:
        valid = pc.match_substring_regex(cells, _INT).to_numpy(zero_copy_only=False)
        try:
            seconds = pc.cast(pc.if_else(pc.match_substring_regex(cells, _INT), cells, "0"), pa.int64())
        except Exception:  # noqa: BLE001 - beyond int64: not a time
            return np.zeros(len(cells), np.int64), np.zeros(len(cells), bool)
        return seconds.to_numpy(zero_copy_only=False).astype(np.int64), valid
    if form not in DATE_FORMS:
        parsed = pc.strptime(cells, format=form, unit="s", error_is_null=True)
        valid = pc.is_valid(parsed).to_numpy(zero_copy_only=False)
        seconds = pc.cast(parsed, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return seconds.astype(np.int64), valid
    parts = pc.extract_regex(cells, DATE_FORMS[form])
    matched = pc.is_valid(parts).to_numpy(zero_copy_only=False)
    if not matched.any():  # no cell of this shape (a number column's cells): nothing to read
        return np.zeros(len(cells), np.int64), matched

    def number(field: str) -> np.ndarray:
        if field not in [parts.type.field(i).name for i in range(parts.type.num_fields)]:
            return np.zeros(len(cells), np.int64)
        text = pc.fill_null(parts.field(field), "")
        text = pc.if_else(pc.equal(text, ""), "0", text)
        return pc.cast(text, pa.int64()).to_numpy(zero_copy_only=False)

    year, month, day = number("y"), number("m"), number("d")
    hour, minute, second = number("H"), number("M"), number("S")
    valid = matched & (month >= 1) & (month <= 12) & (day >= 1) & (hour < 24) & (minute < 60) & (second < 61)
    valid &= day <= _days_in_month(year, np.clip(month, 1, 12))
    offset = np.zeros(len(cells), np.int64)
    if form == "iso":
        zone = pc.fill_null(parts.field("z"), "").to_numpy(zero_copy_only=False)
        for position in np.flatnonzero([bool(z) and z != "Z" for z in zone]):
            text = zone[position].replace(":", "")
            sign = -1 if text[0] == "-" else 1
            offset[position] = sign * (int(text[1:3]) * 3600 + (int(text[3:5]) * 60 if len(text) > 3 else 0))
    seconds = days_from_civil(year, np.clip(month, 1, 12), day) * 86400 + hour * 3600 + minute * 60 + second - offset
    return np.where(valid, seconds, 0).astype(np.int64), valid


def days_from_civil(year: np.ndarray, month: np.ndarray, day: np.ndarray) -> np.ndarray:
    """Days since 1970-01-01 of proleptic Gregorian dates (H. Hinnant's days_from_civil), vectorized."""
    year = np.asarray(year, np.int64) - (np.asarray(month) <= 2)
    era = np.floor_divide(year, 400)
    year_of_era = year - era * 400
    day_of_year = (153 * np.where(month > 2, month - 3, month + 9) + 2) // 5 + np.asarray(day, np.int64) - 1
    day_of_era = year_of_era * 365 + year_of_era // 4 - year_of_era // 100 + day_of_year
    return era * 146097 + day_of_era - 719468


def _days_in_month(year: np.ndarray, month: np.ndarray) -> np.ndarray:
    leap = ((year % 4 == 0) & (year % 100 != 0)) | (year % 400 == 0)
    lengths = np.array([0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31])
    return lengths[month] + ((month == 2) & leap)


def _note_block(state: ColumnState, cells, delimiter: str, date_format: str | None, decimal: str = ".",
                limit: float = float("inf")) -> None:
    """Widens a column's kind and narrows its date forms and unit by one block of its present cells. Cells no
    number (date) reads are counted, not widened on; `limit`: the most such cells the column may have and still
    be read as numbers (dates), UNREADABLE_SHARE of the file's lines: past it, they are no longer counted."""
    import pyarrow.compute as pc

    if not len(cells):
        return
    state.present += len(cells)
    _note_dates(state, cells, date_format)
    state.undated.over |= state.undated.cells > limit
    unread = False
    state.unreadable.partial |= state.unreadable.over
    if state.kind != "string" and not state.unreadable.over:
        unread = _note_numbers(state, cells, delimiter, decimal)
        state.unreadable.over |= state.unreadable.cells > limit
    if decimal == "." and state.comma_numbers and (state.kind != "int" or unread or state.unreadable.over):
        comma = pc.match_substring_regex(cells, _COMMA_NUMBER)  # text: numbers with a decimal comma?
        state.comma_numbers = pc.all(pc.or_(comma, pc.match_substring_regex(cells, _INT))).as_py()
        state.comma_seen |= pc.any(comma).as_py()


def _note_dates(state: ColumnState, cells, date_format: str | None) -> None:
    """Narrows a column's date forms to those every readable date of the block fits (a cell no form reads is
    counted in `undated`), and notes which forms the cells have at all."""
    import pyarrow.compute as pc

    counting = bool(state.date_forms) and not state.undated.over
    state.undated.partial |= state.undated.over
    if date_format is not None:
        if counting:
            state.date_forms = (date_format,)
            state.undated.add(cells, ~parse_dates(cells, date_format)[1])
        return
    if not counting and not state.dated:
        return
    if not pc.any(pc.match_substring_regex(cells, _DATE_SHAPE)).as_py():  # a block without a date
        state.dated = False
        if counting:
            state.undated.add(cells, np.ones(len(cells), bool))
        return
    fits = {form: parse_dates(cells, form)[1] for form in state.date_forms} if counting else {}
    if fits:
        readable = np.logical_or.reduce(list(fits.values()))
        state.date_forms = tuple(form for form in state.date_forms if fits[form][readable].all())
        state.undated.add(cells, ~readable)
    if state.dated:  # which forms the cells have at all (a match of the form's shape is enough here)
        fits.update({form: pc.match_substring_regex(cells, DATE_FORMS[form]).to_numpy(zero_copy_only=False)
                     for form in DATE_FORMS if form not in fits})
        state.forms_seen |= {form for form, valid in fits.items() if valid.any()}
        state.dated = bool(np.logical_or.reduce(list(fits.values())).all())


def _note_numbers(state: ColumnState, cells, delimiter: str, decimal: str) -> bool:
    """Widens a column that is a number so far (int, then float, else string) by one block of present cells,
    counting the cells no number reads (`unreadable`) apart; notes its unit and an integer column's range. A
    cell with a leading zero (a code), two units or an integer beyond int64 make the column text. Output: whether
    the block held a cell no number reads."""
    import pyarrow.compute as pc

    unit = _unit_of(cells)
    if unit is None or (unit and state.unit and unit != state.unit):
        state.kind = "string"
        return False
    state.unit = state.unit or unit
    plain, is_int, is_number = _number_text(cells, delimiter, decimal, state.unit)
    unread = not pc.all(is_number).as_py()
    if unread:
        codes = pc.filter(cells, pc.match_substring_regex(cells, _CODE))
        if len(codes):
            state.code_example = state.code_example or codes[0].as_py()
            state.kind = "string"
            return True
        state.unreadable.add(cells, ~is_number.to_numpy(zero_copy_only=False))
        if not pc.any(is_number).as_py():
            return True
        plain, is_int = pc.filter(plain, is_number), pc.filter(is_int, is_number)
    else:
        state.unreadable.readable += len(cells)
    if state.kind == "int" and not pc.all(is_int).as_py():
        state.kind = "float"
    elif state.kind == "int":
        try:
            values = pc.cast(plain, "int64")
        except Exception:  # noqa: BLE001 - pyarrow's overflow error: an id too long for int64
            state.kind = "string"  # as a float it would lose digits
            return unread
        extremes = pc.min_max(values)
        least, greatest = extremes["min"].as_py(), extremes["max"].as_py()
        low, high = state.int_range or (least, greatest)
        state.int_range = (min(low, least), max(high, greatest))
    return unread


def _dates_read(state: ColumnState) -> bool:
    """Whether the column's present cells are dates of its date forms, but for at most UNREADABLE_SHARE of them."""
    return bool(state.present and state.undated.readable and not state.undated.over
                and state.undated.few(state.present))


def _decide(state: ColumnState) -> tuple[str, str]:
    """(kind, date form) of a column from what the first pass saw; dates win over text. A column whose cells no
    number (date) reads are more than UNREADABLE_SHARE of its present cells is text. Day-first and
    month-first both fitting means no cell told which: the column stays text (see infer_types' notes)."""
    forms = state.date_forms if _dates_read(state) else ()
    if UNIX_SECONDS in forms:
        return "date", UNIX_SECONDS
    for form in ("iso", "ymd"):
        if form in forms:
            return "date", form
    if len(forms) == 1:
        return "date", forms[0]
    if not state.present or (state.kind in ("int", "float") and (state.unreadable.over
                                                                 or not state.unreadable.few(state.present))):
        return "string", ""
    return state.kind, ""


def _line_bound(path: str) -> int:
    """At least as many as the file's data rows: the line breaks in its (decompressed) bytes, plus one."""
    lines = 1
    with CsvSource.of(path).binary() as handle:
        while chunk := handle.read(1 << 24):
            lines += chunk.count(b"\n")
    return lines


# ----------------------------------------------------------------------------------------- the two passes

@dataclasses.dataclass
class ColumnTypes:
    """Each column's type and, for dates, its form, for numbers their unit; the columns with no value; the
    decimal mark: what the first span fixes for the later ones."""
    types: dict[str, str]
    date_forms: dict[str, str]
    units: dict[str, str] = dataclasses.field(default_factory=dict)  # number column -> its unit (UNITS)
    empty: list[str] = dataclasses.field(default_factory=list)  # no value in any row: a later span infers them
    decimal: str = "."

    def to_json(self) -> dict:
        return {"types": self.types, "date_forms": self.date_forms, "units": self.units, "empty": self.empty,
                "decimal": self.decimal}

    @classmethod
    def from_json(cls, value: dict) -> "ColumnTypes":
        return cls(dict(value["types"]), dict(value.get("date_forms", {})), dict(value.get("units", {})),
                   list(value.get("empty", [])), value.get("decimal", "."))


def _joined(blocks: list[dict], names: list[str]) -> dict:
    """Consecutive blocks as one: each column's cells in file order."""
    import pyarrow as pa

    if len(blocks) == 1:
        return blocks[0]
    return {name: pa.concat_arrays([block[name] for block in blocks]) for name in names}


def infer_types(path: str, delimiter: str, header: list[str], missing_tokens: tuple[str, ...],
                date_formats: dict[str, str], decimal: str = ".") -> tuple[ColumnTypes, list[str]]:
    """The first pass. Output: each column's type, date form and unit, and notes on the text columns that
    may be meant otherwise: dates whose day and month order no cell tells, dates of several forms, numbers
    written with a decimal comma; and on integer columns that look like Unix seconds. Each note names the
    option that reads the column."""
    import datetime

    import pyarrow.compute as pc

    columns = [name.strip() for name in header]
    states = {column: ColumnState() for column in columns}
    rows, limit = 0, UNREADABLE_SHARE * _line_bound(path)
    for block in _blocks(path, delimiter, header):
        for column in columns:
            _refuse_nul(path, delimiter, column, block[column], rows)
            cells = pc.utf8_trim_whitespace(block[column])
            present = pc.filter(cells, pc.invert(_missing_mask(cells, missing_tokens)))
            _note_block(states[column], present, delimiter, date_formats.get(column), decimal, limit)
        rows += len(block[columns[0]])
    decided = {column: _decide(state) for column, state in states.items()}
    text = {column: state for column, state in states.items() if decided[column][0] == "string" and state.present}
    notes = _unread_notes(text)
    notes += [f"column {column!r} looks like dates, but no cell says whether the day or the month comes first; it "
             f"was kept as text (give --date-format '{column}=%d/%m/%Y' or '{column}=%m/%d/%Y' to read it as dates)"
             for column, state in text.items() if {"dmy", "mdy"} <= set(state.date_forms) and _dates_read(state)]
    notes += [f"column {column!r} holds dates of several forms "
              f"({', '.join(DATE_FORM_NAMES[form] for form in DATE_FORMS if form in state.forms_seen)}); it was "
              "kept as text: write every date of the column in one form (2024-01-05, say) to read them as dates"
              for column, state in text.items()
              if state.dated and not state.date_forms and len(state.forms_seen) > 1 and column not in date_formats]
    commas = [column for column, state in text.items() if state.comma_numbers and state.comma_seen]
    if commas:
        names = ", ".join(repr(column) for column in commas)
        notes.append(f"column{'s' if len(commas) > 1 else ''} {names} look{'' if len(commas) > 1 else 's'} like "
                     "numbers written with a decimal comma (4,5 or 1.466,14) and "
                     f"{'were' if len(commas) > 1 else 'was'} kept as text: give --decimal , to read them as numbers")
    for column, state in states.items():
        low, high = state.int_range or (0, 0)
        if decided[column][0] == "int" and PLAUSIBLE_SECONDS[0] <= low <= high <= PLAUSIBLE_SECONDS[1] and low < high:
            first, last = (datetime.datetime.fromtimestamp(value, datetime.timezone.utc).date()
                           for value in (low, high))
            notes.append(f"column {column!r} looks like Unix seconds ({first} to {last}) and was written as an "
                         f"integer: give --dates {column} to read it as a date")
    empty = [column for column, state in states.items() if not state.present]
    return ColumnTypes({c: kind for c, (kind, _) in decided.items()},
                       {c: form for c, (kind, form) in decided.items() if kind == "date"},
                       {c: states[c].unit for c, (kind, _) in decided.items() if kind in ("int", "float")
                        and states[c].unit}, empty, decimal), notes


def _unread_notes(text: dict[str, ColumnState]) -> list[str]:
    """Notes on the text columns whose cells are mostly numbers or dates, but more than UNREADABLE_SHARE of them
    are not (and none has a leading zero): which cells, and how to have the column read."""
    notes = []
    share = f"{UNREADABLE_SHARE:.0%}"
    for column, state in text.items():
        if len(state.date_forms) == 1 and state.undated.cells and state.undated.readable > state.undated.cells:
            what, unread = "dates", state.undated
        elif state.kind != "string" and state.unreadable.readable > state.unreadable.cells:
            what, unread = "numbers", state.unreadable
        else:
            continue
        notes.append(f"column {column!r} was kept as text: {unread.described()} are not {what}, more than the "
                     f"{share} of a column that prepare-data reads as missing; correct them, or give --na with those "
                     f"that mean a missing value, to read the column as {what}")
    return notes


def _refuse_nul(path: str, delimiter: str, column: str, cells, rows_before: int) -> None:
    """CsvError naming the line and column of the block's first cell that holds a NUL character (no text holds
    one: the file is binary, or text in an encoding that was not recognized)."""
    import pyarrow.compute as pc

    held = pc.match_substring(cells, "\x00")
    if not pc.any(held).as_py():
        return
    row = int(np.flatnonzero(held.to_numpy(zero_copy_only=False))[0])
    line = _line_of(path, delimiter, row_index=rows_before + row)
    raise CsvError(f"{path}: line {line}: column {column!r} holds a NUL character (byte 0) in "
                   f"{cells[row].as_py()!r}, which no text holds: a binary file, or text in an encoding other than "
                   "UTF-8 or UTF-16? Remove it, or save the file as UTF-8 text")


class Typed(typing.NamedTuple):
    """One block of a column in its type: `values` (a pyarrow list array, one value per row: a placeholder where
    the cell is missing or unread), `bad` (the row of the first cell that does not fit, or -1), `wanted` (what that
    cell should have been, when not simply the column's type) and `unread` (the present cells no number or date
    reads, written as missing values while they are few: UNREADABLE_SHARE)."""
    values: object
    bad: int
    wanted: str
    unread: np.ndarray


def _typed(column: str, kind: str, form: str, cells, missing, delimiter: str, decimal: str = ".",
           unit: str = "") -> Typed:
    """One block of a column as the tf.Example encoder takes it (Typed), numbers read with the decimal mark and
    unit given. A number that an integer column cannot hold (7.5), or a date outside DATE_RANGE, does not fit; a
    cell that is no number (no date of the column's form) at all is unread."""
    import pyarrow as pa
    import pyarrow.compute as pc

    present = ~missing.to_numpy(zero_copy_only=False)
    filled = pc.if_else(missing, _PLACEHOLDER[kind], cells)
    fits, unread, wanted = np.ones(len(cells), bool), np.zeros(len(cells), bool), ""
    if kind == "string":
        values = pc.cast(filled, pa.binary())
    elif kind == "date":
        seconds, valid = parse_dates(filled, form)
        unread = present & ~valid
        fits = ~(valid & present & ((seconds < DATE_RANGE[0]) | (seconds > DATE_RANGE[1])))
        values = pa.array(np.where(fits & ~unread, seconds, 0), pa.int64())
        wanted = (f"a date the model reads ({DATE_RANGE_TEXT})"
                  + (" (Unix seconds, not milliseconds)" if form == UNIX_SECONDS else ""))
    else:
        plain, is_int, is_number = _number_text(filled, delimiter, decimal, unit)
        number = is_number.to_numpy(zero_copy_only=False)
        unread = present & ~number
        if kind == "float":
            values = pc.cast(pc.cast(pc.if_else(is_number, plain, "0"), pa.float64()), pa.float32())
        else:  # int: an integer, or a number with no fraction (3.0); any other number does not fit
            as_float = pc.cast(pc.if_else(is_number, plain, "0"), pa.float64()).to_numpy(zero_copy_only=False)
            fits = ~present | ~number | (np.floor(as_float) == as_float)
            whole = pc.if_else(is_int, plain, "0")
            try:
                values = pc.cast(whole, pa.int64()).to_numpy(zero_copy_only=False)
            except Exception:  # noqa: BLE001 - beyond int64
                fits, unread = ~present, np.zeros(len(cells), bool)
                values = np.zeros(len(cells), np.int64)
            values = pa.array(np.where(is_int.to_numpy(zero_copy_only=False), values,
                                       as_float.astype(np.int64, copy=False)), pa.int64())
    bad = int(np.argmin(fits)) if not fits.all() else -1
    offsets = pa.array(np.arange(len(cells) + 1, dtype=np.int32))
    return Typed(pa.ListArray.from_arrays(offsets, values), bad, wanted if bad >= 0 else "", unread)


_PLACEHOLDER = {"int": "0", "float": "0", "string": "", "date": "1970-01-01"}
_KIND_TEXT = {"int": "an integer", "float": "a number", "date": "a date", "string": "text"}


def _serialize(lists: dict, present: np.ndarray) -> list[bytes]:
    """Input: column -> list array of one block (one value per row), and the rows x columns presence matrix.
    Output: each row's serialized tf.Example holding only its present columns (rows grouped by which columns
    they hold, each group encoded at once by tfx-bsl's encoder), in canonical form (canonical_examples: equal
    rows give equal bytes, so ingestion's hash splits the same CSV the same way every time)."""
    import pyarrow as pa
    from tfx_bsl.coders.example_coder import RecordBatchToExamples

    from pipeline.onboarding.canonical_examples import canonical

    names = list(lists)
    patterns, group_of_row = np.unique(present, axis=0, return_inverse=True)
    records: list[bytes] = [b""] * len(present)
    for group, pattern in enumerate(patterns):
        rows = np.flatnonzero(group_of_row.reshape(-1) == group)
        kept = [name for name, keep in zip(names, pattern) if keep]
        indices = pa.array(rows)
        batch = pa.RecordBatch.from_arrays([lists[name].take(indices) for name in kept], kept)
        for row, record in zip(rows, canonical(RecordBatchToExamples(batch))):
            records[row] = record
    return records


class _ShardWriter:
    """Gzip TFRecord files written without TensorFlow (TFRecord framing: length, masked CRC-32C of the
    length, data, masked CRC-32C of the data); a URI is written through tf.io.gfile."""

    def __init__(self, path: str):
        if "://" in path:
            import tensorflow as tf
            self._raw = tf.io.gfile.GFile(path, "wb")
        else:
            self._raw = open(path, "wb")
        self._file = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6, mtime=0)
        self.path, self.records = path, 0

    def write(self, record: bytes) -> None:
        self.records += 1
        length = struct.pack("<Q", len(record))
        self._file.write(length + struct.pack("<I", _masked_crc(length)) + record
                         + struct.pack("<I", _masked_crc(record)))

    def close(self) -> None:
        self._file.close()
        self._raw.close()


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_record(data_root: str) -> dict | None:
    """COLUMNS_FILE of a data root: the first span's number and columns, each column's type, date form and
    unit, the empty columns, the decimal mark, and the label `init` chose; None when there is none."""
    files = file_system(data_root)
    record = os.path.join(data_root, COLUMNS_FILE)
    if not files.exists(record):
        return None
    with files.open(record) as handle:
        return json.loads(handle.read())


def _schema_types(schema_path: str) -> ColumnTypes:
    """Column types from a TFDV schema: INT (a time domain: a date), FLOAT, BYTES."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    try:
        with open(schema_path, encoding="utf-8") as handle:
            schema = text_format.Parse(handle.read(), schema_pb2.Schema())
    except (OSError, text_format.ParseError) as error:
        raise CsvError(f"--schema {schema_path}: {error}") from None
    types, forms = {}, {}
    for feature in schema.feature:
        if feature.type == schema_pb2.INT and feature.HasField("time_domain"):
            types[feature.name] = "date"
            if feature.time_domain.string_format:
                forms[feature.name] = feature.time_domain.string_format
        else:
            types[feature.name] = {schema_pb2.INT: "int", schema_pb2.FLOAT: "float"}.get(feature.type, "string")
    return ColumnTypes(types, forms)


def write_csv_span(path: str, data_root: str, span: int = 1, delimiter: str | None = None,
                   missing_tokens: tuple[str, ...] = MISSING_TOKENS, required: tuple[str, ...] = (),
                   date_formats: dict[str, str] | None = None, schema_path: str | None = None,
                   decimal: str | None = None, dates: tuple[str, ...] = ()) -> CsvSummary:
    """Input: a CSV file, a data root, the span number (1 or more), the delimiter (None: detected), the cell
    values that mean "missing" (compared without case), columns a row must have a value in, strptime formats
    for date columns (column -> format), a curated schema whose types the span takes, the decimal mark ("."
    or ","; None: the data root's, else "."), and integer columns of Unix seconds to read as dates. Output:
    what was written to <data_root>/span-<span>/data-0000i-of-00004.tfrecord.gz. Raises CsvError naming the
    file and line, or the column (nothing is written then)."""
    if span < 1:
        raise CsvError(f"--span {span}: span numbers start at 1")
    if not os.path.isfile(path):
        raise CsvError(f"{path}: no such file")
    if os.path.exists(data_root) and not os.path.isdir(data_root):
        raise CsvError(f"--data {data_root}: a file; --data names the folder the spans are written into")
    if decimal not in (None, ".", ","):
        raise CsvError(f"--decimal {decimal!r}: the decimal mark is '.' or ','")
    date_formats = dict(date_formats or {})
    for column in dates:
        if column in date_formats:
            raise CsvError(f"--dates {column} and --date-format {column}=...: give one of them")
        date_formats[column] = UNIX_SECONDS
    missing_tokens = tuple(token.lower() for token in missing_tokens)
    record = read_record(data_root)
    span_dir = os.path.join(data_root, f"span-{span}")
    others = [name for name in _span_names(data_root) if name != f"span-{span}"]
    reinfer = record is not None and record.get("span") == span and not others and not schema_path
    label = (record or {}).get("label", "")
    decimal = decimal or (record or {}).get("decimal") or "."
    delimiter = delimiter or detect_delimiter(path)
    header = read_header(path, delimiter)
    columns = [name.strip() for name in header]
    for option, names in (("--require", required), ("--date-format", [c for c in date_formats if c not in dates]),
                          ("--dates", dates)):
        for name in names:
            if name not in columns:
                raise CsvError(f"{path}: {option} names the column {name!r}, which the header does not have "
                               f"(columns: {', '.join(columns)})")
    fixing = None if reinfer else record
    if fixing is not None:
        _check_columns(path, columns, fixing, data_root)
    _check_span_folder(span_dir)
    if label and label in columns and label not in required:
        required = (*required, label)
    types, fixed, fixed_by, notes = column_types(path, delimiter, header, data_root, schema_path, missing_tokens,
                                                 date_formats, fixing, decimal)
    notes = _span_notes(columns, fixing, fixed_by, span, data_root, reinfer) + notes
    filled = [column for column in (fixing or {}).get("empty", []) if column in columns and column not in types.empty]
    if filled:
        notes.append(f"column(s) {', '.join(map(repr, filled))}, empty until now, hold values in this span (typed "
                     f"{', '.join(types.types[column] for column in filled)}): the model leaves them out until init "
                     "is run again or the schema lists them")
    why = (f"no value for the label {label!r}" if label and required == (label,) else
           f"a missing value in a required column ({', '.join(map(repr, required))})")
    span_dir, rows, skipped, empty, missing_counts, unread = _write_span(
        path, delimiter, header, data_root, span, types, missing_tokens, required, fixed_by, why)
    _record_types(data_root, span, types, fixing, columns, label, missing_tokens)
    return CsvSummary(span_dir, rows, skipped, empty, delimiter, types.types, missing_counts, types.date_forms,
                      fixed_by, notes + unread_notes(unread), types.units, types.empty, tuple(required), label,
                      decimal)


def unread_notes(unread: dict[str, dict], span: str = "") -> list[str]:
    """Input: a span's cells no number or date read, column -> {cells, examples, expected} (the span note's
    `unread`), and the span's name to say. Output: a note per column: how many, a few of them, and what to do."""
    notes = []
    for column, held in unread.items():
        count, examples = held["cells"], ", ".join(repr(cell) for cell in held["examples"])
        more = ", ..." if count > len(held["examples"]) else ""
        cells, verb = ("1 cell", "is") if count == 1 else (f"{count:,} cells", "are")
        notes.append(f"column {column!r}: {cells}{f' of {span}' if span else ''} ({examples}{more}) {verb} not "
                     f"{held['expected']}: written as missing values (up to {UNREADABLE_SHARE:.0%} of a column's cells "
                     "may be); correct them and prepare the span again, or give --na with those that mean missing")
    return notes


def _span_names(data_root: str) -> list[str]:
    """The span-N folders of a data root (none when it does not exist)."""
    files = file_system(data_root)
    if not files.isdir(data_root):
        return []
    return sorted(name.rstrip("/") for name in files.listdir(data_root)
                  if re.fullmatch(r"span-[0-9]+", name.rstrip("/")))


def _check_columns(path: str, columns: list[str], record: dict, data_root: str) -> None:
    """CsvError naming the columns of the first span that the header lacks (removed, or renamed: the new
    names are given too)."""
    first = record.get("columns")
    if not first:
        return  # a record from before the first span's columns were kept
    lacking = [column for column in first if column not in columns]
    if not lacking:
        return
    new = [column for column in columns if column not in record.get("types", {})]
    renamed = f"; it has new column(s) {', '.join(map(repr, new))}: renamed?" if new else ""
    raise CsvError(f"{path}: the header lacks the column(s) {', '.join(map(repr, lacking))} that "
                   f"span-{record.get('span', 1)} has{renamed} A later span keeps the first span's columns: name "
                   f"them as it does (a column may be empty: its cells are then missing values), or prepare the "
                   f"table into a new data root and run init on it (the columns are kept in "
                   f"{os.path.join(data_root, COLUMNS_FILE)})")


def _check_span_folder(span_dir: str) -> None:
    """CsvError when an existing span folder holds data files prepare-data did not write (replacing the span
    would remove them)."""
    files = file_system(span_dir)
    if not files.isdir(span_dir):
        return
    foreign = sorted(name for name in files.listdir(span_dir) if not name.startswith((".", "_"))
                     and not re.fullmatch(r"data-[0-9]{5}-of-[0-9]{5}\.tfrecord\.gz", name.rstrip("/")))
    if foreign:
        raise CsvError(f"{span_dir} holds files prepare-data did not write ({', '.join(foreign[:5])}); writing the "
                       "span replaces the folder: move them, or give another --span")


def _span_notes(columns: list[str], record: dict | None, fixed_by: str, span: int, data_root: str,
                reinfer: bool) -> list[str]:
    """Notes on the span's columns against the data root's record: types inferred again, how to reset them,
    columns new in this span, columns a later span added that this one lacks."""
    record_path = os.path.join(data_root, COLUMNS_FILE)
    if reinfer:
        return [f"column types inferred again: span-{span} is the data root's only span (the types it fixed "
                f"before are replaced in {record_path})"]
    if record is None:
        return []
    notes = []
    if record.get("span") == span and fixed_by.startswith("span-"):
        notes.append(f"span-{span} fixed these column types before and other spans were written with them; to "
                     f"infer them again, delete {record_path} and prepare every span again, from span 1")
    first = record.get("columns") or list(record.get("types", {}))
    new = [column for column in columns if column not in first]
    if new:
        notes.append(f"column(s) new in this span: {', '.join(map(repr, new))} (not in span-{record.get('span', 1)}): "
                     "the model leaves them out until init is run again or the schema lists them")
    dropped = [column for column in record.get("types", {}) if column not in first and column not in columns]
    if dropped and record.get("columns"):
        notes.append(f"column(s) {', '.join(map(repr, dropped))}, which a later span added, are not in this file")
    return notes


def column_types(path: str, delimiter: str, header: list[str], data_root: str, schema_path: str | None,
                 missing_tokens: tuple[str, ...], date_formats: dict[str, str], record: dict | None = None,
                 decimal: str = ".") -> tuple[ColumnTypes, ColumnTypes | None, str, list[str]]:
    """The first pass, and the types an earlier span (`record`, COLUMNS_FILE's content) or a schema fixed
    over it; a column the record holds as empty takes the type its cells have now. Output: (the types the span
    is written with, the fixed ones or None, where they came from, notes on columns the types do not read as
    they may be meant)."""
    columns = [name.strip() for name in header]
    recorded = ColumnTypes.from_json(record) if record else None
    if schema_path:
        fixed, fixed_by = _schema_types(schema_path), f"the schema {schema_path}"
    elif recorded is not None:
        fixed, fixed_by = recorded, f"span-{record.get('span', 1)} ({os.path.join(data_root, COLUMNS_FILE)})"
    else:
        fixed, fixed_by = None, ""
    recorded_forms = recorded.date_forms if recorded else {}
    inferred, notes = infer_types(path, delimiter, header, missing_tokens, date_formats, decimal)
    types = ColumnTypes(dict(inferred.types), dict(inferred.date_forms), dict(inferred.units), list(inferred.empty),
                        decimal)
    if fixed is None:
        return types, None, "", notes
    held = {column for column in columns if column in fixed.types and column not in fixed.empty}
    for column in held:
        types.types[column] = fixed.types[column]
        if fixed.types[column] == "date":
            types.date_forms[column] = (date_formats.get(column) or fixed.date_forms.get(column)
                                        or recorded_forms.get(column) or inferred.date_forms.get(column) or "iso")
        else:
            types.date_forms.pop(column, None)
        unit = fixed.units.get(column) or (recorded.units.get(column) if recorded else "") or inferred.units.get(column)
        if fixed.types[column] in ("int", "float") and unit:
            types.units[column] = unit
        else:
            types.units.pop(column, None)
    return types, fixed, fixed_by, [note for note in notes if not any(repr(c) in note for c in held)]


def _write_span(path: str, delimiter: str, header: list[str], data_root: str, span: int, types: ColumnTypes,
                missing_tokens: tuple[str, ...], required: tuple[str, ...], fixed_by: str, why: str = ""
                ) -> tuple[str, int, int, int, dict[str, int], dict[str, dict]]:
    """The second pass: every block written into a hidden folder beside the span (`.span-N.partial`), with the
    span's note (SPAN_NOTE_FILE: the CSV, the rows written, left out and why), which replaces the span folder
    only when every row was read and every file closed; on any error (a full disk included) the hidden
    folder, and the data root when this call created it, are removed and an existing span is untouched.
    Output: (span folder, rows written, rows left out for a required cell, empty rows skipped, missing cells
    per column, the cells no number or date read per column: {cells, examples, expected})."""
    columns = [name.strip() for name in header]
    span_dir = os.path.join(data_root, f"span-{span}")
    staging = os.path.join(data_root, f".span-{span}.partial")  # hidden, and no span-N name: never read
    files = file_system(data_root)
    created_root = not files.exists(data_root)
    writers: list[_ShardWriter] = []
    missing_counts = dict.fromkeys(columns, 0)
    unread: dict[str, Unreadable] = {}
    rows = skipped = empty = data_rows = 0
    try:
        _remove_quietly(files, staging)  # what a killed write left
        files.makedirs(staging)
        writers = [_ShardWriter(os.path.join(staging, f"data-{i:05d}-of-{SHARDS:05d}.tfrecord.gz"))
                   for i in range(SHARDS)]
        for block in _blocks(path, delimiter, header):
            rows_written, skipped_here, empty_here = _write_block(
                path, delimiter, block, columns, types, missing_tokens, set(required), writers, rows,
                missing_counts, data_rows, fixed_by, unread)
            data_rows += len(block[columns[0]])
            rows += rows_written
            skipped += skipped_here
            empty += empty_here
        if not rows:
            raise CsvError(f"{path}: no data rows" + (" (only a header)" if not data_rows else
                                                      f" ({data_rows:,} row(s), every one empty or left out)"))
        unread_cells = _check_unread(path, delimiter, types, unread, fixed_by)
        while writers:
            writer = writers.pop(0)
            writer.close()
            if not writer.records:  # fewer rows than shards: ingestion refuses a file without records
                files.remove(writer.path)
        left_out = [{"rows": skipped, "why": why}] if skipped else []
        _write_json(files, os.path.join(staging, SPAN_NOTE_FILE), {
            "csv": os.path.abspath(path), "rows": rows, "left_out": left_out, "empty_rows": empty,
            **({"unread": unread_cells} if unread_cells else {})})
        _publish(files, staging, span_dir)
    except BaseException:
        for writer in writers:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - a full disk fails the close too; the folder goes anyway
                pass
        _remove_quietly(files, staging)
        if created_root:
            _remove_quietly(files, data_root)
        raise
    return span_dir, rows, skipped, empty, missing_counts, unread_cells


def _publish(files, staging: str, span_dir: str) -> None:
    """Puts a completely written span folder in place of `span_dir`: a rename of the folder (a local path),
    or of each file (an object store, where folders cannot be renamed); an existing span is moved aside first
    and removed after."""
    if "://" in span_dir:
        files.makedirs(span_dir)
        for name in files.listdir(staging):
            files.rename(os.path.join(staging, name.rstrip("/")), os.path.join(span_dir, name.rstrip("/")))
        _remove_quietly(files, staging)
        return
    replaced = os.path.join(os.path.dirname(span_dir), "." + os.path.basename(span_dir) + ".replaced")
    if files.exists(span_dir):
        _remove_quietly(files, replaced)
        files.rename(span_dir, replaced)
        try:
            files.rename(staging, span_dir)
        except BaseException:
            files.rename(replaced, span_dir)
            raise
        _remove_quietly(files, replaced)
    else:
        files.rename(staging, span_dir)


def _remove_quietly(files, path: str) -> None:
    """Removes a file or folder if it is there; a failure to remove is ignored (it runs while cleaning up)."""
    try:
        if files.isdir(path):
            files.rmtree(path)
        elif files.exists(path):
            files.remove(path)
    except Exception:  # noqa: BLE001 - cleaning up after a failure must not hide the failure
        pass


def _write_json(files, path: str, value: dict) -> None:
    """Writes `value` as indented JSON (UTF-8 kept) to `path` through `files` (file_system's operations)."""
    with files.open(path, "w") as handle:
        handle.write(json.dumps(value, indent=2, ensure_ascii=False))


def read_span_note(span_dir: str) -> dict:
    """A span folder's SPAN_NOTE_FILE ({} when there is none): its CSV, the rows written, `left_out` as
    [{rows, why}], the empty rows skipped."""
    files = file_system(span_dir)
    path = os.path.join(span_dir, SPAN_NOTE_FILE)
    if not files.exists(path):
        return {}
    with files.open(path) as handle:
        return json.loads(handle.read())


def _write_block(path, delimiter, block, columns, types: ColumnTypes, missing_tokens, required, writers,
                 rows_before: int, missing_counts: dict, data_rows_before: int, fixed_by: str,
                 unread: dict[str, Unreadable]) -> tuple[int, int, int]:
    """Writes one block's rows; a cell no number (date) reads is written as a missing value and counted in
    `unread` (column -> Unreadable). Output: (rows written, rows left out for a missing required cell, empty rows
    skipped). Raises CsvError naming the line and column of a cell that does not fit its column's type."""
    import pyarrow.compute as pc

    cells = {column: pc.utf8_trim_whitespace(block[column]) for column in columns}
    empty = np.all([pc.equal(cells[c], "").to_numpy(zero_copy_only=False) for c in columns], axis=0)
    missing = {c: _missing_mask(cells[c], missing_tokens) for c in columns}
    absent = np.stack([missing[c].to_numpy(zero_copy_only=False) for c in columns], axis=1)
    typed = {column: _typed(column, types.types[column], types.date_forms.get(column, ""), cells[column],
                            missing[column], delimiter, types.decimal, types.units.get(column, ""))
             for column in columns}
    for position, column in enumerate(columns):
        present = np.flatnonzero(~absent[:, position])
        counted = unread.setdefault(column, Unreadable())
        if typed[column].unread.any() and counted.first_row < 0:
            counted.first_row = data_rows_before + int(np.flatnonzero(typed[column].unread)[0])
        counted.add(cells[column].take(_indices(present)), typed[column].unread[present])
        absent[:, position] |= typed[column].unread
    required_absent = absent[:, [columns.index(c) for c in required]].any(axis=1) if required else np.zeros(
        len(empty), bool)
    for column in columns:
        bad = typed[column].bad
        if bad >= 0 and not empty[bad] and not required_absent[bad]:
            cell = cells[column][bad].as_py()
            line = _line_of(path, delimiter, row_index=data_rows_before + bad)
            raise CsvError(f"{path}: line {line}: column {column!r} holds {cell!r}, which is not "
                           f"{typed[column].wanted or _expected(types, column)}{_origin(fixed_by)}; correct the cell, "
                           "or leave it empty for a missing value")
    keep = ~empty & ~required_absent
    kept_rows = np.flatnonzero(keep)
    for column, position in zip(columns, range(len(columns))):
        missing_counts[column] += int(absent[kept_rows, position].sum())
    records = _serialize({c: typed[c].values.take(_indices(kept_rows)) for c in columns},
                         ~absent[kept_rows]) if len(kept_rows) else []
    for offset, record in enumerate(records):
        writers[(rows_before + offset) % SHARDS].write(record)
    return len(records), int((~empty & required_absent).sum()), int(empty.sum())


def _expected(types: ColumnTypes, column: str) -> str:
    """What a cell of the column is: "an integer", "a date of the form ISO 8601"..."""
    form = types.date_forms.get(column, "")
    return _KIND_TEXT[types.types[column]] + (f" of the form {DATE_FORM_NAMES.get(form, form)}" if form else "")


def _origin(fixed_by: str) -> str:
    return f" (its type was fixed by {fixed_by})" if fixed_by else ""


def _check_unread(path: str, delimiter: str, types: ColumnTypes, unread: dict[str, Unreadable],
                  fixed_by: str) -> dict[str, dict]:
    """Input: what the writing pass did not read, per column. Output: column -> {cells, examples, expected} of
    the columns that held such cells (written as missing values). Raises CsvError naming the first such cell's
    line when a column holds more than UNREADABLE_SHARE of them."""
    held = {}
    for column, counted in unread.items():
        if not counted.cells:
            continue
        present = counted.cells + counted.readable
        if not counted.few(present):
            line = _line_of(path, delimiter, row_index=counted.first_row)
            raise CsvError(f"{path}: line {line}: column {column!r} holds {counted.examples[0]!r}, which is not "
                           f"{_expected(types, column)}{_origin(fixed_by)}; {counted.cells:,} of its {present:,} "
                           f"cells are not, more than the {UNREADABLE_SHARE:.0%} read as missing: correct them, or "
                           "leave them empty for missing values")
        held[column] = {"cells": counted.cells, "examples": counted.examples, "expected": _expected(types, column)}
    return held


def _indices(rows: np.ndarray):
    import pyarrow as pa
    return pa.array(rows)


def _record_types(data_root: str, span: int, types: ColumnTypes, record: dict | None, columns: list[str],
                  label: str = "", missing_tokens: tuple[str, ...] = MISSING_TOKENS) -> None:
    """Keeps the span's columns and types in COLUMNS_FILE when no earlier span fixed them (`record` None),
    with the missing-value tokens when they are not the default ones (init gives them to the model, which
    serves them as missing); else adds the columns new in this span, and the types of columns empty until
    now that this span fills. The label `init` chose is kept."""
    if record is None:
        value = {"span": span, "columns": columns, **types.to_json(), **({"label": label} if label else {}),
                 **({"missing_tokens": list(missing_tokens)} if tuple(missing_tokens) != MISSING_TOKENS else {})}
    else:
        value = json.loads(json.dumps(record))
        known, empty = value.setdefault("types", {}), value.setdefault("empty", [])
        changed = False
        for column in columns:
            filled = column in empty and column not in types.empty
            if column in known and not filled:
                continue
            known[column] = types.types[column]
            for key, forms in (("date_forms", types.date_forms), ("units", types.units)):
                if column in forms:
                    value.setdefault(key, {})[column] = forms[column]
                else:
                    value.get(key, {}).pop(column, None)
            if filled:
                empty.remove(column)
            elif column in types.empty:
                empty.append(column)
            changed = True
        if not changed:
            return
    write_record(data_root, value)


def write_record(data_root: str, value: dict) -> None:
    """Replaces COLUMNS_FILE (written beside, then renamed: never half written)."""
    files = file_system(data_root)
    path = os.path.join(data_root, COLUMNS_FILE)
    _write_json(files, path + ".partial", value)
    files.rename(path + ".partial", path)


def leave_out_unlabelled(data_root: str, label: str) -> dict[str, int]:
    """Input: a data root prepare-data wrote and the label `init` chose. Each span folder is written again
    without the records that have no value for the label (into a hidden folder beside it, renamed into place:
    a failure leaves the span as it was), its note (SPAN_NOTE_FILE) counting them; the label is recorded in
    COLUMNS_FILE so that later spans leave such rows out as they are prepared. Output: span folder -> records
    left out (spans that had none omitted)."""
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    from components.tfrecord_ingest.tfrecord_files import iter_records
    from components.tfrecord_ingest.spans import list_record_files

    files = file_system(data_root)
    decoder = ExamplesToRecordBatchDecoder()
    left_out: dict[str, int] = {}
    for name in _span_names(data_root):
        span_dir = os.path.join(data_root, name)
        staging = os.path.join(data_root, f".{name}.partial")
        dropped = 0
        writers: list[_ShardWriter] = []
        try:
            _remove_quietly(files, staging)
            files.makedirs(staging)
            kept = 0
            for path in list_record_files(span_dir):
                writer = _ShardWriter(os.path.join(staging, os.path.basename(path)))
                writers.append(writer)
                batch: list[bytes] = []
                for _, record in iter_records(path):
                    batch.append(record)
                    if len(batch) == 4096:
                        dropped += _write_labelled(decoder, batch, label, writer)
                        batch = []
                if batch:
                    dropped += _write_labelled(decoder, batch, label, writer)
                writers.pop().close()
                kept += writer.records
                if not writer.records:  # ingestion refuses a file without records
                    files.remove(writer.path)
            if dropped and kept:
                note = read_span_note(span_dir)
                if "rows" in note:
                    note["rows"] -= dropped
                note.setdefault("left_out", []).append({"rows": dropped, "why": f"no value for the label {label!r}"})
                _write_json(files, os.path.join(staging, SPAN_NOTE_FILE), note)
                _publish(files, staging, span_dir)
                left_out[span_dir] = dropped
            else:
                _remove_quietly(files, staging)
        except BaseException:
            for writer in writers:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001
                    pass
            _remove_quietly(files, staging)
            raise
    record = read_record(data_root) or {}
    if record.get("label") != label:
        record["label"] = label
        write_record(data_root, record)
    return left_out


def _write_labelled(decoder, batch: list[bytes], label: str, writer: "_ShardWriter") -> int:
    """Writes the records of `batch` that hold a value for `label`. Output: how many were left out."""
    import pyarrow.compute as pc

    decoded = decoder.DecodeBatch(batch)
    if label in decoded.schema.names:
        values = decoded.column(decoded.schema.get_field_index(label))
        held = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False) > 0
    else:
        held = np.zeros(len(batch), bool)
    for record, keep in zip(batch, held):
        if keep:
            writer.write(record)
    return int((~held).sum())
