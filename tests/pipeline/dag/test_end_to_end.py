"""The real TFX DAG (LocalDagRunner, SQLite MLMD, Beam DirectRunner) on a 3,000-row slice of the taxi data.

Production retraining, one stage per module fixture, each starting from the one before it whichever test asks
first: a first run on span 1 that blesses and pushes; span 2, trained warm-started from that model and
evaluated against it; an unchanged re-run served from the cache; a shifted span 3 stopped by the drift gate;
a span 4 with shuffled labels that must not be blessed. Each stage records what it produced when it ran, so
tests read their stage's outputs in any order.
"""
import contextlib
import io
import json
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import pytest
import tensorflow as tf

from components.core import contract, tasks
from components.core.contract import TFLITE_VARIANTS
from components.core.records import TrainingReport
from components.model_export.variants import OUTPUT_TOLERANCE
from components.trainer.device import (choose_precision, choose_strategy, cpu_without_xla, describe_devices,
                                       device_from_json, xla_candidates)
from components.validation_gate.executor import BlockingAnomaliesError
from pipeline.commands.cli import main as cli_main
from pipeline.config import load_config
from pipeline.onboarding.example_data import write_taxi_span
from pipeline.dag.local_runner import run_local
from pipeline.runs import mlmd
from pipeline.runs.run_facts import list_runs
from tests.pipeline.span_files import count_outputs, private_copy, read_span, write_records
from tests.warm_python import run_warm

pytestmark = pytest.mark.e2e

STEP_OUTPUTS = [("TFRecordIngest", contract.EXAMPLES), ("Trainer", contract.MODEL_RUN), ("Trainer", contract.MODEL),
                ("Fp32BaselineTrainer", contract.MODEL_RUN), ("Fp32BaselineTrainer", contract.MODEL),
                ("PrecisionEvaluator", contract.EVALUATION), ("PrecisionEvaluator", contract.BLESSING),
                ("ModelExport", contract.EXPORTED_MODEL), ("ValidationGate", contract.VALIDATION_REPORT)]


@dataclass
class Stage:
    """What one run left behind, recorded right after it: later stages add newer outputs beside these."""
    config: object
    summary: object = None
    outputs: dict = field(default_factory=dict)  # (node, output key) -> newest output folder after this run
    facts: dict = field(default_factory=dict)  # whatever else the stage's tests read


def _record(config, summary=None, **facts) -> Stage:
    outputs = {}
    for node, key in STEP_OUTPUTS:
        folders = tf.io.gfile.glob(os.path.join(config.pipeline_root, node, key, "*"))
        if folders:
            outputs[(node, key)] = max(folders, key=lambda folder: int(os.path.basename(folder)))
    return Stage(config, summary, outputs, facts)


@pytest.fixture(scope="module")
def data_root(taxi_span_root, tmp_path_factory):
    """A private copy of the shared span-1 (later stages add spans to it)."""
    return private_copy(taxi_span_root, tmp_path_factory.mktemp("e2e-data"))


@pytest.fixture(scope="module")
def first_run(data_root, tmp_path_factory):
    output = tmp_path_factory.mktemp("run")
    config = load_config(data_root=data_root, output_dir=str(output), train={"epochs": 3},
                         evaluate={"absolute_bar": 0.8}, export={"latency_examples": 50})
    summary = run_local(config)
    return _record(config, summary, blessing=_newest_mlmd_artifact(config, "ModelBlessing"))


@pytest.fixture(scope="module")
def second_span(first_run, data_root):
    write_taxi_span(data_root, span=2, max_rows=3000, first_row=3000, num_shards=2)
    summary = run_local(first_run.config)
    store = mlmd.open_store(first_run.config)  # newest_output: how the benchmarks find a run's model and data
    newest = {(node, key): mlmd.newest_output(store, first_run.config.pipeline_name, node, key).uri
              for node, key in (("Trainer", contract.MODEL), ("TFRecordIngest", contract.EXAMPLES))}
    return _record(first_run.config, summary, newest_in_mlmd=newest)


