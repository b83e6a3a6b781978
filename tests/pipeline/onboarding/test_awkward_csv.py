"""Real tables as spreadsheets, pandas and databases write them: dates, any header, later spans of the same
table, the cells that mean "missing", labels pandas wrote as floats, and configs that load back as written.
Each case asserts the exact exit status and message, or what was written."""
import datetime
import os
import re

import pytest
import tensorflow as tf

from pipeline.commands.cli import main as cli_main


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli_main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _values(span_dir) -> list[dict]:
    """The span's examples as {feature: values}, in the CSV's row order (rows are dealt round-robin to the
    shards)."""
    shards = [[_as_dict(tf.train.Example.FromString(record)) for record in tf.data.TFRecordDataset(
        str(path), compression_type="GZIP").as_numpy_iterator()] for path in sorted(span_dir.glob("*.gz"))]
    return [shard[i] for i in range(max(map(len, shards))) for shard in shards if i < len(shard)]


def _as_dict(example: tf.train.Example) -> dict:
    return {name: list(getattr(feature, feature.WhichOneof("kind")).value)
            for name, feature in example.features.feature.items()}


def _prepare(capsys, tmp_path, text: str, *argv, name="t.csv", data="data") -> tuple[int, str, str]:
    (tmp_path / name).write_text(text, encoding="utf-8")
    return _cli(capsys, "prepare-data", "--csv", str(tmp_path / name), "--data", str(tmp_path / data), *argv)


def _utc(*parts) -> int:
    return int(datetime.datetime(*parts, tzinfo=datetime.timezone.utc).timestamp())


# ------------------------------------------------------------------------------------------------ dates

def test_iso_dates_with_or_without_time_and_zone_become_seconds_since_the_epoch(tmp_path, capsys):
    code, out, err = _prepare(capsys, tmp_path, "when,slash,v\n2024-01-05,2024/01/05,1\n"
                                                "2024-02-29T10:30:00Z,2024/2/29 10:30,2\n"
                                                "1969-07-20 20:17:40+01:00,1969/07/20,3\n,,4\n")
    assert code == 0, err
    assert re.search(r"when +date +1 missing +\(ISO 8601; written as int64 seconds since 1970-01-01 UTC\)", out)
    assert re.search(r"slash +date +1 missing +\(YYYY/MM/DD;", out)
    rows = _values(tmp_path / "data" / "span-1")
    assert [row.get("when") for row in rows] == [[_utc(2024, 1, 5)], [_utc(2024, 2, 29, 10, 30)],
                                                [_utc(1969, 7, 20, 19, 17, 40)], None]
    assert [row.get("slash") for row in rows] == [[_utc(2024, 1, 5)], [_utc(2024, 2, 29, 10, 30)],
                                                 [_utc(1969, 7, 20)], None]


@pytest.mark.parametrize("cells, form, expected", [
    (["25/12/2023", "01/02/2024"], "day first", [_utc(2023, 12, 25), _utc(2024, 2, 1)]),
    (["12/25/2023", "01/02/2024"], "month first", [_utc(2023, 12, 25), _utc(2024, 1, 2)]),
    (["25.12.2023 08:15", "01.02.2024 23:59"], "day first", [_utc(2023, 12, 25, 8, 15), _utc(2024, 2, 1, 23, 59)]),
], ids=["day_first", "month_first", "dotted_with_time"])
def test_day_first_and_month_first_dates_are_read_when_the_column_tells_which(tmp_path, capsys, cells, form, expected):
    code, out, err = _prepare(capsys, tmp_path, "d,v\n" + "".join(f"{cell},{i}\n" for i, cell in enumerate(cells)))
    assert code == 0, err
    assert re.search(rf"d +date +0 missing +\({form}", out), out
    assert [row["d"] for row in _values(tmp_path / "data" / "span-1")] == [[value] for value in expected]


