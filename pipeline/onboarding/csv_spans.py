"""A user's CSV file written as one span of TFRecord tf.Examples (`python -m pipeline prepare-data --csv`).

Reading: pyarrow's CSV reader (installed with TFX) parses the file in blocks of BLOCK_BYTES, streaming:
quoting, doubled quotes, delimiters and line breaks inside quoted cells, a UTF-8 byte-order mark. Every cell
is read as text and our rules, applied to whole blocks with pyarrow's compute functions, decide what it is.
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
- else string (UTF-8 bytes).
Rows whose every cell is empty (a spreadsheet's trailing `,,,`) are skipped and counted; rows with a missing
cell in a `required` column are left out and counted.

Later spans keep the types the first one fixed: the first span's types are kept in COLUMNS_FILE in the data
root, and a later span is written with them (a float column whose new cells are all whole numbers stays
float), or with the types of a curated schema (`--schema`). A cell that does not fit its column's type is an
error naming the file, line, column and cell.

Bad input raises CsvError naming the file and line or column (not UTF-8, no header, an empty or repeated
column name, a row with too many or too few cells, no data rows, a cell that does not fit a fixed type), and
nothing is written: the span's files are written under hidden names and renamed into place only when every
row was read.
"""
from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import os
import re
import struct

import numpy as np

from components.core.file_system import file_system

DELIMITERS = ",;\t|"
MISSING_TOKENS = ("na", "n/a", "#n/a", "nan", "null", "none", "-", "?", "inf", "+inf", "-inf", "infinity",
                  "+infinity", "-infinity")
SHARDS = 4
SNIFF_BYTES = 64 * 1024
BLOCK_BYTES = 1 << 20  # pyarrow reads the CSV in blocks of this many bytes (and reads ahead about 35 of them)
COLUMNS_FILE = ".csv_columns.json"  # in the data root: the types the first span fixed (hidden: never read as data)
KINDS = ("int", "float", "string", "date")

_INT = r"^[+-]?(0|[1-9][0-9]*)$"
_CODE = r"^[+-]?0[0-9]+$"  # a leading zero: a code (zip code, account), kept as text
_FLOAT = r"^[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_THOUSANDS = r"^[+-]?[1-9][0-9]{0,2}(,[0-9]{3})+(\.[0-9]+)?$"
_TIME = r"(?:[T ](?P<H>[0-9]{1,2}):(?P<M>[0-9]{2})(?::(?P<S>[0-9]{2})(?:[.,][0-9]+)?)?)?"
DATE_FORMS = {  # name -> regular expression with named parts; day-first and month-first share one shape
    "iso": r"^(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})-(?P<d>[0-9]{1,2})" + _TIME
           + r"\s*(?P<z>Z|[+-][0-9]{2}(?::?[0-9]{2})?)?$",
    "ymd": r"^(?P<y>[0-9]{4})/(?P<m>[0-9]{1,2})/(?P<d>[0-9]{1,2})" + _TIME + "$",
    "dmy": r"^(?P<d>[0-9]{1,2})[/.-](?P<m>[0-9]{1,2})[/.-](?P<y>[0-9]{4})" + _TIME + "$",
    "mdy": r"^(?P<m>[0-9]{1,2})[/.-](?P<d>[0-9]{1,2})[/.-](?P<y>[0-9]{4})" + _TIME + "$",
}
DATE_FORM_NAMES = {"iso": "ISO 8601", "ymd": "YYYY/MM/DD", "dmy": "day first (DD/MM/YYYY)",
                   "mdy": "month first (MM/DD/YYYY)"}


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
    date_forms: dict[str, str]  # date column -> its form (a DATE_FORMS name or a strptime format)
    fixed_by: str = ""  # where the types came from when not inferred: the first span's record, or a schema
    notes: list[str] = dataclasses.field(default_factory=list)  # columns that look like dates but were not read so

    def render(self) -> str:
        width = max(len(column) for column in self.types)
        lines = [f"wrote {self.rows:,} tf.Examples to {self.span_dir} (delimiter {self.delimiter!r})"]
        if self.fixed_by:
            lines.append(f"column types fixed by {self.fixed_by}")
        if self.skipped_rows:
            lines.append(f"left out {self.skipped_rows:,} row(s) with a missing value in a required column")
        if self.empty_rows:
            lines.append(f"skipped {self.empty_rows:,} empty row(s)")
        for column, kind in self.types.items():
            detail = ""
            if kind == "date":
                form = self.date_forms[column]
                detail = f"  ({DATE_FORM_NAMES.get(form, form)}; written as int64 seconds since 1970-01-01 UTC)"
            lines.append(f"  {column:<{width}}  {kind:<6}  {self.missing[column]:,} missing{detail}")
        lines += [f"note: {note}" for note in self.notes]
        return "\n".join(lines)


