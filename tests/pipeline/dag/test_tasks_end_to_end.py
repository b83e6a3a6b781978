"""The real DAG on the two examples beside the taxi "big tipper" (binary): TFX's penguins (multi-class) and the
taxi fare (regression), each through the command line with its own config from configs/, as a user runs it.

Each run must be blessed and pushed, print its task's metrics and gates, push a SavedModel that returns the
task's outputs (TF Serving's classify convention for classifiers, `predictions` for regression) and a
model.tflite that runs in LiteRT on raw features. Labels the task does not allow stop a run with exit 2 and
leave the pushed model byte-identical.
"""
import contextlib
import io
import json
import os
import re
import shutil

import numpy as np
import pytest
import tensorflow as tf

from components.core import contract, tasks
from components.tfrecord_ingest.tfrecord_files import split_of
from pipeline.commands.cli import main as cli_main
from pipeline.config import PROJECT_ROOT, load_config
from tests.pipeline.span_files import read_span, write_records

pytestmark = pytest.mark.e2e


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def penguins(tmp_path_factory):
    root = tmp_path_factory.mktemp("penguins")
    data, output = str(root / "data"), str(root / "output")
    code, out, err = _cli("prepare-data", "--example", "penguins", "--data", data)
    assert code == 0 and "wrote 334 tf.Examples" in out, err
    config_file = os.path.join(PROJECT_ROOT, "configs", "penguins.yaml")
    code, out, err = _cli("run", "--config", config_file, "--data", data, "--output", output)
    assert code == 0, err[-3000:]
    return {"summary": out, "config": load_config(config_file, data_root=data, output_dir=output),
            "config_file": config_file, "data": data}


@pytest.fixture(scope="module")
def taxi_fare(taxi_span_root, tmp_path_factory):
    output = str(tmp_path_factory.mktemp("taxi-fare") / "output")
    config_file = os.path.join(PROJECT_ROOT, "configs", "taxi_fare.yaml")
    code, out, err = _cli("run", "--config", config_file, "--data", taxi_span_root, "--output", output)
    assert code == 0, err[-3000:]
    return {"summary": out, "config": load_config(config_file, data_root=taxi_span_root, output_dir=output)}


def _pushed(summary: str) -> str:
    return next(line.split("pushed to: ", 1)[1] for line in summary.splitlines() if "pushed to: " in line)


def _eval_records(config) -> list[bytes]:
    return _split_records(config, "eval")


def _split_records(config, split: str) -> list[bytes]:
    folders = tf.io.gfile.glob(os.path.join(config.pipeline_root, "TFRecordIngest", contract.EXAMPLES, "*"))
    files = tf.io.gfile.glob(os.path.join(max(folders, key=lambda f: int(os.path.basename(f))), f"Split-{split}", "*"))
    return [bytes(r) for r in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()]


def _litert_outputs(tflite_path: str, features: dict[str, np.ndarray], output: str) -> np.ndarray:
    from ai_edge_litert.interpreter import Interpreter  # LiteRT: no Flex delegate
    runner = Interpreter(model_path=tflite_path).get_signature_runner()
    rows = len(next(iter(features.values())))
    return np.stack([runner(**{name: values[i:i + 1] for name, values in features.items()})[output][0]
                     for i in range(rows)])


def test_penguins_are_blessed_and_pushed_with_multiclass_metrics_and_gates(penguins):
    summary = penguins["summary"]
    assert "training: multiclass" in summary and "blessed: yes" in summary
    assert "sparse_categorical_accuracy" in summary and "recall/class_2" in summary and "auc" not in summary
    assert "beats_trivial: candidate sparse_categorical_accuracy" in summary
    report = json.load(open(os.path.join(penguins["config"].output_dir, "pipeline", "PrecisionEvaluator",
                                         contract.EVALUATION, os.listdir(os.path.join(
                                             penguins["config"].output_dir, "pipeline", "PrecisionEvaluator",
                                             contract.EVALUATION))[0], contract.PRECISION_REPORT_FILE)))
    assert report["task"] == "multiclass" and report["classes"] == ["Adelie", "Chinstrap", "Gentoo"]
    matrix = np.array(report["confusion_matrix"]["candidate"])
    assert matrix.shape == (3, 3) and matrix.sum() == report["eval_examples"]
    assert np.trace(matrix) / matrix.sum() == pytest.approx(
        report["metrics"]["overall"]["candidate"]["sparse_categorical_accuracy"], abs=1e-6)


def test_the_pushed_penguin_model_returns_scores_and_classes_and_its_tflite_runs_on_raw_features(penguins):
    pushed = _pushed(penguins["summary"])
    records = _eval_records(penguins["config"])
    outputs = tf.saved_model.load(pushed).signatures[contract.SERVING_SIGNATURE](examples=tf.constant(records))
    scores, classes = outputs[tasks.SCORES].numpy(), outputs[tasks.CLASSES].numpy()
    assert scores.shape == (len(records), 3) and classes.shape == (len(records), 3)
    assert np.allclose(scores.sum(axis=1), 1.0, atol=1e-5)
    assert [name.decode() for name in classes[0]] == ["Adelie", "Chinstrap", "Gentoo"]
    import models.penguins as module
    raw = {name: t.numpy() for name, t in tf.io.parse_example(tf.constant(records), module.INPUTS).items()}
    device = _litert_outputs(os.path.join(pushed, contract.PUSHED_TFLITE_FILE), raw, tasks.SCORES)
    assert device.shape == scores.shape and np.abs(device - scores).mean() < 0.03
    assert (device.argmax(axis=1) == scores.argmax(axis=1)).mean() > 0.95


