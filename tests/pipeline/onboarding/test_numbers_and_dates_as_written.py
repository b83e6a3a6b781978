"""Numbers and dates as spreadsheets write them: a decimal comma (a European export: `;`, BOM, CRLF), a
percent sign, a currency symbol, Unix seconds, a column of dates of two forms, dates from year 1 to 9999; and a
short row after a quoted cell, named by its real line. Each is read as a number or a date, or named in a note with the option that
reads it."""
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