@pytest.fixture(scope="module")
def cached_rerun(second_span, tree_digest):
    config = second_span.config
    before = tree_digest(config.push_dir)
    summary = run_local(config)
    status = io.StringIO()
    with contextlib.redirect_stdout(status):
        status_code = cli_main(["status", "--output", config.output_dir])
    return _record(config, summary, push_dir_unchanged=tree_digest(config.push_dir) == before, runs=list_runs(config),
                   status_code=status_code, status_table=status.getvalue().splitlines())


@pytest.fixture(scope="module")
def drift_blocked(cached_rerun, data_root, tree_digest):
    config = cached_rerun.config
    _write_shifted_span(os.path.join(data_root, "span-2"), os.path.join(data_root, "span-3"))
    models_before, pushed_before = count_outputs(config, "Trainer", contract.MODEL), tree_digest(config.push_dir)
    with pytest.raises(BlockingAnomaliesError, match="drifted") as raised:
        run_local(config)
    return _record(config, error=str(raised.value), models_added=count_outputs(config, "Trainer", contract.MODEL) - models_before,
                   push_dir_unchanged=tree_digest(config.push_dir) == pushed_before, last_run=list_runs(config)[-1])


@pytest.fixture(scope="module")
def degraded_run(drift_blocked, data_root, tree_digest):
    config = drift_blocked.config
    # A copy of the accepted span 2 with its labels shuffled: no drift to stop it, meaningless to learn.
    _write_label_shuffled_span(os.path.join(data_root, "span-2"), os.path.join(data_root, "span-4"))
    pushed_before, versions = tree_digest(config.push_dir), sorted(os.listdir(config.push_dir))
    summary = run_local(config)
    return _record(config, summary, push_dir_unchanged=tree_digest(config.push_dir) == pushed_before,
                   versions_unchanged=sorted(os.listdir(config.push_dir)) == versions)


def _eval_examples(stage):
    files = tf.io.gfile.glob(os.path.join(stage.outputs[("TFRecordIngest", contract.EXAMPLES)], "Split-eval", "*"))
    return [bytes(r) for r in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()]


def _report(stage, node, key, name):
    with open(os.path.join(stage.outputs[(node, key)], name)) as handle:
        return json.load(handle)


def _newest_mlmd_artifact(config, type_name):
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata
    store = metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(config.metadata_path))
    return max(store.get_artifacts_by_type(type_name), key=lambda artifact: artifact.id)


def test_every_component_runs_and_the_blessed_model_is_pushed(first_run):
    config, summary = first_run.config, first_run.summary
    assert [s.status for s in summary.steps] == ["ran"] * len(summary.steps)
    assert {s.name for s in summary.steps} >= {"TFRecordIngest", "StatisticsGen", "ImportSchemaGen",
                                               "ExampleValidator", "Trainer", "Fp32BaselineTrainer",
                                               "PrecisionEvaluator", "ModelExport", "AtomicPusher"}
    facts = summary.facts
    assert facts.candidate_metrics["auc"] > 0.8
    assert facts.candidate_metrics["example_count"] == len(_eval_examples(first_run))
    assert facts.blessed is True
    assert facts.pushed_to and os.path.dirname(facts.pushed_to) == os.path.abspath(config.push_dir)
    assert tf.saved_model.contains_saved_model(facts.pushed_to)
    assert "evaluation: candidate " in summary.render() and "blessed: yes" in summary.render()