def test_dates_that_do_not_say_day_or_month_first_stay_text_unless_a_format_is_given(tmp_path, capsys):
    text = "d,v\n01/02/2024,1\n03/04/2024,2\n"
    code, out, err = _prepare(capsys, tmp_path, text)
    assert code == 0, err
    assert re.search(r"^  d +string", out, re.M)
    assert ("note: column 'd' looks like dates, but no cell says whether the day or the month comes first; it was "
            "kept as text (give --date-format 'd=%d/%m/%Y' or 'd=%m/%d/%Y' to read it as dates)") in out
    code, out, err = _prepare(capsys, tmp_path, text, "--date-format", "d=%d/%m/%Y", data="formatted")
    assert code == 0, err
    assert [row["d"] for row in _values(tmp_path / "formatted" / "span-1")] == [[_utc(2024, 2, 1)], [_utc(2024, 4, 3)]]
    code, _, err = _prepare(capsys, tmp_path, text, "--date-format", "day=%d/%m/%Y", data="wrong")
    assert code == 2 and "--date-format names the column 'day', which the header does not have" in err, err


# --------------------------------------------------------------------------------------------- any header

def test_any_header_keeps_its_names_and_only_names_that_cannot_be_told_apart_are_refused(tmp_path, capsys):
    header = ["trip miles", "prix (€)", "Größe", "miles/gallon", "Case", "case", "fare", "fare_missing", "features"]
    code, out, err = _prepare(capsys, tmp_path, ",".join(header) + "\n" + ",".join(["1"] * len(header)) + "\n")
    assert code == 0, err
    assert set(_values(tmp_path / "data" / "span-1")[0]) == set(header)
    code, _, err = _prepare(capsys, tmp_path, "a,b, a \n1,2,3\n", data="twins")
    assert code == 2 and ("line 1: the header repeats the column name(s) a (columns 1 'a' and 3 ' a ' cannot be "
                          "told apart)") in err, err
    assert not (tmp_path / "twins").exists()


# ------------------------------------------------------------------------------------------------- cells

def test_the_usual_missing_tokens_and_non_finite_numbers_are_absent_features(tmp_path, capsys):
    tokens = ["inf", "-inf", "NaN", "nan", "-", "?", "N/A", "null", "None", "NA", "Infinity", ""]
    text = "x,y\n" + "".join(f"{token},{i}\n" for i, token in enumerate(tokens)) + "2.5,99\n"
    code, out, err = _prepare(capsys, tmp_path, text)
    assert code == 0, err
    assert re.search(rf"x +float +{len(tokens)} missing", out), out
    rows = _values(tmp_path / "data" / "span-1")
    assert [row.get("x") for row in rows] == [None] * len(tokens) + [[2.5]]
    code, out, err = _prepare(capsys, tmp_path, text, "--na", "", data="literal")  # no tokens: text
    assert code == 0 and re.search(r"x +string +1 missing", out), out


def test_codes_thousands_and_python_only_literals(tmp_path, capsys):
    code, out, err = _prepare(capsys, tmp_path, 'zip,amount,count,hex,small\n02134,"1,234.5",1_000,0x1F,3\n'
                                                '10001,12,5,7,-4\n')
    assert code == 0, err
    row = _values(tmp_path / "data" / "span-1")[0]
    assert row == {"zip": [b"02134"], "amount": [1234.5], "count": [b"1_000"], "hex": [b"0x1F"], "small": [3]}


def test_empty_rows_are_skipped_and_counted_and_a_table_without_rows_exits_2(tmp_path, capsys):
    code, out, err = _prepare(capsys, tmp_path, "a,b\n1,x\n,\n2,y\n,\n,\n")
    assert code == 0, err
    assert "wrote 2 tf.Examples" in out and "skipped 3 empty row(s)" in out
    code, _, err = _prepare(capsys, tmp_path, "a,b\n", data="header_only")
    assert code == 2 and re.search(r"^data error: .*t\.csv: no data rows \(only a header\)$", err, re.M), err
    assert not (tmp_path / "header_only").exists()
    code, _, err = _prepare(capsys, tmp_path, "a,b\n,\n", data="empty_rows")
    assert code == 2 and "no data rows (1 row(s), every one empty or left out)" in err, err


@pytest.mark.parametrize("span", ["-1", "0"])
def test_a_span_number_below_1_exits_2(tmp_path, capsys, span):
    code, _, err = _prepare(capsys, tmp_path, "a,b\n1,2\n", "--span", span)
    assert code == 2 and f"data error: --span {span}: span numbers start at 1" in err, err
    assert not (tmp_path / "data").exists()


# ----------------------------------------------------------------------------------------- later spans