# ----------------------------------------------------------------------------------------- reading blocks

def detect_delimiter(path: str) -> str:
    """The delimiter of a CSV file: the one of DELIMITERS csv.Sniffer finds in its first 64 KiB, else ','."""
    with open(path, "rb") as handle:
        sample = handle.read(SNIFF_BYTES)
    try:
        text = sample.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        if error.start < len(sample) - 4:  # not a character cut off at the end of the sample
            raise CsvError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason}); save it as UTF-8") from None
        text = sample[:error.start].decode("utf-8-sig")
    try:
        return csv.Sniffer().sniff(text, delimiters=DELIMITERS).delimiter
    except csv.Error:
        return ","


def read_header(path: str, delimiter: str) -> list[str]:
    """The header's cells as written. Raises CsvError naming line 1 when the file is empty, a name is empty
    or two names cannot be told apart (the same once surrounding spaces are dropped), or the first row looks
    like data."""
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as handle:
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
    """The data rows in blocks: {column (the stripped header name): pyarrow array of its text cells}.
    Raises CsvError naming the line of a row whose cell count differs from the header's, or of a row that
    repeats the header (two exports joined into one file)."""
    import pyarrow as pa
    import pyarrow.csv as pa_csv

    bad_rows = []

    def on_invalid_row(row):
        bad_rows.append(row)
        return "error"

    try:
        reader = pa_csv.open_csv(
            pa.OSFile(path),  # read, not memory-mapped: a mapped file's pages would count in the process's memory
            read_options=pa_csv.ReadOptions(block_size=BLOCK_BYTES, encoding="utf8"),
            parse_options=pa_csv.ParseOptions(delimiter=delimiter, newlines_in_values=True, ignore_empty_lines=True,
                                              invalid_row_handler=on_invalid_row),
            convert_options=pa_csv.ConvertOptions(column_types={name: pa.string() for name in header},
                                                  strings_can_be_null=False, quoted_strings_can_be_null=False,
                                                  null_values=[], check_utf8=True))
        names = [name.strip() for name in header]
        rows = 0
        for batch in reader:
            block = {name: batch.column(i) for i, name in enumerate(names)}
            repeated = _header_row(block)
            if repeated is not None:
                line = _line_of(path, delimiter, row_index=rows + repeated)
                raise CsvError(f"{path}: line {line} repeats the header row: two files joined into one? Prepare "
                               f"each as a span of its own (prepare-data --csv FILE --span N), or delete the "
                               f"repeated header lines")
            rows += batch.num_rows
            yield block
    except pa.ArrowInvalid as error:
        if bad_rows:
            row = bad_rows[0]
            line = _line_of(path, delimiter, row.text)
            raise CsvError(f"{path}: line {line}: {row.actual_columns} cells where the header names "
                           f"{row.expected_columns} columns") from None
        if "UTF8" in str(error) or "UTF-8" in str(error):
            raise CsvError(f"{path}: not UTF-8 text ({_first_line(error)}); save it as UTF-8") from None
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
    the row whose text is `row_text`, or the `row_index`-th data row (0-based, empty rows skipped)."""
    with open(path, newline="", encoding="utf-8-sig", errors="replace") as handle:
        reader = csv.reader(handle, delimiter=delimiter)
        next(reader, None)
        index, start = 0, reader.line_num + 1
        for cells in reader:
            if cells:
                if row_text is not None and delimiter.join(cells) == row_text.rstrip("\r\n"):
                    return start
                if row_index is not None and index == row_index:
                    return start
                index += 1
            start = reader.line_num + 1
    return "?"


# ----------------------------------------------------------------------------------------- cell rules

@dataclasses.dataclass
class ColumnState:
    """What the first pass has seen of one column."""
    kind: str = "int"  # int -> float -> string, widened as cells require
    present: int = 0
    date_forms: tuple[str, ...] = tuple(DATE_FORMS)  # the date forms every present cell so far fits
    code_example: str = ""  # a cell with a leading zero, which made the column text


def _missing_mask(cells, tokens: tuple[str, ...]):
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pc.equal(cells, "")
    if tokens:
        mask = pc.or_(mask, pc.is_in(pc.utf8_lower(cells), value_set=pa.array(tokens)))
    return mask


def _numeric_masks(cells, delimiter: str):
    """(is an integer, is a number) per cell; thousands separators count in a comma-delimited file."""
    import pyarrow.compute as pc

    is_int = pc.match_substring_regex(cells, _INT)
    is_number = pc.match_substring_regex(cells, _FLOAT)
    if delimiter == ",":
        thousands = pc.match_substring_regex(cells, _THOUSANDS)
        is_number = pc.or_(is_number, thousands)
        is_int = pc.or_(is_int, pc.and_(thousands, pc.invert(pc.match_substring(cells, "."))))
    return is_int, is_number


def parse_dates(cells, form: str) -> tuple[np.ndarray, np.ndarray]:
    """Input: text cells (a pyarrow string array) and a date form (a DATE_FORMS name, or a strptime format).
    Output: (int64 seconds since 1970-01-01 UTC, True where the cell is a valid date of that form)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if form not in DATE_FORMS:
        parsed = pc.strptime(cells, format=form, unit="s", error_is_null=True)
        valid = pc.is_valid(parsed).to_numpy(zero_copy_only=False)
        seconds = pc.cast(parsed, pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)
        return seconds.astype(np.int64), valid
    parts = pc.extract_regex(cells, DATE_FORMS[form])
    matched = pc.is_valid(parts).to_numpy(zero_copy_only=False)

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


