"""Numbers and dates as spreadsheets write them: a decimal comma (a European export: `;`, BOM, CRLF), a
percent sign, a currency symbol, Unix seconds, a column of dates of two forms, dates from year 1 to 9999, a few
unreadable cells among numbers or dates; and a short row after a quoted cell, named by its real line. Each is
read as a number or a date, or named in a note with the option that reads it."""
import contextlib
import datetime
import io
import json
import re

import pytest

from pipeline.commands.cli import main as cli_main
from tests.pipeline.span_files import read_span


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([str(arg) for arg in argv])
    return code, out.getvalue(), err.getvalue()


def _values(span_dir) -> dict[str, list]:
    """Column -> its values over the span's examples, sorted (rows are dealt round-robin to the shards)."""
    columns: dict[str, list] = {}
    for example in read_span(str(span_dir)):
        for name, feature in example.features.feature.items():
            columns.setdefault(name, []).extend(getattr(feature, feature.WhichOneof("kind")).value)
    return {name: sorted(values) for name, values in columns.items()}


EUROPEAN = ("\ufeffprice;rate;city;y\r\n4,5;1.466,14;Köln;a\r\n3,25;2,5;Wien;b\r\n10;3.000;Graz;a\r\n"
            "-0,75;12,0;Bern;b\r\n")


def test_a_decimal_comma_is_named_in_a_note_and_read_with_decimal_comma_for_every_later_span(tmp_path):
    (tmp_path / "eu.csv").write_bytes(EUROPEAN.encode("utf-8"))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "eu.csv", "--data", tmp_path / "as_text")
    assert code == 0, err
    assert re.search(r"^  price +string", out, re.M) and re.search(r"^  rate +string", out, re.M)
    assert ("note: columns 'price', 'rate' look like numbers written with a decimal comma (4,5 or 1.466,14) and were "
            "kept as text: give --decimal , to read them as numbers") in out

    data = tmp_path / "data"
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "eu.csv", "--data", data, "--decimal", ",")
    assert code == 0, err
    assert "(delimiter ';', decimal comma)" in out and "note:" not in out
    values = _values(data / "span-1")
    assert values["price"] == pytest.approx([-0.75, 3.25, 4.5, 10.0])
    assert values["rate"] == pytest.approx([2.5, 12.0, 1466.14, 3000.0]) and values["city"][0] == "Bern".encode()
    assert json.loads((data / ".csv_columns.json").read_text())["decimal"] == ","
    (tmp_path / "eu2.csv").write_bytes("price;rate;city;y\n1.250,5;7;Linz;a\n".encode("utf-8"))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "eu2.csv", "--data", data, "--span", 2)
    assert code == 0, err
    assert _values(data / "span-2")["price"] == [1250.5]  # the data root's decimal comma, without the option


def test_a_percent_sign_or_a_currency_symbol_in_every_cell_of_a_column_is_read_as_a_number(tmp_path):
    (tmp_path / "t.csv").write_text('share,cost,eur,offer,y\n12%,"$1,234.50",12 €,50% off,a\n'
                                    '7.5 %,$12,"1,5 €",none,b\n-3%,-$0.99,,half,a\n')
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / "data")
    assert code == 0, err
    assert re.search(r"^  share +float +0 missing +\(percent sign dropped: 12% is 12\)", out, re.M), out
    assert re.search(r"^  cost +float +0 missing +\(currency symbol \$ dropped\)", out, re.M), out
    assert re.search(r"^  offer +string", out, re.M) and re.search(r"^  eur +string", out, re.M), out
    values = _values(tmp_path / "data" / "span-1")
    assert values["share"] == pytest.approx([-3.0, 7.5, 12.0])
    assert values["cost"] == pytest.approx([-0.99, 12.0, 1234.5])


def test_unix_seconds_are_named_and_read_as_dates_with_dates_and_mixed_date_forms_are_named(tmp_path, monkeypatch):
    rows = ["when,mixed,x,y"] + [f"{1_700_000_000 + 86_400 * i},{'2024-01-05' if i % 2 else '25/12/2023'},{i % 7},"
                                 f"{'ab'[i % 2]}" for i in range(40)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / "plain")
    assert code == 0, err
    assert ("note: column 'when' looks like Unix seconds (2023-11-14 to 2023-12-23) and was written as an integer: "
            "give --dates when to read it as a date") in out
    assert ("note: column 'mixed' holds dates of several forms (ISO 8601, day first (DD/MM/YYYY)); it was kept as "
            "text: write every date of the column in one form") in out
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli("init", "--data", "plain", "--label", "y")
    assert code == 0, err
    assert ("left out: when (a different value in every record: an id, not a feature; it looks like Unix seconds "
            "(2023-11-14 to 2023-12-23): init --dates when reads it as a date (calendar features))") in out
    code, out, err = _cli("init", "--data", "plain", "--label", "y", "--dates", "when", "--name", "dated")
    assert code == 0 and "date features: when" in out, err

    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / "data", "--dates", "when")
    assert code == 0, err
    assert re.search(r"^  when +date +0 missing +\(Unix seconds; written as int64 seconds since 1970-01-01 UTC\)",
                     out, re.M), out
    assert json.loads((tmp_path / "data" / ".csv_columns.json").read_text())["types"]["when"] == "date"
    code, out, err = _cli("init", "--data", "data", "--label", "y", "--name", "prepared")
    assert code == 0 and "date features: when" in out, err


