"""A CSV file read as blocks of text cells: its compression and encoding, its delimiter, its header, its rows.

pyarrow's CSV reader (installed with TFX) parses the file in blocks of BLOCK_BYTES, streaming: quoting, doubled
quotes, delimiters and line breaks inside quoted cells, a UTF-8 byte-order mark; a gzip-compressed file
(`.csv.gz`) and UTF-16 text (Excel's "Unicode text") are read as their UTF-8 text would be (CsvSource). Every cell
is read as text; a wide file's blocks are joined up to JOINED_ROWS rows (the rules' work is per column per block).
Memory holds a block at a time, whatever the number of rows. A file that cannot be read as a table raises
CsvError naming the file and line or column: not UTF-8 or UTF-16 text, a ZIP archive such as an Excel workbook, a
cell holding a NUL character, no header, an empty or repeated column name, a row with too many or too few cells,
a row that repeats the header.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import io
import re

import numpy as np

from pipeline.onboarding.cell_values import FLOAT_PATTERN

DELIMITERS = ",;\t|"
SNIFF_BYTES = 64 * 1024
BLOCK_BYTES = 1 << 20  # pyarrow reads the CSV in blocks of this many bytes (and reads ahead about 35 of them)
# A wide file's blocks hold few rows, and the rules' work is per column per block: consecutive blocks are
# joined until they hold JOINED_ROWS rows, or JOINED_BYTES of text, whichever comes first
JOINED_ROWS, JOINED_BYTES = 4096, 16 << 20


class CsvError(ValueError):
    """The CSV cannot be read as a table; the message names the file and line, or the column."""


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
    numbers = [name for name in names if re.match(FLOAT_PATTERN, name)]
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


def blocks(path: str, delimiter: str, header: list[str]):
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
                line = line_of(path, delimiter, row_index=rows + repeated)
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
            line = line_of(path, delimiter, row.text)
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


def line_of(path: str, delimiter: str, row_text: str | None = None, row_index: int | None = None) -> int | str:
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


def line_bound(path: str) -> int:
    """At least as many as the file's data rows: the line breaks in its (decompressed) bytes, plus one."""
    lines = 1
    with CsvSource.of(path).binary() as handle:
        while chunk := handle.read(1 << 24):
            lines += chunk.count(b"\n")
    return lines


def _joined(blocks: list[dict], names: list[str]) -> dict:
    """Consecutive blocks as one: each column's cells in file order."""
    import pyarrow as pa

    if len(blocks) == 1:
        return blocks[0]
    return {name: pa.concat_arrays([block[name] for block in blocks]) for name in names}


def refuse_nul(path: str, delimiter: str, column: str, cells, rows_before: int) -> None:
    """CsvError naming the line and column of the block's first cell that holds a NUL character (no text holds
    one: the file is binary, or text in an encoding that was not recognized)."""
    import pyarrow.compute as pc

    held = pc.match_substring(cells, "\x00")
    if not pc.any(held).as_py():
        return
    row = int(np.flatnonzero(held.to_numpy(zero_copy_only=False))[0])
    line = line_of(path, delimiter, row_index=rows_before + row)
    raise CsvError(f"{path}: line {line}: column {column!r} holds a NUL character (byte 0) in "
                   f"{cells[row].as_py()!r}, which no text holds: a binary file, or text in an encoding other than "
                   "UTF-8 or UTF-16? Remove it, or save the file as UTF-8 text")