def test_training_reports_record_device_choices_and_the_fp32_baseline(first_run):
    summary = first_run.summary
    report = _report(first_run, "Trainer", contract.MODEL_RUN, contract.TRAINING_REPORT_FILE)
    # The choices follow from the device the Trainer read (this machine, GPUs or not), by the rules in device.py.
    device = device_from_json(report["device"])
    assert device == describe_devices() and device.num_workers == 1
    strategy = choose_strategy(device)
    assert (report["strategy"], report["strategy_reason"]) == (strategy.value, strategy.reason)
    assert report["replicas"] == (len(device.gpus) if strategy.value == "mirrored" else 1)
    # xla: auto: where XLA may gain, both settings are timed and the faster kept, each with its own policy.
    candidates = xla_candidates(device, "auto")
    assert (report["precision"], report["xla"]) in {
        (choose_precision(device, xla=xla == "on").value, xla == "on") for xla in candidates}
    if len(candidates) == 2:  # the demo-sized training is too short for XLA's compile to pay back
        assert report["xla_reason"].startswith("training is about") and report["xla"] is False
    else:
        assert (report["xla"], report["xla_reason"]) == (False, cpu_without_xla(device))
    # 3 passes over the training split, validated once at the end, with throughput measured.
    assert report["total_steps"] >= 3 * report["train_examples"] / report["global_batch"]
    assert report["steps_run"] == report["total_steps"] and len(report["history"]["val_auc"]) == 1
    assert report["examples_per_second"] > 0 and 0 <= report["input_wait_fraction"] <= 1
    assert report["final_metrics"]["val_auc"] > 0.8
    assert report["task"] == "binary" and report["labels"]["train"]["examples"] == report["train_examples"]
    assert summary.facts.training["Trainer"] == TrainingReport.from_json(report) and "examples/s" in summary.render()
    baseline = _report(first_run, "Fp32BaselineTrainer", contract.MODEL_RUN, contract.TRAINING_REPORT_FILE)
    if (report["precision"], report["xla"]) == ("float32", False):  # the candidate is its own FP32 baseline
        assert baseline["skipped"] is True and baseline["reason"].startswith("candidate trained in float32")
        assert summary.facts.training["Fp32BaselineTrainer"] == TrainingReport.from_json(baseline)
    else:
        assert (baseline["precision"], baseline["xla"]) == ("float32", False)
        assert baseline["total_steps"] == report["total_steps"]  # the same training, only the numerics differ


def test_precision_report_agrees_with_the_blessing(first_run):
    blessing_dir = first_run.outputs[("PrecisionEvaluator", contract.BLESSING)]
    report = _report(first_run, "PrecisionEvaluator", contract.EVALUATION, contract.PRECISION_REPORT_FILE)
    with open(os.path.join(blessing_dir, contract.PRECISION_REPORT_FILE)) as handle:
        assert json.load(handle) == report
    # Which model is blessed depends on the numerics the Trainer measured faster here: float32 matches the
    # baseline; a bf16 candidate trained 3 epochs on 2,000 rows has landed 0.006 AUC below it (a fallback).
    chosen = report["chosen_model"]
    assert report["blessed"] is True and chosen in ("candidate", "fp32_baseline")
    assert os.path.exists(os.path.join(blessing_dir, "BLESSED"))
    assert not os.path.exists(os.path.join(blessing_dir, "NOT_BLESSED"))
    assert report["models"]["candidate"]["uri"] == first_run.outputs[("Trainer", contract.MODEL)]
    if "fp32_baseline" in report["models"]:
        assert report["models"]["fp32_baseline"]["uri"] == first_run.outputs[("Fp32BaselineTrainer", contract.MODEL)]
    # The standard ModelBlessing in MLMD says the same, and names the blessed model (TFX's resolver reads this).
    blessing = first_run.facts["blessing"]
    assert blessing.uri == blessing_dir and blessing.custom_properties[contract.BLESSED_PROPERTY].int_value == 1
    assert blessing.custom_properties["current_model_id"].int_value == report["models"][chosen]["id"]
    checks = {(c["gate"], c["model"], c["metric"]): c for c in report["checks"]}
    candidate_gates = {("absolute_bar", "candidate", "auc"), ("beats_trivial", "candidate", "auc"),
                       ("fp32_parity", "candidate", "auc")}
    overall = report["metrics"]["overall"]
    parity = checks[("fp32_parity", "candidate", "auc")]
    training = _report(first_run, "Trainer", contract.MODEL_RUN, contract.TRAINING_REPORT_FILE)
    if (training["precision"], training["xla"]) == ("float32", False):  # its own baseline: nothing to compare
        assert parity["passed"] and parity["value"] is None and parity["note"].startswith("n/a: candidate trained")
        assert set(report["models"]) == {"candidate"} and report["fp32_parity"].startswith("candidate trained")
    else:  # compared on the same examples, with the interval of the paired difference
        low, high = parity["interval"]
        assert low <= parity["improvement"] <= high and parity["examples"] == overall["candidate"]["example_count"]
        assert parity["passed"] == (high >= -parity["tolerance"])
        assert abs(parity["value"] - overall["candidate"]["auc"]) < 1e-3  # exact AUC vs TFMA's 10,000 thresholds
    trivial = checks[("beats_trivial", "candidate", "auc")]
    assert trivial["reference"] == 0.5 and trivial["interval"][0] > 0 and trivial["passed"]
    if chosen == "candidate":
        assert set(checks) == candidate_gates and all(c["passed"] for c in checks.values())
    else:  # the fallback: the candidate failed parity, the baseline passed its own gates
        assert set(checks) == candidate_gates | {("absolute_bar", "fp32_baseline", "auc"),
                                                 ("beats_trivial", "fp32_baseline", "auc")}
        assert not parity["passed"] and checks[("absolute_bar", "fp32_baseline", "auc")]["passed"]
        assert "FP32 baseline blessed instead" in report["summary"]
    # Per-slice metrics for both models; the slices partition the eval split.
    slices = {name: per_model for name, per_model in report["metrics"].items() if name.startswith("payment_type=")}
    assert {"payment_type=Cash", "payment_type=Credit Card"} <= set(slices)
    for model in report["models"]:
        assert sum(per_model[model]["example_count"] for per_model in slices.values()) == overall[model]["example_count"]
        assert {"auc", "binary_accuracy", "precision", "recall", "binary_crossentropy"} <= set(overall[model])
    markdown = open(os.path.join(blessing_dir, contract.PRECISION_REPORT_MARKDOWN)).read()
    assert "**BLESSED**" in markdown and "| payment_type=Cash | candidate |" in markdown


