"""The first pass over a CSV file: each column's type (int, float, date or string), a date column's form and a
number column's unit, decided from every cell of the column, and notes on the columns that may be meant otherwise.

The rules (a tf.Example holds one feature per column, under the column's own name):
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
"""
from __future__ import annotations

import dataclasses

import numpy as np

from pipeline.onboarding.cell_values import (DATE_FORM_NAMES, DATE_FORMS, INT_PATTERN, UNIX_SECONDS, missing_mask,
                                             number_text, parse_dates, unit_of)
from pipeline.onboarding.csv_reading import blocks, line_bound, refuse_nul

PLAUSIBLE_SECONDS = (631_152_000, 2_208_988_800)  # 1990-01-01 to 2040-01-01: integers that may be Unix seconds
# A column of numbers or dates may hold a few cells its type does not read (`unknown`, `—`, `2023-02-30`): at most
# this share of its present cells, which are then written as missing values and named in a note; more, and the
# column stays text
UNREADABLE_SHARE = 0.02
EXAMPLES = 3  # the unread cells a note quotes

_CODE = r"^[+-]?0[0-9]+$"  # a leading zero: a code (zip code, account), kept as text
_COMMA_NUMBER = r"^[+-]?([0-9]+,[0-9]+|[1-9][0-9]{0,2}(\.[0-9]{3})+(,[0-9]+)?)$"  # only a decimal comma reads it
_DATE_SHAPE = r"^[0-9]{1,4}[/.-][0-9]{1,2}[/.-][0-9]{1,4}"  # what a cell of every DATE_FORMS form starts with


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
        state.comma_numbers = pc.all(pc.or_(comma, pc.match_substring_regex(cells, INT_PATTERN))).as_py()
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

    unit = unit_of(cells)
    if unit is None or (unit and state.unit and unit != state.unit):
        state.kind = "string"
        return False
    state.unit = state.unit or unit
    plain, is_int, is_number = number_text(cells, delimiter, decimal, state.unit)
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
    rows, limit = 0, UNREADABLE_SHARE * line_bound(path)
    for block in blocks(path, delimiter, header):
        for column in columns:
            refuse_nul(path, delimiter, column, block[column], rows)
            cells = pc.utf8_trim_whitespace(block[column])
            present = pc.filter(cells, pc.invert(missing_mask(cells, missing_tokens)))
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
