"""A user's own table with no code: `prepare-data --csv` writes a CSV as TFRecords, `init` writes a curated
schema and a config for the schema-driven model, `run` trains, gates and pushes it. Bad input exits 2
naming the column, file or line, and writes nothing into the user's folder."""
import contextlib
import io
import itertools
import os
import re
import sys

import pytest
import tensorflow as tf

from pipeline.commands.cli import main as cli_main
from pipeline.config import PROJECT_ROOT
from pipeline.onboarding.example_data import bundled_taxi_csv
from tests.pipeline.span_files import read_span
from tests.warm_python import run_warm

PENGUINS_CSV = os.path.join(PROJECT_ROOT, "examples", "penguins.csv")


def _cli(capsys, *argv) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli_main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _features(example: tf.train.Example) -> dict:
    result = {}
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        result[name] = list(getattr(feature, kind).value)
    return result


# ------------------------------------------------------------------------------------------- prepare-data

def test_a_csv_becomes_typed_examples_with_missing_cells_absent(tmp_path, capsys):
    code, out, err = _cli(capsys, "prepare-data", "--csv", PENGUINS_CSV, "--data", str(tmp_path / "data"))
    assert code == 0, err
    assert "wrote 344 tf.Examples" in out and "species" in out
    examples = [_features(example) for example in read_span(str(tmp_path / "data" / "span-1"))]
    assert len(examples) == 344  # dealt round-robin to the shards: the first row leads the first shard
    first = examples[0]
    assert first == {"species": [b"Adelie"], "island": [b"Torgersen"], "bill_length_mm": [pytest.approx(39.1)],
                     "bill_depth_mm": [pytest.approx(18.7)], "flipper_length_mm": [181], "body_mass_g": [3750],
                     "sex": [b"male"], "year": [2007]}
    assert isinstance(first["flipper_length_mm"][0], int) and isinstance(first["bill_length_mm"][0], float)
    # Adelie,Torgersen,NA,NA,NA,NA,NA,2007 (and one Gentoo alike): NA cells are absent features.
    unmeasured = [example for example in examples if "bill_length_mm" not in example]
    assert [set(example) for example in unmeasured] == [{"species", "island", "year"}] * 2
    assert sum("sex" not in example for example in examples) == 11


def test_the_same_csv_prepared_twice_gives_the_same_bytes_and_equal_rows_equal_records(tmp_path, capsys):
    # Ingestion splits records by a hash of their bytes: equal rows must be equal bytes, in any call, or the
    # same CSV would be split another way each time it is prepared.
    rows = ["a,b,c,d,label", *[f"{i % 7},{i * 0.5},x{i % 3},,{i % 2}" for i in range(300)]]
    (tmp_path / "t.csv").write_text("\n".join(rows + rows[1:4]) + "\n")  # the first three rows again at the end
    for data in ("one", "two"):
        code, _, err = _cli(capsys, "prepare-data", "--csv", str(tmp_path / "t.csv"), "--data", str(tmp_path / data))
        assert code == 0, err
    shards = sorted(os.listdir(tmp_path / "one" / "span-1"))
    assert any(name.endswith(".gz") for name in shards)
    for name in shards:
        assert (tmp_path / "one" / "span-1" / name).read_bytes() == (tmp_path / "two" / "span-1" / name).read_bytes()
    files = sorted(str(path) for path in (tmp_path / "one" / "span-1").glob("*.gz"))
    records = list(tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator())
    assert len(records) == 303 and len(set(records)) == 300  # each repeated row: the very bytes of its first
    assert all(record == tf.train.Example.FromString(record).SerializeToString(deterministic=True)
               for record in records)