def test_a_later_span_keeps_the_first_spans_types_and_refuses_a_cell_that_does_not_fit(tmp_path, capsys):
    code, _, err = _prepare(capsys, tmp_path, "price,n,when,city\n1.5,3,2024-01-31,Paris\n2.25,4,2024-02-01,Lyon\n")
    assert code == 0, err
    code, out, err = _prepare(capsys, tmp_path, "price,n,when,city,new\n2,5,2024-03-01,Nice,q\n3,6,2024-03-02,1,r\n",
                              "--span", "2", name="t2.csv")
    assert code == 0, err
    assert "column types fixed by span-1" in out and re.search(r"price +float", out)
    rows = _values(tmp_path / "data" / "span-2")
    assert rows[0]["price"] == [2.0] and rows[1]["city"] == [b"1"] and rows[0]["when"] == [_utc(2024, 3, 1)]
    # A whole float in an int column converts; a fraction does not fit, and nothing of the span is written.
    code, _, err = _prepare(capsys, tmp_path, 'price,n,when,city\n1,7.0,2024-03-03,Nice\n\n1,"7.5",2024-03-04,Nice\n',
                            "--span", "3", name="t3.csv")
    assert code == 2 and ("t3.csv: line 4: column 'n' holds '7.5', which is not an integer (its type was fixed by "
                          "span-1") in err, err
    assert not (tmp_path / "data" / "span-3").exists()


def test_a_curated_schema_fixes_the_types_of_a_span(tmp_path, capsys):
    schema = tmp_path / "schema.pbtxt"
    schema.write_text('feature { name: "a" type: FLOAT }\nfeature { name: "b" type: BYTES }\n')
    code, out, err = _prepare(capsys, tmp_path, "a,b\n1,2\n3,4\n", "--schema", str(schema))
    assert code == 0, err
    assert f"column types fixed by the schema {schema}" in out
    assert _values(tmp_path / "data" / "span-1")[0] == {"a": [1.0], "b": [b"2"]}


def test_small_blocks_are_joined_in_file_order_and_a_bad_cell_still_names_its_line(tmp_path, capsys, monkeypatch):
    # A wide file: pyarrow's blocks hold few rows each; they are joined before the rules run, and every row, its
    # values and the line an error names stay those of the file.
    from pipeline.onboarding import csv_reading

    monkeypatch.setattr(csv_reading, "BLOCK_BYTES", 256)
    monkeypatch.setattr(csv_reading, "JOINED_ROWS", 40)
    text = "a,b,c\n" + "".join(f"{i},{i * 0.5},{'x' if i % 2 else 'y'}\n" for i in range(100))
    (tmp_path / "t.csv").write_text(text)
    blocks = list(csv_reading.blocks(str(tmp_path / "t.csv"), ",", ["a", "b", "c"]))
    sizes = [len(block["a"]) for block in blocks]
    assert len(blocks) > 1 and sum(sizes) == 100 and all(size >= 40 for size in sizes[:-1]), sizes
    assert [int(cell) for block in blocks for cell in block["a"].to_pylist()] == list(range(100))
    code, _, err = _prepare(capsys, tmp_path, text)
    assert code == 0, err
    rows = _values(tmp_path / "data" / "span-1")
    assert [row["a"] for row in rows] == [[i] for i in range(100)] and rows[99]["c"] == [b"x"]
    bad = text.replace("\n77,", "\n77.5,")  # the 78th data row, line 79, in the second joined block
    code, _, err = _prepare(capsys, tmp_path, bad, "--span", "2", name="t2.csv")
    assert code == 2 and "t2.csv: line 79: column 'a' holds '77.5', which is not an integer" in err, err


# -------------------------------------------------------------------------------------------------- init

