"""A user's CSV file written as one span of TFRecord tf.Examples (`python -m pipeline prepare-data --csv`).

Record contract, as for the bundled taxi data: one tf.Example per row, one feature per column under the column's
own name (any text a header holds). Two passes over the file's rows, read a block at a time (csv_reading): the
first decides each column's type (type_inference, by the rules of cell_values), or takes the types the data
root's first span or a curated schema fixed (column_record); the second writes the rows (span_writing) as
TFRecord shards (tfrecord_shards) into a hidden folder put in place whole (span_folders). Memory holds a block at
a time and per-column counters, whatever the number of rows.

Bad input raises CsvError naming the file and line or column (not UTF-8 or UTF-16 text, a ZIP archive such as
an Excel workbook, a cell holding a NUL character, no header, an empty or repeated column name, a row with too
many or too few cells, no data rows, a cell that does not fit a fixed type), and nothing is written.
"""
from __future__ import annotations

import dataclasses
import os

from components.core.missing_values import MISSING_TOKENS
from pipeline.onboarding.cell_values import DATE_FORM_NAMES, UNIX_SECONDS
from pipeline.onboarding.column_record import check_columns, column_types, read_record, record_types, span_notes
from pipeline.onboarding.csv_reading import CsvError, detect_delimiter, read_header
from pipeline.onboarding.span_folders import span_names
from pipeline.onboarding.span_writing import check_span_folder, unread_notes, write_span

EMPTY = "empty"  # the kind a summary shows for a column with no value in any row (written as no feature)


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


# ----------------------------------------------------------------------------------------- the two passes


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
    others = [name for name in span_names(data_root) if name != f"span-{span}"]
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
        check_columns(path, columns, fixing, data_root)
    check_span_folder(span_dir)
    if label and label in columns and label not in required:
        required = (*required, label)
    types, fixed, fixed_by, notes = column_types(path, delimiter, header, data_root, schema_path, missing_tokens,
                                                 date_formats, fixing, decimal)
    notes = span_notes(columns, fixing, fixed_by, span, data_root, reinfer) + notes
    filled = [column for column in (fixing or {}).get("empty", []) if column in columns and column not in types.empty]
    if filled:
        notes.append(f"column(s) {', '.join(map(repr, filled))}, empty until now, hold values in this span (typed "
                     f"{', '.join(types.types[column] for column in filled)}): the model leaves them out until init "
                     "is run again or the schema lists them")
    why = (f"no value for the label {label!r}" if label and required == (label,) else
           f"a missing value in a required column ({', '.join(map(repr, required))})")
    span_dir, rows, skipped, empty, missing_counts, unread = write_span(
        path, delimiter, header, data_root, span, types, missing_tokens, required, fixed_by, why)
    record_types(data_root, span, types, fixing, columns, label, missing_tokens)
    return CsvSummary(span_dir, rows, skipped, empty, delimiter, types.types, missing_counts, types.date_forms,
                      fixed_by, notes + unread_notes(unread), types.units, types.empty, tuple(required), label,
                      decimal)