def test_canonical_records_are_tensorflows_deterministic_bytes_whatever_the_features_order():
    from pipeline.onboarding.canonical_examples import canonical
    features = {"b": tf.train.Feature(float_list=tf.train.FloatList(value=[1.5, -2.0])),
                "a": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"x", b""])),
                "c": tf.train.Feature(int64_list=tf.train.Int64List(value=[-3, 2**40])),
                "d": tf.train.Feature(int64_list=tf.train.Int64List())}  # present, empty: kept as such
    orders = (["a", "b", "c", "d"], ["d", "c", "b", "a"], ["c", "a", "d", "b"])
    examples = [tf.train.Example(features=tf.train.Features(feature={name: features[name] for name in order}))
                for order in orders]
    expected = examples[0].SerializeToString(deterministic=True)
    assert canonical([example.SerializeToString() for example in examples]) == [expected] * 3
    assert tf.train.Example.FromString(expected) == examples[0]


def test_quoted_delimiters_and_a_detected_delimiter_are_read_as_one_cell(tmp_path, capsys):
    csv_file = tmp_path / "shops.csv"
    csv_file.write_text('name;city;revenue;note\n"Smith; Sons";"Paris";1200.5;"said ""hi"""\n'
                        'Jones;Lyon;;\nBrown;"Nice";300;"two\nlines"\n')
    code, out, err = _cli(capsys, "prepare-data", "--csv", str(csv_file), "--data", str(tmp_path / "data"))
    assert code == 0, err
    assert "delimiter ';'" in out
    examples = [_features(e) for e in read_span(str(tmp_path / "data" / "span-1"))]
    assert examples[0] == {"name": [b"Smith; Sons"], "city": [b"Paris"], "revenue": [pytest.approx(1200.5)],
                           "note": [b'said "hi"']}
    assert examples[1] == {"name": [b"Jones"], "city": [b"Lyon"]}  # empty cells: absent
    assert examples[2]["note"] == [b"two\nlines"]


def test_rows_missing_a_required_column_are_left_out_and_counted(tmp_path, capsys):
    code, out, err = _cli(capsys, "prepare-data", "--csv", PENGUINS_CSV, "--data", str(tmp_path / "data"),
                          "--require", "sex")
    assert code == 0, err
    assert "left out 11 row(s)" in out
    assert len(read_span(str(tmp_path / "data" / "span-1"))) == 333


@pytest.mark.parametrize("text, expected", [
    ("a,b,c\n1,2,3\n4,5\n", r"ragged\.csv: line 3: 2 cells where the header names 3 columns"),
    ("1.5,2,3\n4,5,6\n", r"ragged\.csv: line 1: the first row looks like data .* add a header row"),
    ("a,b,a\n1,2,3\n", r"ragged\.csv: line 1: the header repeats the column name\(s\) a"),
    ("a,,c\n1,2,3\n", r"ragged\.csv: line 1: the header has an empty column name \(column 2\)"),
    ("", r"ragged\.csv: the file is empty"),
], ids=["ragged_row", "no_header", "repeated_name", "empty_name", "empty_file"])
def test_a_csv_that_is_no_table_exits_2_naming_the_line_and_writes_nothing(tmp_path, capsys, text, expected):
    (tmp_path / "ragged.csv").write_text(text)
    code, _, err = _cli(capsys, "prepare-data", "--csv", str(tmp_path / "ragged.csv"), "--data",
                        str(tmp_path / "data"))
    assert code == 2 and re.search(rf"^data error: .*{expected}", err, re.MULTILINE), err
    assert not (tmp_path / "data" / "span-1").exists()


def test_a_file_that_is_not_utf8_exits_2_naming_it_and_an_id_too_long_for_int64_stays_whole(tmp_path, capsys):
    (tmp_path / "latin1.csv").write_bytes("city,revenue\nK\xf6ln,3\n".encode("latin-1"))
    code, _, err = _cli(capsys, "prepare-data", "--csv", str(tmp_path / "latin1.csv"), "--data",
                        str(tmp_path / "data"))
    assert code == 2 and re.search(r"^data error: .*latin1\.csv: not UTF-8 text .*save it as UTF-8", err, re.M), err
    assert not (tmp_path / "data" / "span-1").exists()

    (tmp_path / "ids.csv").write_text("account,small\n12345678901234567890123,1\n7,2\n")
    code, out, err = _cli(capsys, "prepare-data", "--csv", str(tmp_path / "ids.csv"), "--data", str(tmp_path / "d2"))
    assert code == 0, err
    assert [_features(e) for e in read_span(str(tmp_path / "d2" / "span-1"))] == [
        {"account": [b"12345678901234567890123"], "small": [1]}, {"account": [b"7"], "small": [2]}]