def test_taxi_fare_is_blessed_and_pushed_with_regression_metrics_and_gates(taxi_fare):
    summary = taxi_fare["summary"]
    assert "training: regression" in summary and "blessed: yes" in summary
    assert "mean_absolute_error" in summary and "root_mean_squared_error" in summary and "auc" not in summary
    assert "beats_trivial: candidate mean_absolute_error" in summary and "MAE" in summary  # the TFLite line
    # The trivial predictor is the eval split's own median label: the best constant there under MAE.
    labels = np.array([tf.train.Example.FromString(r).features.feature["fare"].float_list.value[0]
                       for r in _eval_records(taxi_fare["config"])])
    trivial = float(re.search(r"beats_trivial: .* vs trivial ([0-9.]+)", summary).group(1))
    assert trivial == pytest.approx(np.abs(labels - np.median(labels)).mean(), abs=1e-4)
    folder = os.path.join(taxi_fare["config"].output_dir, "pipeline", "PrecisionEvaluator", contract.EVALUATION)
    report = json.load(open(os.path.join(folder, os.listdir(folder)[0], contract.PRECISION_REPORT_FILE)))
    assert report["trivial_predictor"].startswith(f"always {np.median(labels):.6g}, the eval split's median")


def test_the_pushed_fare_model_returns_predictions_and_full_int8_does_not_clip_the_highest_fares(taxi_fare):
    config = taxi_fare["config"]
    pushed = _pushed(taxi_fare["summary"])
    records = _eval_records(config)[:300]
    predictions = tf.saved_model.load(pushed).signatures[contract.SERVING_SIGNATURE](
        examples=tf.constant(records))[tasks.PREDICTIONS].numpy()
    assert predictions.shape == (300, 1)
    labels = np.array([tf.train.Example.FromString(r).features.feature["fare"].float_list.value[0] for r in records])
    assert np.abs(predictions[:, 0] - labels).mean() < np.abs(labels - np.median(labels)).mean()

    # The training trips with the highest fares the model predicts, far above the eval split's typical: the int8
    # file, calibrated over the whole range of the model's training predictions and with a float output layer,
    # follows the SavedModel there instead of saturating at the fares of ordinary trips.
    import models.taxi_fare as module
    training = tf.constant(_split_records(config, "train"))
    scores = tf.saved_model.load(pushed).signatures[contract.SERVING_SIGNATURE](examples=training)[tasks.PREDICTIONS]
    highest = tf.gather(training, np.argsort(scores.numpy()[:, 0])[-20:])
    raw = {name: t.numpy() for name, t in tf.io.parse_example(highest, module.INPUTS).items()}
    expected = tf.saved_model.load(pushed).signatures[contract.RAW_SIGNATURE](
        **{name: tf.constant(values) for name, values in raw.items()})[tasks.PREDICTIONS].numpy()[:, 0]
    [exported] = tf.io.gfile.glob(os.path.join(config.pipeline_root, "ModelExport", contract.EXPORTED_MODEL, "*"))
    full_int8 = _litert_outputs(os.path.join(exported, contract.TFLITE_DIR, "full_int8.tflite"), raw,
                                tasks.PREDICTIONS)[:, 0]
    assert expected.mean() > 3 * np.median(predictions), (expected.mean(), np.median(predictions))  # far from typical
    assert np.abs(full_int8 - expected).mean() < 0.05 * expected.mean(), (full_int8[:5], expected[:5])


def _span_with(penguins, tmp_path, change) -> str:
    """A copy of the penguin span with `change(index, example)` applied to every record; output: a data root."""
    records = read_span(os.path.join(penguins["data"], "span-1"))
    for index, example in enumerate(records):
        change(index, example)
    data = tmp_path / "data"
    shutil.copytree(os.path.join(penguins["data"], "span-1"), data / "span-1")
    write_records(data / "span-2" / "part.tfrecord.gz", records, "GZIP")
    return str(data)


@pytest.mark.parametrize("case", ["class_outside", "label_missing_in_eval"])
def test_labels_the_task_does_not_allow_exit_2_naming_them_and_the_pushed_model_stays(penguins, tmp_path, case,
                                                                                       tree_digest):
    config = penguins["config"]

    def class_outside(index, example):
        if index % 40 == 0:
            example.features.feature["species"].int64_list.value[:] = [5]

    def label_missing_in_eval(index, example):
        # The split hashes a record's features, its label left out: only records that land in the eval split.
        if index % 3 == 0 and split_of(example.SerializeToString(), config.ingest.eval_fraction, ("species",)) == "eval":
            del example.features.feature["species"]

    data = _span_with(penguins, tmp_path, class_outside if case == "class_outside" else label_missing_in_eval)
    before = tree_digest(config.push_dir)
    code, _, err = _cli("run", "--config", penguins["config_file"], "--data", data, "--output", config.output_dir)
    assert code == 2, err[-3000:]
    if case == "class_outside":
        assert re.search(r"task error: (train|eval) split: label 'species': label 5 is outside the declared classes "
                         r"\(0 'Adelie', 1 'Chinstrap', 2 'Gentoo'\)", err), err[-2000:]
    else:
        assert "task error: eval split: " in err and "records lack 'species'" in err, err[-2000:]
    assert tree_digest(config.push_dir) == before
