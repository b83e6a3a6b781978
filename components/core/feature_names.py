"""Internal names for a table's columns: what Keras layers, SavedModel signature arguments and TFLite inputs
are called, whatever the column's own name.

A column keeps its own name wherever data is keyed by it (tf.Example keys, the schema, the config, the
serving_default signature, which parses tf.Examples). Keras and TensorFlow accept fewer names than a CSV
header holds (no spaces, no `/`, no `€`, and signature arguments that differ only in case collide), so a
model's input layers, the serving_raw signature's arguments and the device model's inputs use
`internal_names(columns)[column]` instead. Layers derived from a column (its lookup, its missing-value
indicator) add a suffix with a `.`, which no internal name holds, so no column's name can collide with
them. Plain Python only: importing this module imports nothing else.
"""
from __future__ import annotations

import hashlib
import keyword
import re
from typing import Iterable

_VALID = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\Z")
_INVALID_RUN = re.compile(r"[^A-Za-z0-9_]+")
# Valid-looking names that no argument may take: Python's keywords (a signature's arguments are Python
# parameters) and `self` (the first parameter of the methods that call a signature or a TFLite runner).
RESERVED = frozenset(keyword.kwlist) | {"self"}
DERIVED_SEPARATOR = "."  # between an internal name and what a layer derives from it (see derived_name)


def internal_names(columns: Iterable[str]) -> dict[str, str]:
    """Input: column names (any text). Output: column -> its internal name: letters, digits and `_`, starting
    with a letter, at most 73 characters, unique among the columns even without regard to case, never a
    Python keyword or `self` (RESERVED). A column whose name already is such a name, and differs in more than
    case from every other column, keeps it;
    any other gets its characters outside that set replaced by `_` and 8 hex digits of its name's SHA-256
    added, so the same column gets the same name in every run."""
    columns = list(columns)
    folded: dict[str, int] = {}
    for column in columns:
        folded[column.lower()] = folded.get(column.lower(), 0) + 1
    names = {}
    for column in columns:
        if _VALID.match(column) and column not in RESERVED and folded[column.lower()] == 1:
            names[column] = column
            continue
        stem = _INVALID_RUN.sub("_", column).strip("_")[:64]
        if not stem or not stem[0].isalpha():
            stem = "c_" + stem
        names[column] = f"{stem}_{hashlib.sha256(column.encode('utf-8')).hexdigest()[:8]}"
    taken: dict[str, str] = {}
    for column, name in names.items():
        other = taken.setdefault(name.lower(), column)
        if other != column:  # two columns whose hashes collide as well: not expected to ever happen
            raise ValueError(f"columns {other!r} and {column!r} get the same internal name {name!r}")
    return names


def derived_name(internal_name: str, part: str) -> str:
    """The name of a layer or tensor that `part` (missing, lookup, bins, ...) derives from a column: never
    the internal name of another column."""
    return f"{internal_name}{DERIVED_SEPARATOR}{part}"