# ------------------------------------------------------------------------------------------------- init

@pytest.fixture(scope="module")
def penguin_records(tmp_path_factory):
    root = tmp_path_factory.mktemp("penguin-records")
    assert cli_main(["prepare-data", "--csv", PENGUINS_CSV, "--data", str(root / "data")]) == 0
    return str(root / "data")


def test_init_chooses_the_task_leaves_out_what_cannot_help_and_writes_a_schema_and_config(penguin_records,
                                                                                          tmp_path, capsys,
                                                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "init", "--data", penguin_records, "--label", "species", "--name", "birds")
    assert code == 0, err
    assert "task: multiclass (string label with 3 distinct values)" in out
    assert "classes: 0 'Adelie', 1 'Chinstrap', 2 'Gentoo'" in out
    assert "string features: island, sex" in out and "python -m pipeline run --config birds.yaml" in out
    from pipeline.config import load_config
    config = load_config(str(tmp_path / "birds.yaml"), data_root=penguin_records)
    assert (config.task.type, config.task.label, config.task.classes) == (
        "multiclass", "species", ["Adelie", "Chinstrap", "Gentoo"])
    assert config.train.model == "models.tabular" and config.schema_path == str(tmp_path / "schemas/birds/schema.pbtxt")
    import tensorflow_data_validation as tfdv
    schema = tfdv.load_schema_text(config.schema_path)
    features = {feature.name: feature for feature in schema.feature}
    assert list(features["species"].not_in_environment) == ["SERVING"] and not features["species"].domain
    assert all(feature.HasField("drift_comparator") for feature in schema.feature)
    # String features are open to new values (a new island is drift, not an anomaly) until a domain is added.
    assert features["island"].WhichOneof("domain_info") is None and not schema.string_domain


def test_init_leaves_out_ids_and_constants_and_says_why(tmp_path, capsys, monkeypatch):
    rows = ["id,region,size,price"] + [f"r{i},north,{i % 7},{10 + i * 0.5}" for i in range(60)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    assert cli_main(["prepare-data", "--csv", str(tmp_path / "t.csv"), "--data", str(tmp_path / "data")]) == 0
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "init", "--data", "data", "--label", "price")
    assert code == 0, err
    assert "task: regression (float label with 60 distinct values)" in out
    assert "left out: id (a different value in every record: an id, not a feature)" in out
    assert "left out: region (the same value wherever present)" in out and "int features: size" in out
    assert (tmp_path / "data.yaml").exists()  # named after the data folder


def test_init_leaves_out_an_id_written_as_floats_and_names_a_project_after_a_folder_of_any_name(tmp_path, capsys,
                                                                                                  monkeypatch):
    rows = ["id,size,price"] + [f"{i}.0,{i % 7},{10 + (i * 7) % 13 * 0.5}" for i in range(1, 61)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    data = tmp_path / "my data.v2"
    assert cli_main(["prepare-data", "--csv", str(tmp_path / "t.csv"), "--data", str(data)]) == 0
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "init", "--data", "my data.v2", "--label", "price")
    assert code == 0, err
    assert ("left out: id (a different value in every record: an id, not a feature (whole numbers written as "
            "floats))") in out and "int features: size" in out, out
    assert ("note: named 'my-data-v2' after the data folder 'my data.v2' (a name holds letters, digits, '-' and "
            "'_' only); --name gives another") in out, out
    assert "pipeline_name: \"my-data-v2\"" in (tmp_path / "my-data-v2.yaml").read_text()
    code, _, err = _cli(capsys, "init", "--data", "my data.v2", "--label", "price", "--name", "shop.v2")
    assert code == 2 and "init error: --name 'shop.v2': must be 1 to 63 letters, digits, '-' or '_'" in err, err


