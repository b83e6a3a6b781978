"""The columns and types a data root's first span fixed (COLUMNS_FILE), and the types a span is written with.

Later spans keep the types the first one fixed: the first span's columns and types are kept in COLUMNS_FILE in the
data root, and a later span is written with them (a float column whose new cells are all whole numbers stays
float), or with the types of a curated schema (`--schema`). A later span that lacks a column of the first span
(removed or renamed) is an error naming the missing and the new columns. Re-preparing the span that fixed the
types, when it is the only span, infers them again.
"""
from __future__ import annotations

import json
import os

from components.core.missing_values import MISSING_TOKENS
from components.core.path_operations import file_system
from pipeline.onboarding.csv_reading import CsvError
from pipeline.onboarding.span_folders import write_json
from pipeline.onboarding.type_inference import ColumnTypes, infer_types

COLUMNS_FILE = ".csv_columns.json"  # in the data root: the types the first span fixed (hidden: never read as data)


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


def check_columns(path: str, columns: list[str], record: dict, data_root: str) -> None:
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


def span_notes(columns: list[str], record: dict | None, fixed_by: str, span: int, data_root: str,
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


def record_types(data_root: str, span: int, types: ColumnTypes, record: dict | None, columns: list[str],
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
    write_json(files, path + ".partial", value)
    files.rename(path + ".partial", path)