def _note_block(state: ColumnState, cells, delimiter: str, date_format: str | None) -> None:
    """Widens a column's kind and narrows its date forms by one block of its present cells."""
    import pyarrow.compute as pc

    if not len(cells):
        return
    state.present += len(cells)
    if date_format is not None:
        state.date_forms = (date_format,) if parse_dates(cells, date_format)[1].all() else ()
    else:
        state.date_forms = tuple(form for form in state.date_forms if parse_dates(cells, form)[1].all())
    if state.kind == "string":
        return
    is_int, is_number = _numeric_masks(cells, delimiter)
    if not pc.all(is_number).as_py():
        codes = pc.filter(cells, pc.match_substring_regex(cells, _CODE))
        state.code_example = state.code_example or (codes[0].as_py() if len(codes) else "")
        state.kind = "string"
    elif state.kind == "int" and not pc.all(is_int).as_py():
        state.kind = "float"
    elif state.kind == "int":
        try:
            pc.cast(pc.replace_substring(cells, ",", ""), "int64")
        except Exception:  # noqa: BLE001 - pyarrow's overflow error: an id too long for int64
            state.kind = "string"  # as a float it would lose digits


def _decide(state: ColumnState) -> tuple[str, str]:
    """(kind, date form) of a column from what the first pass saw; dates win over text. Day-first and
    month-first both fitting means no cell told which: the column stays text (see infer_types' notes)."""
    forms = state.date_forms if state.present else ()
    for form in ("iso", "ymd"):
        if form in forms:
            return "date", form
    if len(forms) == 1:
        return "date", forms[0]
    return ("string" if not state.present and state.kind == "int" else state.kind), ""


# ----------------------------------------------------------------------------------------- the two passes

@dataclasses.dataclass
class ColumnTypes:
    """Each column's type and, for dates, its form: what the first span fixes for the later ones."""
    types: dict[str, str]
    date_forms: dict[str, str]

    def to_json(self) -> dict:
        return {"types": self.types, "date_forms": self.date_forms}

    @classmethod
    def from_json(cls, value: dict) -> "ColumnTypes":
        return cls(dict(value["types"]), dict(value.get("date_forms", {})))