def test_init_takes_exclude_as_a_list_or_repeated(penguin_records, tmp_path, capsys, monkeypatch):
    """--exclude a,b --exclude c leaves out all three (a repeated flag does not replace the one before it)."""
    import yaml
    monkeypatch.chdir(tmp_path)
    code, out, err = _cli(capsys, "init", "--data", penguin_records, "--label", "species", "--exclude", "island,sex",
                          "--exclude", "year")
    assert code == 0, err
    assert all(f"left out: {column} (excluded with --exclude)" in out for column in ("island", "sex", "year")), out
    config = yaml.safe_load((tmp_path / f"{os.path.basename(penguin_records)}.yaml").read_text())
    assert config["task"]["exclude"] == ["island", "sex", "year"]


@pytest.mark.parametrize("argv, expected", [
    (["--label", "penguin"], r"--label penguin: no such column \(columns: bill_depth_mm, "),
    (["--label", "species", "--task", "regression"], r"--task regression: the label 'species' holds strings"),
    (["--label", "sex", "--refuse-unlabelled"],
     r"--label sex: missing in 11 of 344 records, .* \(--refuse-unlabelled\); .* --require sex"),
    (["--label", "species", "--exclude", "beak"], r"--exclude: no such column\(s\): beak"),
    (["--label", "species", "--task", "binary"], r"--task binary: the label 'species' has 3 distinct values, not 2"),
    (["--label", "species", "--exclude", "island,sex,year,bill_length_mm,bill_depth_mm,flipper_length_mm,body_mass_g"],
     r"no column is left for the model to learn from \(.*island: excluded with --exclude"),
], ids=["label_absent", "regression_on_strings", "label_partly_missing", "unknown_exclusion", "binary_of_3",
        "nothing_left"])
def test_init_refuses_a_label_or_task_that_cannot_work_and_writes_nothing(penguin_records, tmp_path, capsys,
                                                                          monkeypatch, argv, expected):
    import re
    monkeypatch.chdir(tmp_path)
    code, _, err = _cli(capsys, "init", "--data", penguin_records, *argv)
    assert code == 2 and re.search(rf"^init error: {expected}", err, re.MULTILINE), err
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("rows, label, expected", [
    (["a,b"] + [f"{i},same" for i in range(30)], "b", r"--label b: every record has the same value \('same'\)"),
    (["a,b"] + [f"{i}," for i in range(20)] + ["1,x"], "b", r"--label b: missing in 20 of 21 records: too few"),
    (["a,b"] + [f"{i},{'yes' if i % 2 else 'no'}" for i in range(30)], "b --task multiclass",
     r"--task multiclass: the label 'b' has 2 distinct values; a multi-class label has 3 or more"),
], ids=["constant_label", "mostly_missing_label", "multiclass_of_2"])
def test_init_refuses_a_constant_or_mostly_missing_label(tmp_path, capsys, monkeypatch, rows, label, expected):
    import re
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    data = tmp_path / "in" / "data"
    assert cli_main(["prepare-data", "--csv", str(tmp_path / "t.csv"), "--data", str(data)]) == 0
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    code, _, err = _cli(capsys, "init", "--data", str(data), "--label", *label.split())
    assert code == 2 and re.search(rf"^init error: {expected}", err, re.MULTILINE), err
    assert os.listdir(work) == []


def test_init_refuses_an_empty_or_missing_folder_and_an_existing_config(penguin_records, tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "empty").mkdir()
    code, _, err = _cli(capsys, "init", "--data", "empty", "--label", "y")
    assert code == 2 and "init error: empty: no TFRecord files in the input directory" in err, err
    code, _, err = _cli(capsys, "init", "--data", "nowhere", "--label", "y")
    assert code == 2 and "init error: nowhere: input directory does not exist" in err, err
    (tmp_path / "penguins.yaml").write_text("# mine\n")
    code, _, err = _cli(capsys, "init", "--data", penguin_records, "--label", "species", "--name", "penguins")
    assert code == 2 and "penguins.yaml already exists: choose another --name, or --force" in err, err
    assert (tmp_path / "penguins.yaml").read_text() == "# mine\n" and not (tmp_path / "schemas").exists()
    code, _, err = _cli(capsys, "init", "--data", penguin_records, "--label", "species", "--name", "penguins",
                        "--force")
    assert code == 0, err
    assert "type: multiclass" in (tmp_path / "penguins.yaml").read_text()
    # A curated schema whose config was moved away is not overwritten either.
    (tmp_path / "penguins.yaml").rename(tmp_path / "moved.yaml")
    (tmp_path / "schemas" / "penguins" / "schema.pbtxt").write_text("# curated by hand\n")
    code, _, err = _cli(capsys, "init", "--data", penguin_records, "--label", "species", "--name", "penguins")
    assert code == 2 and re.search(r"schemas/penguins/schema\.pbtxt already exists: choose another --name", err), err
    assert (tmp_path / "schemas" / "penguins" / "schema.pbtxt").read_text() == "# curated by hand\n"
    assert not (tmp_path / "penguins.yaml").exists()


