"""A user's CSV file written as one span of TFRecord tf.Examples (`python -m pipeline prepare-data --csv`).

Record contract, as for the bundled taxi data: one tf.Example per row, one feature per column under the
column's name. Each column's type is inferred over every row: int64 when every present cell is an integer
within int64's range, float when every present cell is a number, else string. An empty cell, one holding a
missing-value token (`NA` by default), or a number that reads as NaN is an absent feature. Quoted fields may
hold the delimiter, quotes and line breaks; the delimiter is detected (comma, semicolon, tab or pipe) unless
given. Rows with a missing cell in a `required` column are left out, and counted.

Bad input raises CsvError naming the file and line (a file that is not UTF-8, a header that is missing or
repeats a name, a row with too many or too few cells), and nothing is written: the span's files are written
under hidden names and renamed into place only when every row was read.
"""
from __future__ import annotations

import csv
import dataclasses
import math
import os

DELIMITERS = ",;\t|"
DEFAULT_MISSING = ("NA",)
SHARDS = 4
SNIFF_BYTES = 64 * 1024


class CsvError(ValueError):
    """The CSV cannot be read as a table; the message names the file and line."""


@dataclasses.dataclass
class CsvSummary:
    """What prepare-data wrote: the span folder, the rows, each column's type and missing cells."""
    span_dir: str
    rows: int
    skipped_rows: int  # rows left out for a missing required cell
    delimiter: str
    types: dict[str, str]  # column -> int | float | string
    missing: dict[str, int]  # column -> rows without a value

    def render(self) -> str:
        width = max(len(column) for column in self.types)
        lines = [f"wrote {self.rows:,} tf.Examples to {self.span_dir} (delimiter {self.delimiter!r})"]
        if self.skipped_rows:
            lines.append(f"left out {self.skipped_rows:,} row(s) with a missing value in a required column")
        lines += [f"  {column:<{width}}  {kind:<6}  {self.missing[column]:,} missing"
                  for column, kind in self.types.items()]
        return "\n".join(lines)


def detect_delimiter(path: str) -> str:
    """The delimiter of a CSV file: the one of DELIMITERS csv.Sniffer finds in its first 64 KiB, else ','."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            sample = handle.read(SNIFF_BYTES)
    except UnicodeDecodeError as error:
        raise CsvError(f"{path}: not UTF-8 text (byte {error.start}: {error.reason}); save it as UTF-8") from None
    try:
        return csv.Sniffer().sniff(sample, delimiters=DELIMITERS).delimiter
    except csv.Error:
        return ","


def _rows(path: str, delimiter: str):
    """(line number, cells) for each data row, after checking the header. Raises CsvError naming the line."""
    with open(path, newline="", encoding="utf-8-sig") as handle:
        reader = csv.reader(handle, delimiter=delimiter, strict=True)
        try:
            header = next(reader, None)
            if not header or header == [""]:
                raise CsvError(f"{path}: the file is empty (a header row and data rows expected)")
            _check_header(path, header)
            yield 1, header
            for cells in reader:
                if cells:  # a blank line
                    yield reader.line_num, cells
        except csv.Error as error:
            raise CsvError(f"{path}: line {reader.line_num}: {error}") from None
        except UnicodeDecodeError as error:
            raise CsvError(f"{path}: after line {reader.line_num}: not UTF-8 text ({error.reason}); save it as "
                           f"UTF-8") from None


def _check_header(path: str, header: list[str]) -> None:
    names = [name.strip() for name in header]
    if any(not name for name in names):
        raise CsvError(f"{path}: line 1: the header has an empty column name (column {names.index('') + 1}); "
                       "the first row must name every column")
    numbers = [name for name in names if _number(name) is not None]
    if len(numbers) == len(names) or len(numbers) > len(names) / 2:
        raise CsvError(f"{path}: line 1: the first row looks like data ({', '.join(names[:4])}...), not a header; "
                       "add a header row naming the columns")
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise CsvError(f"{path}: line 1: the header repeats the column name(s) {', '.join(repeated)}")


def _number(cell: str) -> float | None:
    try:
        return float(cell)
    except ValueError:
        return None


INT64_RANGE = (-2 ** 63, 2 ** 63 - 1)


def _integer(cell: str) -> int | None:
    """The cell's value when it is an integer literal, else None."""
    try:
        return int(cell)
    except ValueError:
        return None