def infer_types(path: str, delimiter: str, header: list[str], missing_tokens: tuple[str, ...],
                date_formats: dict[str, str]) -> tuple[ColumnTypes, list[str]]:
    """The first pass. Output: each column's type and date form, and notes on columns that look like dates
    but whose day and month order no cell tells."""
    import pyarrow.compute as pc

    columns = [name.strip() for name in header]
    states = {column: ColumnState() for column in columns}
    for block in _blocks(path, delimiter, header):
        for column in columns:
            cells = pc.utf8_trim_whitespace(block[column])
            present = pc.filter(cells, pc.invert(_missing_mask(cells, missing_tokens)))
            _note_block(states[column], present, delimiter, date_formats.get(column))
    decided = {column: _decide(state) for column, state in states.items()}
    notes = [f"column {column!r} looks like dates, but no cell says whether the day or the month comes first; it "
             f"was kept as text (give --date-format '{column}=%d/%m/%Y' or '{column}=%m/%d/%Y' to read it as dates)"
             for column, state in states.items()
             if decided[column][0] != "date" and {"dmy", "mdy"} <= set(state.date_forms) and state.present]
    return ColumnTypes({c: kind for c, (kind, _) in decided.items()},
                       {c: form for c, (kind, form) in decided.items() if kind == "date"}), notes


def _typed(column: str, kind: str, form: str, cells, missing, delimiter: str):
    """One block of a column as a pyarrow list array for the tf.Example encoder: one value per present cell
    in the column's type. Output: (values list array, the row of the first cell that does not fit or -1)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    present = pc.invert(missing)
    filled = pc.if_else(missing, _PLACEHOLDER[kind], cells)
    if kind == "string":
        values = pc.cast(filled, pa.binary())
        bad = -1
    elif kind == "date":
        seconds, valid = parse_dates(filled, form)
        valid |= ~present.to_numpy(zero_copy_only=False)
        values, bad = pa.array(seconds, pa.int64()), int(np.argmin(valid)) if not valid.all() else -1
    else:
        is_int, is_number = _numeric_masks(filled, delimiter)
        plain = pc.replace_substring(filled, ",", "") if delimiter == "," else filled
        if kind == "float":
            fits = is_number.to_numpy(zero_copy_only=False)
            numbers = pc.cast(pc.if_else(is_number, plain, "0"), pa.float64())
            values = pc.cast(numbers, pa.float32())
        else:  # int: an integer, or a number with no fraction (3.0); anything else does not fit
            as_float = pc.cast(pc.if_else(is_number, plain, "0"), pa.float64()).to_numpy(zero_copy_only=False)
            fits = is_number.to_numpy(zero_copy_only=False) & (np.floor(as_float) == as_float)
            whole = pc.if_else(is_int, plain, "0")
            try:
                values = pc.cast(whole, pa.int64()).to_numpy(zero_copy_only=False)
            except Exception:  # noqa: BLE001 - beyond int64
                fits = np.zeros(len(cells), bool)
                values = np.zeros(len(cells), np.int64)
            values = pa.array(np.where(is_int.to_numpy(zero_copy_only=False), values,
                                       as_float.astype(np.int64, copy=False)), pa.int64())
        fits |= ~present.to_numpy(zero_copy_only=False)
        bad = int(np.argmin(fits)) if not fits.all() else -1
    offsets = pa.array(np.arange(len(cells) + 1, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, values), bad


_PLACEHOLDER = {"int": "0", "float": "0", "string": "", "date": "1970-01-01"}
_KIND_TEXT = {"int": "an integer", "float": "a number", "date": "a date", "string": "text"}


def _serialize(lists: dict, present: np.ndarray) -> list[bytes]:
    """Input: column -> list array of one block (one value per row), and the rows x columns presence matrix.
    Output: each row's serialized tf.Example holding only its present columns (rows grouped by which columns
    they hold, each group encoded at once by tfx-bsl's encoder)."""
    import pyarrow as pa
    from tfx_bsl.coders.example_coder import RecordBatchToExamples

    names = list(lists)
    patterns, group_of_row = np.unique(present, axis=0, return_inverse=True)
    records: list[bytes] = [b""] * len(present)
    for group, pattern in enumerate(patterns):
        rows = np.flatnonzero(group_of_row.reshape(-1) == group)
        kept = [name for name, keep in zip(names, pattern) if keep]
        indices = pa.array(rows)
        batch = pa.RecordBatch.from_arrays([lists[name].take(indices) for name in kept], kept)
        for row, record in zip(rows, RecordBatchToExamples(batch)):
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

    def write(self, record: bytes) -> None:
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