# ------------------------------------------------------------------------ three commands, no code, as a user

def _user_command(folder, *argv):
    """`python -m pipeline ...` in the user's own folder, outside the repo, as a user types it (forked from a warm
    interpreter: tests/warm_python.py)."""
    result = run_warm([sys.executable, "-m", "pipeline", *argv], cwd=str(folder), timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.e2e
@pytest.mark.parametrize("example", ["penguins", "taxi_fare"])
def test_a_csv_becomes_a_pushed_gated_model_in_three_commands_with_no_code(tmp_path_factory, example):
    folder = tmp_path_factory.mktemp(f"user-{example}")
    assert not str(folder).startswith(PROJECT_ROOT)
    if example == "penguins":
        csv_file, init_args, task = PENGUINS_CSV, ["--label", "species"], "multiclass"
    else:  # the bundled taxi sample's first 3,000 rows, as a user's own file
        csv_file, task = str(folder / "fares.csv"), "regression"
        with open(bundled_taxi_csv()) as bundled, open(csv_file, "w") as head:
            head.writelines(itertools.islice(bundled, 3001))
        init_args = ["--label", "fare", "--exclude", "tips", "--name", "fares"]
    _user_command(folder, "prepare-data", "--csv", csv_file, "--data", "data/" + example)
    decided = _user_command(folder, "init", "--data", "data/" + example, *init_args)
    assert f"task: {task}" in decided
    config = folder / ("fares.yaml" if example == "taxi_fare" else f"{example}.yaml")
    if example == "taxi_fare":  # a plan of 6 epochs (the quality bench scores init's whole plan)
        config.write_text(config.read_text().replace("epochs: ", "epochs: 6  # was ", 1))
    summary = _user_command(folder, "run", "--config", config.name)
    assert "blessed: yes" in summary and f"training: {task}" in summary, summary
    pushed = next(line.split("pushed to: ", 1)[1] for line in summary.splitlines() if "pushed to: " in line)
    assert pushed.startswith(str(folder)) and os.path.exists(os.path.join(pushed, "model.tflite"))
    assert "beats_trivial: candidate" in summary and "(pass)" in summary
    outputs = tf.saved_model.load(pushed).signatures["serving_raw"].structured_outputs
    assert set(outputs) == ({"scores", "classes"} if task == "multiclass" else {"predictions"})


@pytest.mark.e2e
@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_a_model_that_predicts_a_constant_is_refused_by_the_trivial_predictor_gate(tmp_path, monkeypatch, task):
    """The user's path with the schema-driven model swapped for one that predicts the same value for every
    record (tests/pipeline/constant_model.py): no bar is configured, and the trivial-predictor gate refuses
    it in every task; nothing is pushed."""
    monkeypatch.chdir(tmp_path)
    # penguins: the species (3 classes), the sex (2; rows without it left out) or the body mass in grams
    label = {"binary": "sex", "multiclass": "species", "regression": "body_mass_g"}[task]
    init_args = ["--label", label]
    assert cli_main(["prepare-data", "--csv", PENGUINS_CSV, "--data", "data/table", "--require", label]) == 0
    assert cli_main(["init", "--data", "data/table", *init_args]) == 0
    config = (tmp_path / "table.yaml").read_text()
    assert f"type: {task}" in config and "absolute_bar: null" in config
    # 2 epochs: a constant is a constant after any number of them
    (tmp_path / "table.yaml").write_text(config.replace("model: models.tabular", "model: tests.pipeline.constant_model")
                                         .replace("epochs: ", "epochs: 2  # was ", 1))

    out, err = io.StringIO(), io.StringIO()  # not capsys: the run's log handlers outlive one test's capture
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(["run", "--config", "table.yaml"])
    out, err = out.getvalue(), err.getvalue()

    assert code == 0, err[-3000:]  # an unblessed model is a success: nothing pushed, as it should be
    gates = {line.split(":")[0].strip(): line for line in out.splitlines() if line.startswith("    ") and "(" in line}
    assert gates["beats_trivial"].endswith("(FAIL)"), out
    assert "blessed: no" in out and "pushed to: nothing pushed" in out
    assert not (tmp_path / "output" / "table" / "serving").exists() or not os.listdir(
        tmp_path / "output" / "table" / "serving")


def _label_statistics(values):
    from pipeline.onboarding.curated_schema import sample_statistics
    examples = [tf.train.Example(features=tf.train.Features(feature={
        "y": tf.train.Feature(float_list=tf.train.FloatList(value=[float(v)]))})).SerializeToString() for v in values]
    return sample_statistics(examples, "y")


def test_sample_statistics_infer_tfdvs_schema_and_keep_the_labels_whole_numbers():
    """The other features' one-bucket histograms change nothing the schema or the label's numbers are read from."""
    import numpy as np
    import tensorflow_data_validation as tfdv
    from tensorflow_data_validation.statistics.stats_impl import generate_statistics_in_memory
    from tensorflow_data_validation.types import FeaturePath
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder
    from pipeline.onboarding.curated_schema import sample_statistics

    rng = np.random.default_rng(0)
    examples = []
    for i in range(600):
        feature = {"y": tf.train.Feature(float_list=tf.train.FloatList(value=[rng.lognormal(2.0, 0.9)])),
                   "x": tf.train.Feature(float_list=tf.train.FloatList(value=[rng.normal()])),
                   "n": tf.train.Feature(int64_list=tf.train.Int64List(value=[i % 7])),
                   "s": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"abc"[i % 3:i % 3 + 1]]))}
        if i % 10:
            feature["sometimes"] = tf.train.Feature(float_list=tf.train.FloatList(value=[i * 0.5]))
        examples.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())

    ours = sample_statistics(examples, "y")
    tfdvs = generate_statistics_in_memory(ExamplesToRecordBatchDecoder().DecodeBatch(examples),
                                          tfdv.StatsOptions(use_sketch_based_topk_uniques=True))
    assert tfdv.infer_schema(ours) == tfdv.infer_schema(tfdvs)

    def named(statistics, name):
        return tfdv.get_feature_stats(statistics.datasets[0], FeaturePath([name]))

    assert named(ours, "y") == named(tfdvs, "y")
    assert len(named(ours, "x").num_stats.histograms[0].buckets) < len(named(tfdvs, "x").num_stats.histograms[0].buckets)