def test_init_reads_a_label_pandas_wrote_as_floats_marks_dates_and_writes_a_config_that_loads_back(
        tmp_path, capsys, monkeypatch):
    rows = ["when,temp,label,on,2024,Größe (€)"]
    start = datetime.date(2021, 1, 1)
    for i in range(120):
        day = start + datetime.timedelta(days=3 * i)
        rows.append(f"{day.isoformat()},{i % 17 + 0.5},{'1.0' if day.month in (6, 7, 8) else '0.0'},"
                    f"x{i % 3},{i % 5},{'ab'[i % 2]}")
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    assert cli_main(["prepare-data", "--csv", str(tmp_path / "t.csv"), "--data", str(tmp_path / "data")]) == 0
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "init", "--data", "data", "--label", "label", "--name", "2024", "--exclude", "on")
    assert code == 0, err
    assert "task: binary (float label with 2 distinct values, all whole)" in out
    assert "classes: 0 '0', 1 '1' (positive: '1')" in out and "date features: when" in out
    from pipeline.config import _read_yaml
    raw = _read_yaml(str(tmp_path / "2024.yaml"))
    assert raw["pipeline_name"] == "2024" and raw["task"]["exclude"] == ["on"]
    assert raw["task"] == {"type": "binary", "label": "label", "classes": ["0", "1"], "exclude": ["on"],
                           "dates": ["when"]}
    import tensorflow_data_validation as tfdv
    from tensorflow_metadata.proto.v0 import schema_pb2
    features = {f.name: f for f in tfdv.load_schema_text(str(tmp_path / "schemas/2024/schema.pbtxt")).feature}
    assert features["when"].time_domain.integer_format == schema_pb2.TimeDomain.UNIX_SECONDS
    assert not features["when"].HasField("drift_comparator")  # a date moves on by nature
    assert features["on"].WhichOneof("domain_info") is None and not features["on"].HasField("presence")
    assert features["Größe (€)"].WhichOneof("domain_info") is None  # open to new categories
    assert features["Größe (€)"].HasField("drift_comparator")


def test_a_class_the_config_does_not_name_stops_training_naming_the_value(tmp_path):
    from components.settings import TaskConfig
    from components.core.tasks import TaskError
    from components.trainer.labels import read_labels
    from components.core.model_module import load_model_module, task_of
    from tests.pipeline.span_files import write_records

    schema = tmp_path / "schema.pbtxt"
    schema.write_text('feature { name: "species" type: BYTES }\nfeature { name: "mass" type: FLOAT }\n')
    records = []
    for species in ["Adelie", "Gentoo", "Emperor", "Adelie", "Emperor"]:
        example = tf.train.Example()
        example.features.feature["species"].bytes_list.value.append(species.encode())
        example.features.feature["mass"].float_list.value.append(1.0)
        records.append(example)
    path = write_records(tmp_path / "span" / "data.tfrecord", records)
    module = load_model_module("models.tabular", TaskConfig("multiclass", "species", ["Adelie", "Chinstrap", "Gentoo"]),
                               str(schema))
    with pytest.raises(TaskError, match=re.escape(
            "train split: label 'species': label -1 is outside the declared classes (0 'Adelie', 1 'Chinstrap', 2 "
            "'Gentoo'); 2 example(s) have such labels; those records hold 'species': 'Emperor' (2): add such a class "
            "to task.classes in the config (in label order), or leave those records out")):
        read_labels([path], module, task_of(module), "train")
    assert os.path.exists(path)


# --------------------------------------------------------------------------- the three commands, two spans

def _table(start: datetime.date, days: int, seed: int, categories: str, whole_prices: bool) -> str:
    """A shop's days as a spreadsheet writes them: awkward headers, an ISO date, a category, a price in euros
    (whole numbers only when `whole_prices`), a ratio with infinite and missing cells; the label (a busy day)
    follows the season and the price."""
    import random

    generator = random.Random(seed)
    lines = ["sold at,prix (€),Größe,miles/gallon,Case,case,busy day"]
    for offset in range(days):
        day = start + datetime.timedelta(days=offset)
        price = generator.uniform(5, 95)
        price_cell = str(round(price)) if whole_prices else f"{price:.2f}"
        ratio = generator.choice(["inf", "", "-", f"{generator.uniform(0, 3):.3f}", f"{generator.uniform(0, 3):.3f}"])
        summer = 5 <= day.month <= 8
        busy = generator.random() < (0.85 if summer else 0.15) * (1.2 if price < 50 else 0.8)
        lines.append(f"{day.isoformat()},{price_cell},{categories[offset % len(categories)]},{ratio},{offset % 4},"
                     f"{'xy'[offset % 2]},{1.0 if busy else 0.0}")
    return "\n".join(lines) + "\n"