def fixed_types(data_root: str, schema_path: str | None) -> tuple[ColumnTypes | None, str]:
    """The types a new span must be written with: a curated schema's (`schema_path`), else the first
    span's (COLUMNS_FILE in the data root), else None (infer them). Output: (types, where they came from)."""
    if schema_path:
        return _schema_types(schema_path), f"the schema {schema_path}"
    files = file_system(data_root)
    record = os.path.join(data_root, COLUMNS_FILE)
    if files.exists(record):
        with files.open(record) as handle:
            value = json.loads(handle.read())
        return ColumnTypes.from_json(value), f"span-{value.get('span', 1)} ({record})"
    return None, ""


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
                   date_formats: dict[str, str] | None = None, schema_path: str | None = None) -> CsvSummary:
    """Input: a CSV file, a data root, the span number (1 or more), the delimiter (None: detected), the cell
    values that mean "missing" (compared without case), columns a row must have a value in, strptime formats
    for date columns (column -> format), and a curated schema whose types the span takes. Output: what was
    written to <data_root>/span-<span>/data-0000i-of-00004.tfrecord.gz. Raises CsvError naming the file and
    line, or the column (nothing is written then)."""
    if span < 1:
        raise CsvError(f"--span {span}: span numbers start at 1")
    if not os.path.isfile(path):
        raise CsvError(f"{path}: no such file")
    if os.path.exists(data_root) and not os.path.isdir(data_root):
        raise CsvError(f"--data {data_root}: a file; --data names the folder the spans are written into")
    date_formats = dict(date_formats or {})
    missing_tokens = tuple(token.lower() for token in missing_tokens)
    delimiter = delimiter or detect_delimiter(path)
    header = read_header(path, delimiter)
    columns = [name.strip() for name in header]
    for name in list(required) + list(date_formats):
        if name not in columns:
            raise CsvError(f"{path}: {'--require' if name in required else '--date-format'} names the column "
                           f"{name!r}, which the header does not have (columns: {', '.join(columns)})")
    types, fixed, fixed_by, notes = column_types(path, delimiter, header, data_root, schema_path, missing_tokens,
                                                 date_formats)
    span_dir, rows, skipped, empty, missing_counts = _write_span(path, delimiter, header, data_root, span, types,
                                                                 missing_tokens, required, fixed_by)
    _record_types(data_root, span, types, fixed)
    return CsvSummary(span_dir, rows, skipped, empty, delimiter, types.types, missing_counts, types.date_forms,
                      fixed_by, notes)


def column_types(path: str, delimiter: str, header: list[str], data_root: str, schema_path: str | None,
                 missing_tokens: tuple[str, ...], date_formats: dict[str, str]
                 ) -> tuple[ColumnTypes, ColumnTypes | None, str, list[str]]:
    """The first pass, and the types an earlier span or a schema fixed over it. Output: (the types the span is
    written with, the fixed ones or None, where they came from, notes on columns that look like dates)."""
    columns = [name.strip() for name in header]
    fixed, fixed_by = fixed_types(data_root, schema_path)
    recorded = fixed_types(data_root, None)[0] if schema_path else fixed
    recorded_forms = recorded.date_forms if recorded else {}
    inferred, notes = infer_types(path, delimiter, header, missing_tokens, date_formats)
    types = ColumnTypes(dict(inferred.types), dict(inferred.date_forms))
    if fixed is None:
        return types, None, "", notes
    for column in columns:
        if column in fixed.types:
            types.types[column] = fixed.types[column]
            if fixed.types[column] == "date":
                types.date_forms[column] = (date_formats.get(column) or fixed.date_forms.get(column)
                                            or recorded_forms.get(column) or inferred.date_forms.get(column) or "iso")
            else:
                types.date_forms.pop(column, None)
    return types, fixed, fixed_by, [note for note in notes if not any(repr(c) in note for c in fixed.types)]