def test_init_trains_a_long_tailed_label_at_or_above_zero_as_its_log_and_others_as_they_are():
    import numpy as np
    from components.core.tasks import task_named
    from pipeline.onboarding.task_and_columns import label_numbers

    def proposed(values, task="regression"):
        return task_named(task).propose_settings(label_numbers(_label_statistics(values), "y"))

    rng = np.random.default_rng(0)
    prices = rng.lognormal(2.0, 0.9, 3000)
    assert proposed(prices)["label_transform"][0] == "log"
    assert proposed(rng.normal(0.0, 1.0, 3000))["label_transform"][0] == "none"
    assert proposed(rng.uniform(1.0, 9.0, 3000))["label_transform"][0] == "none"
    shifted = rng.lognormal(2.0, 0.9, 3000) - 5.0  # as skewed, but below 0: log(1 + label) would not exist
    assert proposed(shifted)["label_transform"][0] == "none"
    # a count that is 0 in 43% of the records and past 100,000 in a few: the far tail inflates the std, so
    # Pearson's skewness stays low, and the deciles' skewness sees the tail
    counts = rng.poisson(np.exp(rng.normal(0.0, 3.0, 3000)))
    transform, why = proposed(counts)["label_transform"]
    pearson, deciles = (float(v) for v in re.findall(r"skewness (-?[\d.]+)", why))
    assert transform == "log" and pearson < 0.5 <= deciles, why
    tenth, median, ninetieth = np.quantile(prices, [0.1, 0.5, 0.9])
    numbers = label_numbers(_label_statistics(prices), "y")
    assert numbers.tenth == pytest.approx(tenth, rel=0.02) and numbers.ninetieth == pytest.approx(ninetieth, rel=0.02)
    assert proposed(prices, "binary") == {}  # a classifier takes no label transform


