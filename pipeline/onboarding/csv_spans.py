"""A user's CSV file written as one span of TFRecord tf.Examples (`python -m pipeline prepare-data --csv`).

Reading: csv_reading gives the file's rows in blocks of text cells, and the rules (cell_values), applied to
whole blocks with pyarrow's compute functions, decide what each cell is. Two passes over the file: the first
decides each column's type, the second writes. Memory holds a block at a time and per-column counters, whatever
the number of rows.

Record contract, as for the bundled taxi data: one tf.Example per row, one feature per column under the
column's own name (any text a header holds); the rules that decide each column's type are type_inference's.
Rows whose every cell is empty (a spreadsheet's trailing `,,,`) are skipped and counted; rows with a missing
cell in a `required` column (and, once `init` chose it, the label) are left out and counted.

Later spans keep the types the first one fixed (column_record). A cell that does not fit its column's type (a
fraction in an integer column) is an error naming the file, line, column and cell, and so are unreadable cells
beyond UNREADABLE_SHARE of a column.

Bad input raises CsvError naming the file and line or column (not UTF-8 or UTF-16 text, a ZIP archive such as
an Excel workbook, a cell holding a NUL character, no header, an empty or repeated
column name, a row with too many or too few cells, no data rows, a cell that does not fit a fixed type), and
nothing is written: the span is written into a hidden folder beside it (`.span-N.partial`, never read as a
span) and renamed into place only when every row was read and every file closed; on any failure (a full disk
included) that folder is removed and an existing span stays as it was.
"""
from __future__ import annotations

import dataclasses
import os
import re

import numpy as np

from components.core.path_operations import file_system
from components.core.missing_values import MISSING_TOKENS
from pipeline.onboarding.cell_values import DATE_FORM_NAMES, UNIX_SECONDS, missing_mask, typed_block
from pipeline.onboarding.column_record import (check_columns, column_types, read_record, record_types, span_notes,
                                               write_record)
from pipeline.onboarding.csv_reading import CsvError, blocks, detect_delimiter, line_of, read_header
from pipeline.onboarding.span_folders import (SPAN_NOTE_FILE, publish, read_span_note, remove_quietly, span_names,
                                              write_json)
from pipeline.onboarding.tfrecord_shards import SHARDS, ShardWriter, serialize_rows
from pipeline.onboarding.type_inference import UNREADABLE_SHARE, ColumnTypes, Unreadable

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


_KIND_TEXT = {"int": "an integer", "float": "a number", "date": "a date", "string": "text"}


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
    span_dir, rows, skipped, empty, missing_counts, unread = _write_span(
        path, delimiter, header, data_root, span, types, missing_tokens, required, fixed_by, why)
    record_types(data_root, span, types, fixing, columns, label, missing_tokens)
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


def check_span_folder(span_dir: str) -> None:
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
    writers: list[ShardWriter] = []
    missing_counts = dict.fromkeys(columns, 0)
    unread: dict[str, Unreadable] = {}
    rows = skipped = empty = data_rows = 0
    try:
        remove_quietly(files, staging)  # what a killed write left
        files.makedirs(staging)
        writers = [ShardWriter(os.path.join(staging, f"data-{i:05d}-of-{SHARDS:05d}.tfrecord.gz"))
                   for i in range(SHARDS)]
        for block in blocks(path, delimiter, header):
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
        write_json(files, os.path.join(staging, SPAN_NOTE_FILE), {
            "csv": os.path.abspath(path), "rows": rows, "left_out": left_out, "empty_rows": empty,
            **({"unread": unread_cells} if unread_cells else {})})
        publish(files, staging, span_dir)
    except BaseException:
        for writer in writers:
            try:
                writer.close()
            except Exception:  # noqa: BLE001 - a full disk fails the close too; the folder goes anyway
                pass
        remove_quietly(files, staging)
        if created_root:
            remove_quietly(files, data_root)
        raise
    return span_dir, rows, skipped, empty, missing_counts, unread_cells


def _write_block(path, delimiter, block, columns, types: ColumnTypes, missing_tokens, required, writers,
                 rows_before: int, missing_counts: dict, data_rows_before: int, fixed_by: str,
                 unread: dict[str, Unreadable]) -> tuple[int, int, int]:
    """Writes one block's rows; a cell no number (date) reads is written as a missing value and counted in
    `unread` (column -> Unreadable). Output: (rows written, rows left out for a missing required cell, empty rows
    skipped). Raises CsvError naming the line and column of a cell that does not fit its column's type."""
    import pyarrow.compute as pc

    cells = {column: pc.utf8_trim_whitespace(block[column]) for column in columns}
    empty = np.all([pc.equal(cells[c], "").to_numpy(zero_copy_only=False) for c in columns], axis=0)
    missing = {c: missing_mask(cells[c], missing_tokens) for c in columns}
    absent = np.stack([missing[c].to_numpy(zero_copy_only=False) for c in columns], axis=1)
    typed = {column: typed_block(column, types.types[column], types.date_forms.get(column, ""), cells[column],
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
            line = line_of(path, delimiter, row_index=data_rows_before + bad)
            raise CsvError(f"{path}: line {line}: column {column!r} holds {cell!r}, which is not "
                           f"{typed[column].wanted or _expected(types, column)}{_origin(fixed_by)}; correct the cell, "
                           "or leave it empty for a missing value")
    keep = ~empty & ~required_absent
    kept_rows = np.flatnonzero(keep)
    for column, position in zip(columns, range(len(columns))):
        missing_counts[column] += int(absent[kept_rows, position].sum())
    records = serialize_rows({c: typed[c].values.take(_indices(kept_rows)) for c in columns},
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
            line = line_of(path, delimiter, row_index=counted.first_row)
            raise CsvError(f"{path}: line {line}: column {column!r} holds {counted.examples[0]!r}, which is not "
                           f"{_expected(types, column)}{_origin(fixed_by)}; {counted.cells:,} of its {present:,} "
                           f"cells are not, more than the {UNREADABLE_SHARE:.0%} read as missing: correct them, or "
                           "leave them empty for missing values")
        held[column] = {"cells": counted.cells, "examples": counted.examples, "expected": _expected(types, column)}
    return held


def _indices(rows: np.ndarray):
    import pyarrow as pa
    return pa.array(rows)


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
    for name in span_names(data_root):
        span_dir = os.path.join(data_root, name)
        staging = os.path.join(data_root, f".{name}.partial")
        dropped = 0
        writers: list[ShardWriter] = []
        try:
            remove_quietly(files, staging)
            files.makedirs(staging)
            kept = 0
            for path in list_record_files(span_dir):
                writer = ShardWriter(os.path.join(staging, os.path.basename(path)))
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
                write_json(files, os.path.join(staging, SPAN_NOTE_FILE), note)
                publish(files, staging, span_dir)
                left_out[span_dir] = dropped
            else:
                remove_quietly(files, staging)
        except BaseException:
            for writer in writers:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001
                    pass
            remove_quietly(files, staging)
            raise
    record = read_record(data_root) or {}
    if record.get("label") != label:
        record["label"] = label
        write_record(data_root, record)
    return left_out


def _write_labelled(decoder, batch: list[bytes], label: str, writer: "ShardWriter") -> int:
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