@pytest.mark.parametrize("text, line", [
    ('a,b,c\n1,"x, y",3\n4,"two\nlines",6\n7,"z"\n8,9,10\n', 5),  # after a cell with a line break
    ('a,b,c\n1,"x, y",3\n4,"two\nlines"\n8,9,10\n', 3),  # the short row holds the line break
], ids=["after_a_quoted_line_break", "holding_a_quoted_line_break"])
def test_a_short_row_with_quoted_cells_is_named_by_its_real_line(tmp_path, text, line):
    (tmp_path / "q.csv").write_text(text)
    code, _, err = _cli("prepare-data", "--csv", tmp_path / "q.csv", "--data", tmp_path / "data")
    assert code == 2 and f"q.csv: line {line}: 2 cells where the header names 3 columns" in err, err
    assert not (tmp_path / "data").exists()


def test_dates_from_year_1_to_9999_are_read_and_one_outside_is_refused_naming_its_column_and_the_range(tmp_path,
                                                                                                      monkeypatch):
    born = ["1905-06-30", "1920-01-01", "1926-03-04T08:00:00Z", "0001-01-01", "9999-12-31 23:59:59", "0900-05-05",
            "2099-12-31"]
    rows = ["born,y"] + [f"{date},{'ab'[i % 2]}" for i, date in enumerate(born * 4)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / "data")
    assert code == 0, err
    assert re.search(r"^  born +date +0 missing +\(ISO 8601;", out, re.M), out
    expected = sorted(int(datetime.datetime.fromisoformat(date).replace(tzinfo=datetime.timezone.utc).timestamp())
                      for date in born * 4)
    assert _values(tmp_path / "data" / "span-1")["born"] == expected
    # Year 0, or a zone that moves a date past 9999: refused, naming the line, the column and the range.
    for cell, line in (("0000-06-30", 3), ("9999-12-31T23:30:00-01:00", 3)):
        (tmp_path / "t2.csv").write_text(f"born,y\n1960-01-01,a\n{cell},b\n")
        code, _, err = _cli("prepare-data", "--csv", tmp_path / "t2.csv", "--data", tmp_path / "data", "--span", "2")
        assert code == 2 and (f"t2.csv: line {line}: column 'born' holds {cell!r}, which is not a date the model reads "
                              "(0001-01-01 to 9999-12-31 UTC)") in err, err
        assert not (tmp_path / "data" / "span-2").exists()
    # Milliseconds where Unix seconds are wanted: refused by prepare-data --dates and by init --dates alike.
    (tmp_path / "ms.csv").write_text("when,y\n" + "".join(f"{1_700_000_000_000 + 86_400_000 * i},{'ab'[i % 2]}\n"
                                                          for i in range(30)))
    code, _, err = _cli("prepare-data", "--csv", tmp_path / "ms.csv", "--data", tmp_path / "ms", "--dates", "when")
    assert code == 2 and ("line 2: column 'when' holds '1700000000000', which is not a date the model reads "
                          "(0001-01-01 to 9999-12-31 UTC) (Unix seconds, not milliseconds)") in err, err
    code, _, err = _cli("prepare-data", "--csv", tmp_path / "ms.csv", "--data", tmp_path / "ms")
    assert code == 0, err
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli("init", "--data", "ms", "--label", "y", "--dates", "when")
    assert code == 2 and ("--dates when: values from 1,700,000,000,000 to 1,702,505,600,000, outside the dates the "
                          "model reads (0001-01-01 to 9999-12-31 UTC") in err, err


def _table(rows: int, bad: dict[int, tuple[str, str]]) -> str:
    """A table of `rows` rows: a number, a date and a label; `bad`: row -> (number cell, date cell) in place of
    the row's own."""
    lines = ["amount,when,y"]
    for i in range(rows):
        number, date = bad.get(i, (f"{(i * 37) % 101 + 0.5}", f"2023-{1 + i % 12:02d}-{1 + i % 28:02d}"))
        lines.append(f"{number},{date},{'ab'[i % 2]}")
    return "\n".join(lines) + "\n"