def infer_types(path: str, delimiter: str, missing_tokens: tuple[str, ...]) -> tuple[list[str], dict[str, str]]:
    """One pass over the CSV. Output: (the columns, column -> int | float | string). Raises CsvError naming the
    line of a row whose cell count differs from the header's."""
    columns: list[str] = []
    kinds: dict[str, str] = {}
    for line, cells in _rows(path, delimiter):
        if line == 1:
            columns = [name.strip() for name in cells]
            kinds = dict.fromkeys(columns, "int")
            continue
        if len(cells) != len(columns):
            raise CsvError(f"{path}: line {line}: {len(cells)} cells where the header names {len(columns)} columns")
        for column, cell in zip(columns, cells):
            cell = cell.strip()
            if cell == "" or cell in missing_tokens or kinds[column] == "string":
                continue
            if kinds[column] == "int":
                value = _integer(cell)
                if value is None:
                    kinds[column] = "float"
                elif not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
                    kinds[column] = "string"  # an id too long for int64 (as a float it would lose digits)
                    continue
            if kinds[column] == "float" and _number(cell) is None:
                kinds[column] = "string"
    return columns, kinds


def write_csv_span(path: str, data_root: str, span: int = 1, delimiter: str | None = None,
                   missing_tokens: tuple[str, ...] = DEFAULT_MISSING, required: tuple[str, ...] = ()) -> CsvSummary:
    """Input: a CSV file, a data root, the span number, the delimiter (None: detected), the cell values that
    mean "missing", and columns a row must have a value in. Output: what was written to
    <data_root>/span-<span>/data-0000i-of-00004.tfrecord.gz. Raises CsvError naming the file and line
    (nothing is written then)."""
    import tensorflow as tf
    from tfx.dsl.io import fileio

    if not os.path.isfile(path):
        raise CsvError(f"{path}: no such file")
    delimiter = delimiter or detect_delimiter(path)
    columns, kinds = infer_types(path, delimiter, missing_tokens)
    unknown = sorted(set(required) - set(columns))
    if unknown:
        raise CsvError(f"{path}: --require names column(s) the header does not have: {', '.join(unknown)}")
    span_dir = os.path.join(data_root, f"span-{span}")
    created = not fileio.exists(span_dir)
    fileio.makedirs(span_dir)
    paths = [os.path.join(span_dir, f"data-{i:05d}-of-{SHARDS:05d}.tfrecord.gz") for i in range(SHARDS)]
    temporary = [os.path.join(span_dir, "." + os.path.basename(p) + ".tmp") for p in paths]  # hidden: not read
    writers = [tf.io.TFRecordWriter(p, options="GZIP") for p in temporary]
    missing = dict.fromkeys(columns, 0)
    rows = skipped = 0
    try:
        for line, cells in _rows(path, delimiter):
            if line == 1:
                continue
            values = {column: cell.strip() for column, cell in zip(columns, cells)}
            absent = {column for column, cell in values.items()
                      if cell == "" or cell in missing_tokens or (kinds[column] == "float" and math.isnan(float(cell)))}
            if absent & set(required):
                skipped += 1
                continue
            example = tf.train.Example()
            for column, cell in values.items():
                if column in absent:
                    missing[column] += 1
                    continue
                feature = example.features.feature[column]
                if kinds[column] == "int":
                    feature.int64_list.value.append(int(cell))
                elif kinds[column] == "float":
                    feature.float_list.value.append(float(cell))
                else:
                    feature.bytes_list.value.append(cell.encode("utf-8"))
            writers[rows % SHARDS].write(example.SerializeToString())
            rows += 1
    except BaseException:
        for writer, partial in zip(writers, temporary):
            writer.close()
            fileio.remove(partial)
        if created:
            fileio.rmtree(span_dir)
        raise
    for writer, partial, final in zip(writers, temporary, paths):
        writer.close()
        fileio.rename(partial, final, overwrite=True)
    return CsvSummary(span_dir, rows, skipped, delimiter, kinds, missing)