def test_tflite_variants_match_the_savedmodel_and_the_recommended_one_is_pushed(first_run):
    pushed_to = first_run.summary.facts.pushed_to
    export_dir = first_run.outputs[("ModelExport", contract.EXPORTED_MODEL)]
    report = _report(first_run, "ModelExport", contract.EXPORTED_MODEL, contract.EXPORT_REPORT_FILE)
    assert set(report["variants"]) == set(TFLITE_VARIANTS)
    saved_model = tf.saved_model.load(os.path.join(export_dir, contract.SAVED_MODEL_DIR))
    serialized = tf.constant(_eval_examples(first_run)[:200])
    import models.taxi as model_module
    assert report["inputs"] == "raw features" and report["compared_with"] == contract.RAW_SIGNATURE
    raw = {k: v.numpy() for k, v in tf.io.parse_example(serialized, model_module.INPUTS).items()}  # absent -> missing value
    expected = saved_model.signatures[contract.SERVING_SIGNATURE](examples=serialized)[
        tasks.PROBABILITIES].numpy().reshape(-1)
    from ai_edge_litert.interpreter import Interpreter  # LiteRT: no Flex delegate
    for variant, result in report["variants"].items():
        path = os.path.join(export_dir, result["file"])
        assert os.path.getsize(path) == result["size_bytes"]
        assert result["non_builtin_ops"] == [] and result["quantized_preprocessing_ops"] == []
        runner = Interpreter(model_path=path).get_signature_runner()
        got = np.array([runner(**{k: v[i:i + 1] for k, v in raw.items()})[tasks.PROBABILITIES].reshape(-1)[0]
                        for i in range(len(expected))])
        assert np.abs(got - expected).mean() <= OUTPUT_TOLERANCE[variant], variant
        assert result["accepted"] == (result["drop"] <= 0.01 and result["mean_abs_diff"] <= OUTPUT_TOLERANCE[variant])
    sizes = {variant: result["size_bytes"] for variant, result in report["variants"].items()}
    assert sizes["full_int8"] < 0.5 * sizes["float32"] and sizes["float16"] < sizes["float32"]
    # Each converter option took effect (none accepted and ignored): weights halve in float16, quarter in int8.
    weights = {variant: result["weight_bytes"] for variant, result in report["variants"].items()}
    assert weights["float16"] <= 0.55 * weights["float32"]
    assert weights["full_int8"] <= 0.3 * weights["float32"]
    assert weights["dynamic_int8"] <= 0.4 * weights["float32"]  # tensors under 1,024 values stay float there
    recommended = report["recommended"]
    assert recommended == min((v for v, r in report["variants"].items() if r["accepted"]), key=sizes.get)
    # The pushed version: the SavedModel at its root, the recommended TFLite file beside it.
    with open(os.path.join(pushed_to, contract.PUSHED_TFLITE_FILE), "rb") as pushed, \
            open(os.path.join(export_dir, report["variants"][recommended]["file"]), "rb") as exported:
        assert pushed.read() == exported.read()
    info = json.load(open(os.path.join(pushed_to, contract.PUSH_INFO_FILE)))
    assert info["tflite_variant"] == recommended and info["source_model"] == report["source_model"]


