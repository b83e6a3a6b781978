"""What a CSV cell's text is, a whole column block at a time (pyarrow arrays in, arrays out): missing, a number
(with a unit, a decimal comma or thousands separators), a date of one of DATE_FORMS or of a strptime format; and
a block of a column written in its type (typed_block), as the tf.Example encoder takes it.
"""
from __future__ import annotations

import re
import typing

import numpy as np

from components.core.contract import DATE_RANGE, DATE_RANGE_TEXT

UNITS = ("%", "$", "€", "£", "¥", "₹")  # a number column may carry one of these in every cell
UNIX_SECONDS = "unix"  # the date form of an integer column declared a date (--dates): seconds since 1970-01-01 UTC

INT_PATTERN = r"^[+-]?(0|[1-9][0-9]*)$"
FLOAT_PATTERN = r"^[+-]?((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_THOUSANDS = r"^[+-]?[1-9][0-9]{0,2}(,[0-9]{3})+(\.[0-9]+)?$"
_FLOAT_COMMA = r"^[+-]?((0|[1-9][0-9]*)(,[0-9]*)?|,[0-9]+)([eE][+-]?[0-9]+)?$"  # decimal comma: 4,5
_THOUSANDS_DOT = r"^[+-]?[1-9][0-9]{0,2}(\.[0-9]{3})+(,[0-9]+)?$"  # decimal comma, dots between thousands: 1.466,14
_TIME = r"(?:[T ](?P<H>[0-9]{1,2}):(?P<M>[0-9]{2})(?::(?P<S>[0-9]{2})(?:[.,][0-9]+)?)?)?"
DATE_FORMS = {  # name -> regular expression with named parts; day-first and month-first share one shape
    "iso": r"^(?P<y>[0-9]{4})-(?P<m>[0-9]{1,2})-(?P<d>[0-9]{1,2})" + _TIME
           + r"\s*(?P<z>Z|[+-][0-9]{2}(?::?[0-9]{2})?)?$",
    "ymd": r"^(?P<y>[0-9]{4})/(?P<m>[0-9]{1,2})/(?P<d>[0-9]{1,2})" + _TIME + "$",
    "dmy": r"^(?P<d>[0-9]{1,2})[/.-](?P<m>[0-9]{1,2})[/.-](?P<y>[0-9]{4})" + _TIME + "$",
    "mdy": r"^(?P<m>[0-9]{1,2})[/.-](?P<d>[0-9]{1,2})[/.-](?P<y>[0-9]{4})" + _TIME + "$",
}
DATE_FORM_NAMES = {"iso": "ISO 8601", "ymd": "YYYY/MM/DD", "dmy": "day first (DD/MM/YYYY)",
                   "mdy": "month first (MM/DD/YYYY)", UNIX_SECONDS: "Unix seconds"}


def missing_mask(cells, tokens: tuple[str, ...]):
    """Input: text cells and the missing-value tokens (lower case). Output: True where a cell is empty or, compared
    without case, one of the tokens."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pc.equal(cells, "")
    if tokens:
        mask = pc.or_(mask, pc.is_in(pc.utf8_lower(cells), value_set=pa.array(tokens)))
    return mask


def number_text(cells, delimiter: str, decimal: str = ".", unit: str = ""):
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
        is_int = pc.or_(pc.match_substring_regex(cells, INT_PATTERN), pc.and_(thousands, pc.invert(
            pc.match_substring(cells, ","))))
        plain = pc.replace_substring(pc.replace_substring(cells, ".", ""), ",", ".")
        return plain, is_int, is_number
    is_int = pc.match_substring_regex(cells, INT_PATTERN)
    is_number = pc.match_substring_regex(cells, FLOAT_PATTERN)
    if delimiter == "," or unit not in ("", "%"):
        thousands = pc.match_substring_regex(cells, _THOUSANDS)
        is_number = pc.or_(is_number, thousands)
        is_int = pc.or_(is_int, pc.and_(thousands, pc.invert(pc.match_substring(cells, "."))))
        return pc.replace_substring(cells, ",", ""), is_int, is_number
    return cells, is_int, is_number


def unit_of(cells) -> str | None:
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
        valid = pc.match_substring_regex(cells, INT_PATTERN).to_numpy(zero_copy_only=False)
        try:
            seconds = pc.cast(pc.if_else(pc.match_substring_regex(cells, INT_PATTERN), cells, "0"), pa.int64())
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


class Typed(typing.NamedTuple):
    """One block of a column in its type: `values` (a pyarrow list array, one value per row: a placeholder where
    the cell is missing or unread), `bad` (the row of the first cell that does not fit, or -1), `wanted` (what that
    cell should have been, when not simply the column's type) and `unread` (the present cells no number or date
    reads, written as missing values while they are few: UNREADABLE_SHARE)."""
    values: object
    bad: int
    wanted: str
    unread: np.ndarray


def typed_block(column: str, kind: str, form: str, cells, missing, delimiter: str, decimal: str = ".",
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
        plain, is_int, is_number = number_text(filled, delimiter, decimal, unit)
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