def _span_bytes(span_dir) -> list[bytes]:
    return [path.read_bytes() for path in sorted(span_dir.glob("data-*.tfrecord.gz"))]


def test_a_few_unreadable_cells_leave_a_column_of_numbers_or_dates_read_as_such_with_them_missing_and_named(
        tmp_path, monkeypatch):
    bad = {5: ("unknown", "2023-02-30"), 100: ("—", "soon"), 400: ("unknown", "2023-05-06")}
    (tmp_path / "t.csv").write_text(_table(800, bad))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / "data")
    assert code == 0, err
    assert re.search(r"^  amount +float +3 missing", out, re.M) and re.search(r"^  when +date +2 missing", out, re.M)
    assert ("note: column 'amount': 3 cells ('unknown', '—', ...) are not a number: written as missing values (up to "
            "2% of a column's cells may be)") in out
    assert "note: column 'when': 2 cells ('2023-02-30', 'soon') are not a date of the form ISO 8601: written as" in out
    # The records are those of the same table with those cells left empty, byte for byte.
    emptied = {row: (cell if cell[0].isdigit() else "", date if date == "2023-05-06" else "")
               for row, (cell, date) in bad.items()}
    (tmp_path / "emptied.csv").write_text(_table(800, emptied))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "emptied.csv", "--data", tmp_path / "emptied")
    assert code == 0 and "note:" not in out, out
    assert _span_bytes(tmp_path / "data" / "span-1") == _span_bytes(tmp_path / "emptied" / "span-1")
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli("init", "--data", "data", "--label", "y")
    assert code == 0, err
    assert "note: column 'amount': 3 cells of span-1 ('unknown', '—', ...) are not a number" in out, out
    assert "float features: amount" in out and "date features: when" in out, out


def test_a_column_of_more_unreadable_cells_stays_text_and_says_which_and_a_later_span_keeps_the_rule(tmp_path,
                                                                                                    monkeypatch):
    from pipeline.onboarding import csv_reading

    # 1 in 50 is within 2%: a number; 1 in 49 is not, and neither are 20 in 400.
    for rows, kind in ((50, "float"), (49, "string")):
        (tmp_path / "t.csv").write_text(_table(rows, {3: ("n.a.", "2023-01-01")}))
        code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / f"d{rows}")
        assert code == 0 and re.search(rf"^  amount +{kind} ", out, re.M), out
    (tmp_path / "t.csv").write_text(_table(400, {i: ("unknown" if i % 40 else "?!", "2023-01-01")
                                                 for i in range(0, 400, 20)}))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / "text")
    assert code == 0 and re.search(r"^  amount +string ", out, re.M), out
    assert ("note: column 'amount' was kept as text: 20 of its cells ('?!', 'unknown', ...) are not numbers, more "
            "than the 2% of a column that prepare-data reads as missing") in out
    # Read in small blocks, a column stops being counted once its cells are more than 2% of the file's lines
    # (402): it cannot be numbers, whatever follows. The decision is the same.
    monkeypatch.setattr(csv_reading, "BLOCK_BYTES", 256)
    monkeypatch.setattr(csv_reading, "JOINED_ROWS", 40)
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t.csv", "--data", tmp_path / "blocks")
    assert code == 0 and re.search(r"^  amount +string ", out, re.M), out
    assert "note: column 'amount' was kept as text: at least 9 of its cells ('?!', 'unknown', ...)" in out, out
    monkeypatch.undo()
    # A column of text with a few numbers stays text, with no note.
    (tmp_path / "names.csv").write_text("name,y\n" + "".join(f"{'Ann Bob Cid'.split()[i % 3]}{i},{'ab'[i % 2]}\n"
                                                            for i in range(100)) + "42,a\n")
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "names.csv", "--data", tmp_path / "names")
    assert code == 0 and re.search(r"^  name +string ", out, re.M) and "note:" not in out, out
    # A later span, its types fixed by the first: a few unreadable cells are missing values, many stop it.
    (tmp_path / "t2.csv").write_text(_table(200, {7: ("tbd", "2023-01-01")}))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t2.csv", "--data", tmp_path / "d50", "--span", "2")
    assert code == 0 and "note: column 'amount': 1 cell ('tbd') is not a number: written as missing values" in out
    (tmp_path / "t3.csv").write_text(_table(20, {7: ("tbd", "2023-01-01"), 9: ("tbd", "later")}))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "t3.csv", "--data", tmp_path / "d50", "--span", "3")
    assert code == 2 and ("t3.csv: line 9: column 'amount' holds 'tbd', which is not a number (its type was fixed by "
                          "span-1") in err and "2 of its 20 cells are not, more than the 2% read as missing" in err, err
    assert not (tmp_path / "d50" / "span-3").exists()