def test_pushed_savedmodel_scores_raw_examples(first_run):
    serialized = _eval_examples(first_run)
    loaded = tf.saved_model.load(first_run.summary.facts.pushed_to)
    serve = loaded.signatures[contract.SERVING_SIGNATURE]
    outputs = serve(examples=tf.constant(serialized))
    probabilities = outputs[tasks.PROBABILITIES].numpy().reshape(-1)
    assert probabilities.dtype == np.float32 and len(probabilities) == len(serialized)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()
    # TF Serving's classify convention beside it: a probability per class and the class names.
    scores, classes = outputs[tasks.SCORES].numpy(), outputs[tasks.CLASSES].numpy()
    assert scores.shape == (len(serialized), 2) and np.allclose(scores[:, 1], probabilities)
    assert classes.shape == (len(serialized), 2) and list(classes[0]) == [b"not_big_tipper", b"big_tipper"]

    labels = loaded.signatures[contract.TRANSFORM_SIGNATURE](examples=tf.constant(serialized))["big_tipper"].numpy()
    payment = [tf.train.Example.FromString(s).features.feature["payment_type"].bytes_list.value[0] for s in serialized]
    cash = np.array([p == b"Cash" for p in payment])
    # Cash tips are not recorded in this data: the model must have learned that.
    assert probabilities[cash].mean() < 0.2 < probabilities[~cash].mean()
    # Scores rank big tippers above the rest (AUC well above chance).
    positives, negatives = probabilities[labels == 1], probabilities[labels == 0]
    assert (positives[:, None] > negatives[None, :]).mean() > 0.8


def test_next_span_trains_warm_started_and_is_evaluated_against_the_blessed_model(first_run, second_span):
    first, summary = first_run.summary.facts, second_span.summary
    blessed = first.evaluation.models[first.evaluation.chosen_model]

    statuses = {s.name: s.status for s in summary.steps}
    assert statuses["ImportSchemaGen"] == "cached" and statuses["TFRecordIngest"] == "ran", statuses
    ingest = _report(second_span, "TFRecordIngest", contract.EXAMPLES, contract.INGEST_REPORT_FILE)
    assert ingest["spans"] == [2] and sum(ingest["counts"].values()) == 3000
    validation = _report(second_span, "ValidationGate", contract.VALIDATION_REPORT, contract.VALIDATION_REPORT_FILE)
    assert validation["blocking"] is False and validation["drift"]["previous_span"] == 1
    measured = validation["drift"]["splits"]["train"]
    assert {"fare", "trip_miles", "payment_type", "company"} <= set(measured)
    assert not any(entry["drifted"] for entries in measured.values() for entry in entries)
    for node in ("Trainer", "Fp32BaselineTrainer"):  # each that trained starts from the first run's blessed model
        report = _report(second_span, node, contract.MODEL_RUN, contract.TRAINING_REPORT_FILE)
        if report.get("skipped"):
            continue
        warm = report["warm_start"]
        assert warm["applied"] is True and warm["base_model"].startswith(blessed["uri"] + os.sep), (node, warm)
    assert summary.facts.evaluation.models["production"]["id"] == blessed["id"]
    assert any(check.gate == "vs_production" for check in summary.facts.evaluation.checks)
    for (node, key), newest in second_span.facts["newest_in_mlmd"].items():
        assert newest == second_span.outputs[(node, key)] != first_run.outputs[(node, key)]
    assert summary.facts.blessed == (summary.facts.pushed_to is not None)