@pytest.mark.e2e
def test_an_awkward_table_is_pushed_and_a_later_span_with_a_new_month_category_and_whole_floats_is_too(
        tmp_path, monkeypatch):
    """prepare-data, init and run on a table with any header and a date; then a second span with a new month,
    a new category and prices written as whole numbers: both runs blessed and pushed, the device model takes
    the date as seconds and the report says so."""
    import contextlib
    import io
    import json

    monkeypatch.chdir(tmp_path)
    # Enough days, categories dealt in turn, that the eval splits' category shares differ by sampling noise well
    # under the drift threshold (0.15): the new category's 5% is what moves the drift measure.
    (tmp_path / "shop-1.csv").write_text(_table(datetime.date(2018, 1, 1), 1500, 1, "ABC", False), encoding="utf-8")
    (tmp_path / "shop-2.csv").write_text(_table(datetime.date(2022, 2, 9), 900, 2, "ABC" * 6 + "D", True),
                                         encoding="utf-8")
    assert cli_main(["prepare-data", "--csv", "shop-1.csv", "--data", "data/shop"]) == 0
    assert cli_main(["init", "--data", "data/shop", "--label", "busy day"]) == 0
    assert "dates: [\"sold at\"]" in (tmp_path / "shop.yaml").read_text(encoding="utf-8")

    def run() -> str:
        out, err = io.StringIO(), io.StringIO()  # not capsys: the run's log handlers outlive one capture
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli_main(["run", "--config", "shop.yaml"])
        assert code == 0, err.getvalue()[-3000:] + out.getvalue()[-3000:]
        return out.getvalue()

    first = run()
    assert "blessed: yes" in first and "training: binary" in first, first
    assert cli_main(["prepare-data", "--csv", "shop-2.csv", "--data", "data/shop", "--span", "2"]) == 0
    second = run()
    assert "blessed: yes" in second, second
    serving = tmp_path / "output" / "shop" / "serving"
    versions = sorted(os.listdir(serving), key=int)
    assert len(versions) == 2  # one version pushed by each run
    newest = serving / versions[-1]
    export = json.loads((newest / "export_report.json").read_text())
    date_input = next(item for item in export["device_inputs"] if item["name"] == "sold at")
    assert date_input["dtype"] == "int64" and "seconds since 1970-01-01 UTC" in date_input["note"]
    assert {item["name"] for item in export["device_inputs"]} == {"sold at", "prix (€)", "Größe", "miles/gallon",
                                                                  "Case", "case"}
    example = tf.train.Example()
    example.features.feature["sold at"].int64_list.value.append(_utc(2023, 7, 14))
    example.features.feature["prix (€)"].float_list.value.append(20.0)
    example.features.feature["Größe"].bytes_list.value.append("D".encode())
    example.features.feature["miles/gallon"].float_list.value.append(float("inf"))
    outputs = tf.saved_model.load(str(newest)).signatures["serving_default"](
        examples=tf.constant([example.SerializeToString()]))
    probability = float(outputs["probabilities"].numpy().reshape(-1)[0])
    assert 0.0 <= probability <= 1.0


def test_init_infers_the_schema_from_a_sample_but_requires_no_column_some_record_lacks(tmp_path, capsys,
                                                                                        monkeypatch):
    """The statistics the schema comes from see a bounded sample; presence comes from every record: a column
    absent from one record only (which the sample may never see) is not required in every record."""
    from pipeline.onboarding import span_columns

    monkeypatch.setattr(span_columns, "STATISTICS_ROWS", 10)
    rows = ["z,late,y"] + [f"{i % 4},{i % 3 if i < 59 else ''},{i % 2}" for i in range(60)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    assert cli_main(["prepare-data", "--csv", str(tmp_path / "t.csv"), "--data", str(tmp_path / "data")]) == 0
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "init", "--data", "data", "--label", "y")
    assert code == 0, err
    import tensorflow_data_validation as tfdv
    features = {f.name: f for f in tfdv.load_schema_text(str(tmp_path / "schemas/data/schema.pbtxt")).feature}
    assert not features["late"].HasField("shape") and features["late"].presence.min_fraction < 1.0
    assert features["z"].presence.min_fraction == 1.0 or features["z"].HasField("shape")  # always present: required