def _write_span(path: str, delimiter: str, header: list[str], data_root: str, span: int, types: ColumnTypes,
                missing_tokens: tuple[str, ...], required: tuple[str, ...], fixed_by: str
                ) -> tuple[str, int, int, int, dict[str, int]]:
    """The second pass: every block written to the span's shards under hidden names, renamed into place only
    when every row was read (on any error the span, or the data root it created, is removed). Output: (span
    folder, rows written, rows left out for a required cell, empty rows skipped, missing cells per column)."""
    columns = [name.strip() for name in header]
    span_dir = os.path.join(data_root, f"span-{span}")
    files = file_system(data_root)
    created = data_root if not files.exists(data_root) else span_dir if not files.exists(span_dir) else None
    files.makedirs(span_dir)
    paths = [os.path.join(span_dir, f"data-{i:05d}-of-{SHARDS:05d}.tfrecord.gz") for i in range(SHARDS)]
    temporary = [os.path.join(span_dir, "." + os.path.basename(p) + ".tmp") for p in paths]  # hidden: not read
    writers = [_ShardWriter(p) for p in temporary]
    missing_counts = dict.fromkeys(columns, 0)
    rows = skipped = empty = data_rows = 0
    try:
        for block in _blocks(path, delimiter, header):
            rows_written, skipped_here, empty_here = _write_block(
                path, delimiter, block, columns, types, missing_tokens, set(required), writers, rows,
                missing_counts, data_rows, fixed_by)
            data_rows += len(block[columns[0]])
            rows += rows_written
            skipped += skipped_here
            empty += empty_here
        if not rows:
            raise CsvError(f"{path}: no data rows" + (" (only a header)" if not data_rows else
                                                      f" ({data_rows:,} row(s), every one empty or left out)"))
    except BaseException:
        for writer, partial in zip(writers, temporary):
            writer.close()
            files.remove(partial)
        if created:
            files.rmtree(created)
        raise
    for writer, partial, final in zip(writers, temporary, paths):
        writer.close()
        files.rename(partial, final)
    return span_dir, rows, skipped, empty, missing_counts


def _write_block(path, delimiter, block, columns, types: ColumnTypes, missing_tokens, required, writers,
                 rows_before: int, missing_counts: dict, data_rows_before: int, fixed_by: str) -> tuple[int, int, int]:
    """Writes one block's rows. Output: (rows written, rows left out for a missing required cell, empty rows
    skipped). Raises CsvError naming the line and column of a cell that does not fit its column's type."""
    import pyarrow.compute as pc

    cells = {column: pc.utf8_trim_whitespace(block[column]) for column in columns}
    empty = np.all([pc.equal(cells[c], "").to_numpy(zero_copy_only=False) for c in columns], axis=0)
    missing = {c: _missing_mask(cells[c], missing_tokens) for c in columns}
    absent = np.stack([missing[c].to_numpy(zero_copy_only=False) for c in columns], axis=1)
    required_absent = absent[:, [columns.index(c) for c in required]].any(axis=1) if required else np.zeros(
        len(empty), bool)
    lists = {}
    for column in columns:
        kind = types.types[column]
        lists[column], bad = _typed(column, kind, types.date_forms.get(column, ""), cells[column], missing[column],
                                    delimiter)
        if bad >= 0 and not empty[bad] and not required_absent[bad]:
            cell = cells[column][bad].as_py()
            line = _line_of(path, delimiter, row_index=data_rows_before + bad)
            form = types.date_forms.get(column, "")
            expected = _KIND_TEXT[kind] + (f" of the form {DATE_FORM_NAMES.get(form, form)}" if form else "")
            origin = f" (its type was fixed by {fixed_by})" if fixed_by else ""
            raise CsvError(f"{path}: line {line}: column {column!r} holds {cell!r}, which is not {expected}"
                           f"{origin}; correct the cell, or leave it empty for a missing value")
    keep = ~empty & ~required_absent
    kept_rows = np.flatnonzero(keep)
    for column, position in zip(columns, range(len(columns))):
        missing_counts[column] += int(absent[kept_rows, position].sum())
    records = _serialize({c: lists[c].take(_indices(kept_rows)) for c in columns},
                         ~absent[kept_rows]) if len(kept_rows) else []
    for offset, record in enumerate(records):
        writers[(rows_before + offset) % SHARDS].write(record)
    return len(records), int((~empty & required_absent).sum()), int(empty.sum())


def _indices(rows: np.ndarray):
    import pyarrow as pa
    return pa.array(rows)


def _record_types(data_root: str, span: int, types: ColumnTypes, fixed: ColumnTypes | None) -> None:
    """Keeps the column types in COLUMNS_FILE when no earlier span fixed them (columns new in this span are
    added)."""
    files = file_system(data_root)
    record = os.path.join(data_root, COLUMNS_FILE)
    if fixed is not None and files.exists(record):
        with files.open(record) as handle:
            value = json.loads(handle.read())
        new = {c: k for c, k in types.types.items() if c not in value["types"]}
        if not new:
            return
        value["types"].update(new)
        value.setdefault("date_forms", {}).update({c: f for c, f in types.date_forms.items() if c in new})
    else:
        value = {"span": span, **types.to_json()}
    with files.open(record, "w") as handle:
        handle.write(json.dumps(value, indent=2, ensure_ascii=False))