def test_unchanged_rerun_is_served_from_the_cache_and_publishes_nothing(first_run, cached_rerun):
    summary, runs = cached_rerun.summary, cached_rerun.facts["runs"]
    assert [s.status for s in summary.steps if not s.name.endswith("_resolver")] == ["cached"] * 10, summary.steps
    assert cached_rerun.facts["push_dir_unchanged"]
    assert [run.spans for run in runs] == ["1", "2", "2"]
    assert runs[-1].outcome == "cached" and len(runs[-1].steps_with("ran")) == 0
    assert len(runs[-1].steps_with("cached")) == 10
    assert runs[0].outcome == "complete" and runs[0].blessed_model in ("candidate", "fp32_baseline")
    assert runs[0].pushed_version == os.path.basename(first_run.summary.facts.pushed_to)
    assert runs[1].primary["production"] is not None and runs[0].primary.get("production") is None
    table = cached_rerun.facts["status_table"]
    assert cached_rerun.facts["status_code"] == 0
    assert len(table) == 4 and "cached" in table[-1] and os.path.basename(first_run.summary.facts.pushed_to) in table[1]


def test_shifted_span_is_stopped_by_the_drift_gate_before_training(second_span, drift_blocked):
    message = drift_blocked.facts["error"]
    reference = 2 if second_span.summary.facts.blessed else 1  # the data the served model learned from
    for feature in ("fare", "trip_miles", "payment_type"):
        assert f"train: {feature}: drift" in message and f"vs span {reference}" in message, message
    assert f"span 3 holds 3,000 record(s) (train " in message and f"against span {reference}'s " in message, message
    assert "company: drift" not in message  # left as it was: not reported
    assert drift_blocked.facts["models_added"] == 0
    assert drift_blocked.facts["push_dir_unchanged"]
    assert drift_blocked.facts["last_run"].outcome == "failed at ValidationGate"


def test_a_degraded_candidate_is_not_blessed_and_the_pushed_version_is_untouched(degraded_run):
    summary = degraded_run.summary
    assert summary.facts.blessed is False and summary.facts.pushed_to is None
    report = summary.facts.evaluation
    assert report.blessed is False and report.chosen_model is None
    failed = {(c.gate, c.model) for c in report.checks if not c.passed}
    # Meaningless labels: the served model scores as poorly on them as the candidate (no vs_production refusal),
    # and the candidate learns something from the fare alone (it may beat the trivial predictor): the bar stops it.
    assert ("absolute_bar", "candidate") in failed
    assert os.path.exists(os.path.join(degraded_run.outputs[("PrecisionEvaluator", contract.BLESSING)], "NOT_BLESSED"))
    assert _report(degraded_run, "ModelExport", contract.EXPORTED_MODEL, contract.EXPORT_REPORT_FILE)["exported"] is False
    assert degraded_run.facts["versions_unchanged"] and degraded_run.facts["push_dir_unchanged"]
    assert "candidate not blessed" in summary.render() and "nothing pushed" in summary.render()


def _write_shifted_span(source_span, target_span):
    """Copies a span with fares and distances tripled (plus 5) and every payment made in cash."""
    records = read_span(source_span)
    for record in records:
        for name in ("fare", "trip_miles"):
            values = record.features.feature[name].float_list.value
            values[:] = [3 * value + 5 for value in values]
        record.features.feature["payment_type"].bytes_list.value[:] = [b"Cash"]
    write_records(os.path.join(target_span, "shifted.tfrecord.gz"), records, "GZIP")


def _write_label_shuffled_span(source_span, target_span):
    """Copies a span with the `tips` values permuted across records: same features, meaningless labels."""
    records = read_span(source_span)
    tips = [list(r.features.feature["tips"].float_list.value) for r in records]
    for record, index in zip(records, np.random.default_rng(0).permutation(len(records))):
        record.features.feature["tips"].float_list.value[:] = tips[index]
    write_records(os.path.join(target_span, "shuffled.tfrecord.gz"), records, "GZIP")


def test_cli_exits_nonzero_and_names_the_bad_record(tmp_path):
    span = tmp_path / "data" / "span-1"
    span.mkdir(parents=True)
    with tf.io.TFRecordWriter(str(span / "bad.tfrecord")) as writer:
        writer.write(b"\x08\x96\x01 definitely not an Example")
    result = run_warm([sys.executable, "-m", "pipeline", "run", "--data", str(tmp_path / "data"),
                       "--output", str(tmp_path / "out")], cwd=os.getcwd(), timeout=600)
    assert result.returncode == 1
    assert "bad.tfrecord: record 0: not a tf.Example" in result.stderr
    assert not os.path.exists(tmp_path / "out" / "serving")
