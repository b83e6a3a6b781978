"""Spans that change as a table lives on, each through the commands a user types: a column empty in the first
span and filled later, a column added, removed or renamed, rows without a label, a span prepared again after a
typo is fixed, and a write that fails half-way. Each ends as a user expects: written and trained, or an exit
whose message names the file, line or column and says how to go on, with nothing half written."""
import contextlib
import errno
import io
import json
import os
import random
import re

import pytest
import tensorflow as tf

from components.tfrecord_ingest.tfrecord_files import split_of
from pipeline.commands.cli import main as cli_main
from tests.pipeline.span_files import read_span


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()  # not capsys: a run's log handlers outlive one capture
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([str(arg) for arg in argv])
    return code, out.getvalue(), err.getvalue()


def _table(path, header: list[str], rows: list[tuple]) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(",".join(header) + "\n" + "".join(",".join(map(str, row)) + "\n" for row in rows))
    return str(path)


def _rows(count: int, seed: int, unlabelled_every: int = 0, later=lambda rng: "") -> list[tuple]:
    """(x, kind, later, y): y follows x and kind; every `unlabelled_every`-th row has no label."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        x, kind = round(rng.gauss(0, 1), 3), rng.choice("pqr")
        label = "yes" if x + (kind == "p") + rng.gauss(0, 0.3) > 0.5 else "no"
        rows.append((x, kind, later(rng), "" if unlabelled_every and i % unlabelled_every == 3 else label))
    return rows


def _record(data) -> dict:
    return json.loads((data / ".csv_columns.json").read_text())


# ------------------------------------------------------------------------------------------ columns change

def test_a_column_empty_in_span_1_is_listed_by_init_and_a_later_span_may_fill_it_or_add_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    _table(tmp_path / "one.csv", ["x", "kind", "later", "y"], _rows(120, 0))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data)
    assert code == 0, err
    assert re.search(r"^  later +empty +120 missing +\(no value in any row: no feature; a later span may fill it\)",
                     out, re.M), out
    code, out, err = _cli("init", "--data", data, "--label", "y")
    assert code == 0, err
    assert ("left out: later (no value in any record, so not in the schema; a later span that fills it is left out "
            "of the model until init is run again)") in out
    assert '# left out, not in the schema: "later"' in (tmp_path / "data.yaml").read_text()

    # Span 2 fills the column (whole numbers) and adds one: each takes the type its cells have.
    filled = [row[:2] + (i % 7,) + row[3:] + (f"c{i % 3}",) for i, row in enumerate(_rows(60, 1))]
    _table(tmp_path / "two.csv", ["x", "kind", "later", "y", "added"], filled)
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "two.csv", "--data", data, "--span", 2)
    assert code == 0, err
    assert re.search(r"^  later +int +0 missing$", out, re.M) and re.search(r"^  added +string", out, re.M), out
    assert ("note: column(s) new in this span: 'added' (not in span-1): the model leaves them out until init is run "
            "again or the schema lists them") in out
    assert "note: column(s) 'later', empty until now, hold values in this span (typed int)" in out
    record = _record(data)
    assert record["types"]["later"] == "int" and record["empty"] == []
    assert record["columns"] == ["x", "kind", "later", "y"]
    later = [example.features.feature["later"].int64_list.value[0] for example in read_span(str(data / "span-2"))]
    assert sorted(later) == sorted(i % 7 for i in range(60))


@pytest.mark.parametrize("header, expected", [
    (["x", "y", "later"], r"the header lacks the column\(s\) 'kind' that span-1 has A later span"),
    (["x", "Kind", "later", "y"], r"the header lacks the column\(s\) 'kind' that span-1 has; it has new column\(s\) "
                                  r"'Kind': renamed\? A later span keeps the first span's columns"),
], ids=["removed", "renamed"])
def test_a_span_that_removes_or_renames_a_column_exits_2_naming_both_and_writes_nothing(tmp_path, header, expected):
    data = tmp_path / "data"
    _table(tmp_path / "one.csv", ["x", "kind", "later", "y"], _rows(30, 0, later=lambda rng: rng.randint(0, 3)))
    assert _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data)[0] == 0
    rows = [tuple({"x": 1.5, "kind": "p", "Kind": "p", "later": 2, "y": "no"}[name] for name in header)] * 5
    _table(tmp_path / "two.csv", header, rows)
    code, _, err = _cli("prepare-data", "--csv", tmp_path / "two.csv", "--data", data, "--span", 2)
    assert code == 2 and re.search(rf"^data error: .*two\.csv: {expected}", err, re.M), err
    assert "or prepare the table into a new data root and run init on it" in err
    assert sorted(os.listdir(data)) == [".csv_columns.json", "span-1"]


# ------------------------------------------------------------------------------------ rows without a label

def test_rows_without_a_label_are_left_out_by_init_counted_and_left_out_of_later_spans(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    data = tmp_path / "data"
    _table(tmp_path / "one.csv", ["x", "kind", "later", "y"], _rows(100, 0, unlabelled_every=10))
    assert _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data)[0] == 0
    before = (data / "span-1" / "data-00000-of-00004.tfrecord.gz").read_bytes()

    code, _, err = _cli("init", "--data", data, "--label", "y", "--refuse-unlabelled")  # today's refusal, kept
    assert code == 2 and "--label y: missing in 10 of 100 records" in err and "--require y" in err, err
    assert (data / "span-1" / "data-00000-of-00004.tfrecord.gz").read_bytes() == before
    assert not os.path.exists("data.yaml")

    code, out, err = _cli("init", "--data", data, "--label", "y")
    assert code == 0, err
    assert "read 90 records from " in out
    assert "(10 more without a value for the label 'y', left out)" in out
    assert ("left out of training and evaluation: 10 record(s) without a value for the label 'y' (span-1: 10; the "
            "spans were written again without them, the CSV still holds them;") in out
    examples = read_span(str(data / "span-1"))
    assert len(examples) == 90 and all("y" in example.features.feature for example in examples)
    note = json.loads((data / "span-1" / ".span.json").read_text())
    assert note["rows"] == 90 and note["left_out"] == [{"rows": 10, "why": "no value for the label 'y'"}]
    assert _record(data)["label"] == "y"

    # A later span leaves rows without the label out as it is prepared, and says how many.
    _table(tmp_path / "two.csv", ["x", "kind", "later", "y"], _rows(50, 1, unlabelled_every=5))
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "two.csv", "--data", data, "--span", 2)
    assert code == 0, err
    assert "left out 10 row(s) with a missing value in a required column: 'y' (the label init chose)" in out
    assert len(read_span(str(data / "span-2"))) == 40


def test_records_of_ones_own_without_a_label_are_named_not_rewritten(tmp_path):
    import tensorflow as tf

    from tests.pipeline.span_files import write_records

    examples = []
    for i in range(40):
        example = tf.train.Example()
        example.features.feature["x"].float_list.value.append(i / 10)
        if i % 8:
            example.features.feature["y"].bytes_list.value.append(b"a" if i % 3 else b"b")
        examples.append(example)
    path = write_records(tmp_path / "own" / "span-1" / "part.tfrecord", examples)
    before = open(path, "rb").read()
    code, _, err = _cli("init", "--data", tmp_path / "own", "--label", "y")
    assert code == 2 and "--label y: missing in 5 of 40 records" in err and "these TFRecord files are yours" in err, err
    assert open(path, "rb").read() == before


# ------------------------------------------------------------------------------------ preparing a span again

def test_preparing_the_only_span_again_infers_its_types_again_and_with_later_spans_says_how_to_reset(tmp_path):
    data = tmp_path / "data"
    typo = [(i, "1O" if i == 3 else i % 5, "yes" if i % 2 else "no") for i in range(20)]
    _table(tmp_path / "one.csv", ["id", "n", "y"], typo)
    code, out, _ = _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data)
    assert code == 0 and re.search(r"^  n +string", out, re.M)
    fixed = [(i, i % 5, "yes" if i % 2 else "no") for i in range(20)]
    _table(tmp_path / "one.csv", ["id", "n", "y"], fixed)
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data)
    assert code == 0, err
    assert re.search(r"^  n +int", out, re.M) and "note: column types inferred again: span-1 is the data root's only " \
                                                  "span" in out, out
    assert _record(data)["types"]["n"] == "int"

    assert _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data, "--span", 2)[0] == 0
    code, out, err = _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data)
    assert code == 0, err
    assert (f"note: span-1 fixed these column types before and other spans were written with them; to infer them "
            f"again, delete {data / '.csv_columns.json'} and prepare every span again, from span 1") in out


# --------------------------------------------------------------------------------------- a failed write

def test_a_write_that_fails_half_way_leaves_no_half_written_span_and_init_reads_on(tmp_path, monkeypatch):
    """A full disk: a shard's write fails after some records, and so does every close (gzip's last flush)."""
    from pipeline.onboarding import tfrecord_shards

    data = tmp_path / "data"
    _table(tmp_path / "one.csv", ["x", "kind", "later", "y"], _rows(60, 0))
    assert _cli("prepare-data", "--csv", tmp_path / "one.csv", "--data", data)[0] == 0
    span_1 = {name: (data / "span-1" / name).read_bytes() for name in os.listdir(data / "span-1")}
    write, writes = tfrecord_shards.ShardWriter.write, []

    def full_disk_write(self, record):
        writes.append(record)
        if len(writes) > 25:
            raise OSError(errno.ENOSPC, "No space left on device")
        write(self, record)

    def full_disk_close(self):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(tfrecord_shards.ShardWriter, "write", full_disk_write)
    monkeypatch.setattr(tfrecord_shards.ShardWriter, "close", full_disk_close)
    _table(tmp_path / "two.csv", ["x", "kind", "later", "y"], _rows(60, 1))
    for span, csv_file in ((2, "two.csv"), (1, "two.csv")):  # a new span, and a span written again
        writes.clear()
        code, _, err = _cli("prepare-data", "--csv", tmp_path / csv_file, "--data", data, "--span", span)
        assert sorted(os.listdir(data)) == [".csv_columns.json", "span-1"]  # no span-2, no hidden leftovers
        assert {name: (data / "span-1" / name).read_bytes() for name in os.listdir(data / "span-1")} == span_1
        assert code == 1 and "write error: [Errno 28] No space left on device; nothing was written" in err, err
    monkeypatch.undo()
    monkeypatch.chdir(tmp_path)
    (data / ".span-2.partial").mkdir()  # what a write killed outright (kill -9) leaves: read by nothing
    (data / ".span-2.partial" / "data-00000-of-00004.tfrecord.gz").write_bytes(b"\x1f\x8b half")
    code, out, err = _cli("init", "--data", data, "--label", "y")
    assert code == 0 and "read 60 records" in out, err
    assert _cli("prepare-data", "--csv", tmp_path / "two.csv", "--data", data, "--span", 2)[0] == 0
    assert sorted(os.listdir(data)) == [".csv_columns.json", "span-1", "span-2"]  # the leftover is gone


# ----------------------------------------------------------------------------------------- through `run`

@pytest.mark.e2e
def test_runs_over_spans_that_lack_labels_and_add_or_fill_columns_train_and_say_what_was_left_out(tmp_path,
                                                                                                   monkeypatch):
    """Span 1: some rows without a label, a column with no value. Span 2: that column filled, one more added,
    rows without a label again. Both spans train (the new columns do not stop the ValidationGate), and the run
    summary names the columns the model left out and the rows left out of the span."""
    monkeypatch.chdir(tmp_path)
    _table(tmp_path / "one.csv", ["x", "kind", "later", "y"], _rows(400, 0, unlabelled_every=10))
    assert _cli("prepare-data", "--csv", "one.csv", "--data", "data")[0] == 0
    code, out, err = _cli("init", "--data", "data", "--label", "y")
    assert code == 0 and "left out: later (no value in any record" in out, err
    config = (tmp_path / "data.yaml").read_text()
    (tmp_path / "data.yaml").write_text(config.replace("epochs: ", "epochs: 3  # was ", 1))
    code, out, err = _cli("run", "--config", "data.yaml")
    assert code == 0, err[-3000:] + out[-3000:]
    assert "  left out of span-1: 40 row(s) with no value for the label 'y'" in out, out

    # span 2 draws the same rows (a different draw of 400 can drift the label past the drift gate's threshold,
    # which this test is not about), with the empty column filled, a column added and other rows unlabelled
    rows = [row[:2] + (i % 7,) + row[3:] + (f"c{i % 3}",) for i, row in enumerate(_rows(400, 0, unlabelled_every=8))]
    _table(tmp_path / "two.csv", ["x", "kind", "later", "y", "added"], rows)
    code, out, err = _cli("prepare-data", "--csv", "two.csv", "--data", "data", "--span", 2)
    assert code == 0 and "left out 50 row(s)" in out, err
    code, out, err = _cli("run", "--config", "data.yaml")
    assert code == 0, err[-3000:] + out[-3000:]
    assert ("  new columns, left out of the model: added, later (not in the schema: run init again, or add them to "
            "the schema, to use them)") in out, out
    assert "  left out of span-2: 50 row(s) with no value for the label 'y'" in out


@pytest.mark.e2e
def test_a_span_of_three_rows_is_named_trains_one_model_if_accepted_and_never_becomes_the_drift_reference(
        tmp_path, monkeypatch):
    """Span 2 holds three rows: the drift that stops it says so. Accepted (its thresholds raised), it trains one
    model, no folds, which no gate blesses. Span 3, healthy, is compared with span 1, whose model is served,
    not with the three rows, and is pushed."""
    monkeypatch.chdir(tmp_path)
    _table(tmp_path / "one.csv", ["x", "kind", "later", "y"], _rows(400, 0, later=lambda rng: rng.randint(0, 9)))
    assert _cli("prepare-data", "--csv", "one.csv", "--data", "data")[0] == 0
    assert _cli("init", "--data", "data", "--label", "y")[0] == 0
    config = (tmp_path / "data.yaml").read_text()
    (tmp_path / "data.yaml").write_text(config.replace("epochs: ", "epochs: 3  # was ", 1) + "export:\n"
                                        "  tflite_variants: [float32]\n")
    code, out, err = _cli("run", "--config", "data.yaml")
    assert code == 0 and "blessed: yes" in out, err[-3000:] + out[-3000:]

    for far in range(1, 50):  # three far-off rows the hash split deals into both splits (an empty one stops ingestion)
        _table(tmp_path / "two.csv", ["x", "kind", "later", "y"], [(4.5 + far, "p", 9, "yes"), (5.0, "q", 8, "no"),
                                                                   (-4.0, "r", 9, "yes")])
        assert _cli("prepare-data", "--csv", "two.csv", "--data", "data", "--span", 2)[0] == 0
        records = tf.data.TFRecordDataset(sorted(map(str, (tmp_path / "data" / "span-2").glob("*.gz"))),
                                          compression_type="GZIP").as_numpy_iterator()
        if len({split_of(record, 1 / 3, ("y",)) for record in records}) == 2:
            break
    code, out, err = _cli("run", "--config", "data.yaml")
    assert code == 1 and re.search(r"span 2 holds 3 record\(s\) \(train \d, eval \d\), against span 1's 400 "
                                   r"record\(s\) \(train \d+, eval \d+\): drift over 3 record\(s\) says "
                                   r"little", err), err
    schema = tmp_path / "schemas" / "data" / "schema.pbtxt"
    curated = schema.read_text()
    schema.write_text(re.sub(r"threshold: [0-9.]+", "threshold: 1.5", curated))  # every drift accepted
    code, out, err = _cli("run", "--config", "data.yaml")
    assert code == 0 and "blessed: no" in out, err[-3000:] + out[-3000:]
    assert re.search(r"train\.folds 8 not applied: the training split holds \d record\(s\), fewer than 40: one model "
                     r"trained on all of them", out), out

    schema.write_text(curated)
    _table(tmp_path / "three.csv", ["x", "kind", "later", "y"], _rows(400, 1, later=lambda rng: rng.randint(0, 9)))
    assert _cli("prepare-data", "--csv", "three.csv", "--data", "data", "--span", 3)[0] == 0
    code, out, err = _cli("run", "--config", "data.yaml")
    assert code == 0 and "blessed: yes" in out, err[-3000:] + out[-3000:]
    [report] = [json.loads(path.read_text()) for path in
                tmp_path.glob("output/data/pipeline/ValidationGate/report/*/validation_report.json")
                if json.loads(path.read_text())["span"] == 3]
    assert report["drift"]["previous_span"] == 1
