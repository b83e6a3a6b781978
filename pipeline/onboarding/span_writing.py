"""The second pass over a CSV file: its rows written as a span's TFRecord shards, each cell in its column's type.

Rows whose every cell is empty (a spreadsheet's trailing `,,,`) are skipped and counted; rows with a missing cell
in a `required` column (and, once `init` chose it, the label) are left out and counted. A cell that does not fit
its column's type (a fraction in an integer column) is an error naming the file, line, column and cell, and so are
unreadable cells beyond UNREADABLE_SHARE of a column. Nothing is written then: the span is written into a hidden
folder beside it (`.span-N.partial`, never read as a span) and renamed into place only when every row was read
and every file closed; on any failure (a full disk included) that folder is removed and an existing span stays
as it was.
"""
from __future__ import annotations

import os
import re

import numpy as np

from components.core.path_operations import file_system
from pipeline.onboarding.cell_values import DATE_FORM_NAMES, missing_mask, typed_block
from pipeline.onboarding.csv_reading import CsvError, blocks, line_of
from pipeline.onboarding.span_folders import SPAN_NOTE_FILE, publish, remove_quietly, write_json
from pipeline.onboarding.tfrecord_shards import SHARDS, ShardWriter, serialize_rows
from pipeline.onboarding.type_inference import UNREADABLE_SHARE, ColumnTypes, Unreadable

_KIND_TEXT = {"int": "an integer", "float": "a number", "date": "a date", "string": "text"}


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


def write_span(path: str, delimiter: str, header: list[str], data_root: str, span: int, types: ColumnTypes,
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


def _indices(rows: np.ndarray):
    import pyarrow as pa
    return pa.array(rows)
