"""The real TFX DAG (LocalDagRunner, SQLite MLMD, Beam DirectRunner) on a 3,000-row slice of the taxi data."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from components.trainer.device import cpu_has_bf16
from pipeline.config import load_config
from pipeline.local_runner import run_local

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def first_run(taxi_span_root, tmp_path_factory):
    output = tmp_path_factory.mktemp("run")
    config = load_config(data_root=taxi_span_root, output_dir=str(output),
                         train={"epochs": 3}, evaluate={"min_auc": 0.8})
    return config, run_local(config)


def _eval_examples(config):
    pattern = os.path.join(config.pipeline_root, "TFRecordIngest", "examples", "*", "Split-eval", "*")
    files = tf.io.gfile.glob(pattern)
    assert files, pattern
    return [bytes(r) for r in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()]


def test_every_component_runs_and_the_blessed_model_is_pushed(first_run):
    config, summary = first_run
    assert [s.status for s in summary.steps] == ["ran"] * len(summary.steps)
    assert {s.name for s in summary.steps} >= {"TFRecordIngest", "StatisticsGen", "ImportSchemaGen",
                                               "ExampleValidator", "Trainer", "Evaluator", "Pusher"}
    assert summary.metrics["auc"] > 0.8
    assert summary.metrics["example_count"] == len(_eval_examples(config))
    assert summary.blessed is True
    assert summary.pushed_to and summary.pushed_to.startswith(config.push_dir)
    assert tf.saved_model.contains_saved_model(summary.pushed_to)


def test_training_report_records_device_and_metrics(first_run):
    config, summary = first_run
    reports = tf.io.gfile.glob(os.path.join(config.pipeline_root, "Trainer", "model_run", "*",
                                            "training_report.json"))
    assert len(reports) == 1
    report = json.load(open(reports[0]))
    assert report["device"]["gpus"] == [] and report["device"]["num_workers"] == 1
    # The automatic choices for this machine: one CPU device; on a bf16 CPU, bf16 + XLA or float32 without
    # XLA, whichever measured faster; float32 without XLA on other CPUs.
    assert report["strategy"] == "one_device" and report["replicas"] == 1
    assert (report["precision"], report["xla"]) in (("mixed_bfloat16", True), ("float32", False))
    if cpu_has_bf16():
        assert report["xla_reason"].startswith("measured on in-memory batches")
    else:
        assert (report["precision"], report["xla"]) == ("float32", False)
    # 3 passes over the training split, validated once at the end, with throughput measured.
    assert report["total_steps"] >= 3 * report["train_examples"] / report["global_batch"]
    assert report["steps_run"] == report["total_steps"] and len(report["history"]["val_auc"]) == 1
    assert report["examples_per_second"] > 0 and 0 <= report["input_wait_fraction"] <= 1
    assert report["final_metrics"]["val_auc"] > 0.8
    assert summary.training == report and "examples/s" in summary.render()


def test_pushed_savedmodel_scores_raw_examples(first_run):
    config, summary = first_run
    serialized = _eval_examples(config)
    loaded = tf.saved_model.load(summary.pushed_to)
    serve = loaded.signatures["serving_default"]
    probabilities = serve(examples=tf.constant(serialized))["probabilities"].numpy().reshape(-1)
    assert probabilities.dtype == np.float32 and len(probabilities) == len(serialized)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()

    labels = loaded.signatures["transform_features"](examples=tf.constant(serialized))["big_tipper"].numpy()
    payment = [tf.train.Example.FromString(s).features.feature["payment_type"].bytes_list.value[0] for s in serialized]
    cash = np.array([p == b"Cash" for p in payment])
    # Cash tips are not recorded in this data: the model must have learned that.
    assert probabilities[cash].mean() < 0.2 < probabilities[~cash].mean()
    # Scores rank big tippers above the rest (AUC well above chance).
    positives, negatives = probabilities[labels == 1], probabilities[labels == 0]
    assert (positives[:, None] > negatives[None, :]).mean() > 0.8


def test_unchanged_rerun_reuses_cached_data_steps_and_training(first_run):
    config, _ = first_run
    summary = run_local(config)
    statuses = {s.name: s.status for s in summary.steps}
    for name in ("TFRecordIngest", "StatisticsGen", "ImportSchemaGen", "ExampleValidator", "Trainer"):
        assert statuses[name] == "cached", (name, statuses)
    # The Evaluator reruns: its baseline input is now the first run's blessed model.
    assert statuses["Evaluator"] == "ran" and summary.blessed is True


def test_cli_exits_nonzero_and_names_the_bad_record(tmp_path):
    span = tmp_path / "data" / "span-1"
    span.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(span / "bad.tfrecord")) as writer:
        writer.write(b"\x08\x96\x01 definitely not an Example")
    result = subprocess.run([sys.executable, "-m", "pipeline", "run", "--data", str(tmp_path / "data"),
                             "--output", str(tmp_path / "out")], capture_output=True, text=True, timeout=600)
    assert result.returncode == 1
    assert "bad.tfrecord: record 0: not a tf.Example" in result.stderr
    assert not os.path.exists(tmp_path / "out" / "serving")