def test_init_keeps_about_ten_thousand_eval_records_of_a_large_table_and_budgets_steps_by_its_size():
    import dataclasses
    from models.defaults import defaults_for
    from pipeline.onboarding import project_config as init_config
    row = defaults_for("binary")
    assert init_config.eval_share(15_000) == pytest.approx(1 / 3)
    assert init_config.eval_share(50_000) == pytest.approx(0.2)
    assert init_config.eval_share(1_000_000) == pytest.approx(0.1)
    for records in (300, 15_000, 60_000, 1_000_000):
        share = init_config.eval_share(records)
        batch, epochs = init_config.training_size(records, share, row)
        rows = records * (1 - share)
        steps = epochs * -(-int(rows) // batch)
        assert row.min_epochs <= epochs <= row.max_epochs
        assert steps >= row.target_steps or epochs == row.max_epochs
        assert steps < 2 * row.target_steps or epochs == row.min_epochs
        # a plan_scale (a regression's 2) multiplies the epochs, within max_epochs
        scaled = dataclasses.replace(row, plan_scale=2)
        assert init_config.training_size(records, share, scaled) == (batch, min(row.max_epochs, 2 * epochs))


def _labels_csv(folder, rows: int = 3000):
    """A table with a number and three labels (two classes, three classes, a value), prepared as spans."""
    lines = ["x,two,three,value"] + [f"{i % 97 * 0.5},{i % 2},{i % 3},{i % 89 * 1.5}" for i in range(rows)]
    (folder / "t.csv").write_text("\n".join(lines) + "\n")
    assert cli_main(["prepare-data", "--csv", str(folder / "t.csv"), "--data", str(folder / "data")]) == 0


def _planned(folder, task: str):
    from pipeline.onboarding import init
    label = {"binary": "two", "multiclass": "three", "regression": "value"}[task]
    others = [name for name in ("two", "three", "value") if name != label]
    return init.plan_project(str(folder), str(folder / "data"), label, task=task, exclude=others)


def test_init_plans_a_regression_twice_the_epochs_of_a_classifier_on_the_same_records(tmp_path):
    from models.defaults import defaults_for
    assert defaults_for("regression").plan_scale == 2
    assert defaults_for("binary").plan_scale == defaults_for("multiclass").plan_scale == 1
    # 3,000 records: 2,000 train in batches of 64, a classifier's plan is 96 epochs, below half max_epochs
    _labels_csv(tmp_path)
    plans = {task: _planned(tmp_path, task) for task in ("binary", "regression")}
    assert plans["regression"].epochs == 2 * plans["binary"].epochs < defaults_for("regression").max_epochs
    assert plans["regression"].batch_size == plans["binary"].batch_size
    # the config's comment gives the steps the Trainer's own plan makes of those epochs on one device
    from components.settings import TrainConfig
    from components.trainer.plan import training_plan
    for plan in plans.values():
        steps = training_plan(plan.training_records, TrainConfig(batch_size=plan.batch_size, epochs=plan.epochs),
                              replicas=1).total_steps
        assert steps >= plan.epochs * plan.training_records / plan.batch_size
        assert f"epochs: {plan.epochs}  # at most: {steps:,} training steps over" in plan.config_text()


def _train_section_of(row, plan) -> dict:
    """What the defaults row `row` says the train section of `plan`'s config holds."""
    batch, epochs = row.plan(plan.training_records)
    return {"model": "models.tabular", "batch_size": batch, "epochs": epochs, "learning_rate": row.learning_rate,
            "schedule": row.schedule, "weight_decay": row.weight_decay, "folds": row.folds,
            "early_stopping_patience": row.patience(epochs), "average_intervals": row.average_intervals,
            "search": row.search, "time_budget_seconds": row.time_budget_seconds}


def test_the_train_section_init_writes_carries_exactly_the_tables_values(tmp_path):
    import yaml
    from models import defaults
    _labels_csv(tmp_path)
    written = {}
    for task in ("binary", "multiclass", "regression"):
        plan = _planned(tmp_path, task)
        written[task] = yaml.safe_load(plan.config_text())["train"]
        assert written[task] == _train_section_of(defaults.defaults_for(task), plan)
    assert written["binary"] == written["multiclass"] != written["regression"]  # the rows differ where they say
    assert written["binary"]["weight_decay"] == pytest.approx(10 * written["regression"]["weight_decay"])
    # init reads the table: another row, another config, and a config that loads
    other = dict(learning_rate=0.01, weight_decay=0.05, schedule="constant", folds=4, average_intervals=2,
                 early_stopping_share=0.5, target_steps=500, search=True, time_budget_seconds=90.0)
    with defaults.overridden(**other):
        plan = _planned(tmp_path, "regression")
        plan.write()
        train = yaml.safe_load(plan.config_text())["train"]
        assert train == _train_section_of(defaults.defaults_for("regression"), plan)
    assert {key: train[key] for key in other if key in train} == {
        key: value for key, value in other.items() if key not in ("early_stopping_share", "target_steps")}
    from pipeline.config import load_config
    loaded = load_config(plan.config_path).train
    assert (loaded.learning_rate, loaded.folds, loaded.search, loaded.time_budget_seconds) == (0.01, 4, True, 90.0)
    assert defaults.defaults_for("regression").learning_rate == 0.002  # the table as it was, after the block


def test_a_task_the_table_does_not_list_takes_its_fallback_row():
    from models import defaults
    assert defaults.defaults_for("counts") is defaults.FALLBACK
    assert defaults.defaults_for("regression") is not defaults.FALLBACK
    with pytest.raises(ValueError, match="hiden_units: not a default"):
        with defaults.overridden(hiden_units=(8,)):
            pass


@pytest.mark.parametrize("records, bagged", [(50, False), (334, True), (15_000, True)])
def test_init_bags_the_model_over_folds_when_there_are_enough_records_and_plans_from_the_size_alone(tmp_path, records,
                                                                                                    bagged):
    import yaml
    from pipeline.onboarding import project_config as init_config
    from pipeline.config import load_config
    from models.defaults import defaults_for
    row = defaults_for("binary")
    share = init_config.eval_share(records)
    batch, epochs = init_config.training_size(records, share, row)
    schema = 'feature { name: "x" type: FLOAT }\nfeature { name: "y" type: INT }\n'
    project = init_config.Project("t", str(tmp_path), str(tmp_path / "data"), records, "binary", "y", ["0", "1"],
                           {"float": ["x"]}, {}, "set with --task", schema, batch, epochs, share)
    project.write()
    train = yaml.safe_load(project.config_text())["train"]
    assert train["folds"] == (row.folds if bagged else 0)
    assert ("early_stopping_patience" in train) == bagged
    assert train.get("average_intervals", 1) == (row.average_intervals if bagged else 1)
    assert ("search" in train) == bagged and not train.get("search")  # offered with folds, off
    assert train["time_budget_seconds"] == 0  # no clock: the same data and config give the same model anywhere
    config = load_config(project.config_path).train
    assert (config.folds, config.validation_share, config.time_budget_seconds, config.search, config.epochs) == (
        train["folds"], 0.0, 0.0, False, epochs)
    assert config.average_intervals == train.get("average_intervals", 1)
    assert f"{epochs} epochs planned from the table's size ({project.training_steps:,} steps" in project.render()
