"""PrecisionEvaluator and ModelExport executors on real trained models, real TFMA (Beam DirectRunner) and
the real TFLite converter: a candidate that fails FP32 parity, with and without the fallback. The batched
metrics give TFMA's own evaluator's metrics, on the real models and on synthetic edge cases."""
import json
import math
import os
import shutil

import apache_beam as beam
import numpy as np
import pyarrow as pa
import pytest
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.extractors import features_extractor, slice_key_extractor, unbatch_extractor
from tfx.dsl.components.base import base_beam_executor, base_executor
from tfx.proto import example_gen_pb2
from tfx.components.util import examples_utils
from tfx.types import artifact_utils, standard_artifacts

from components.core import contract
from components.model_export import executor as export_executor
from components.core.artifacts import ExportedModel
from components.core.records import ModelFacts
from components.core.tasks import PredictionTarget
from components.settings import StepSettings
from components.precision_evaluator import batched_metrics
from components.precision_evaluator import executor as evaluator_executor
from components.trainer.train import TrainingJob, train
from pipeline.config import load_config

pytestmark = pytest.mark.slow  # a model trained and converted per module: minutes, not in make test-fast


TAXI_TARGET = PredictionTarget("big_tipper", "binary", ("not_big_tipper", "big_tipper"))


def _artifact(cls, uri, artifact_id=None):
    artifact = cls()
    artifact.uri = str(uri)
    if artifact_id is not None:
        artifact.id = artifact_id
    return artifact


@pytest.fixture(scope="module")
def trained(taxi_span_root, tmp_path_factory):
    """An Examples artifact (shard 0 train, shard 1 eval) and two models: a properly trained FP32 baseline and
    a mixed-precision 'candidate' left practically untrained (one pass at a learning rate of 1e-7)."""
    root = tmp_path_factory.mktemp("precision")
    shards = sorted(tf.io.gfile.glob(os.path.join(taxi_span_root, "span-1", "*.gz")))
    examples = _artifact(standard_artifacts.Examples, root / "examples", 1)
    for split, shard in zip(("train", "eval"), shards):
        os.makedirs(root / "examples" / f"Split-{split}")
        shutil.copy(shard, root / "examples" / f"Split-{split}" / os.path.basename(shard))
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    models = {}
    for name, model_id, overrides in (("fp32_baseline", 11, {"epochs": 3, "precision": "float32"}),
                                      ("candidate", 12, {"epochs": 1, "learning_rate": 1e-7,
                                                         "precision": "mixed_bfloat16"})):
        uri = root / name
        settings = load_config(train={"batch_size": 64, "input_probe_steps": 0, "xla": "off", **overrides}).train
        train(TrainingJob(settings=settings, train_files=[shards[0]], eval_files=[shards[1]],
                          serving_model_dir=str(uri / "Format-Serving"), run_dir=str(uri / "run"),
                          checkpoint_dir=str(uri / "checkpoints")))
        models[name] = _artifact(standard_artifacts.Model, uri, model_id)
    return examples, models


class _TfmaPerExampleExecutor(evaluator_executor.Executor):
    use_batched_metrics = False  # TFMA's own extractors and evaluator: the reference


def _evaluate(trained, output, executor_class=evaluator_executor.Executor, production=False, **evaluate):
    examples, models = trained
    evaluation = _artifact(standard_artifacts.ModelEvaluation, output / "evaluation")
    blessing = _artifact(standard_artifacts.ModelBlessing, output / "blessing")
    config = load_config(evaluate={"absolute_bar": 0.8, **evaluate})
    settings = StepSettings(config.evaluate, config.task, config.train.model, TAXI_TARGET).to_json()
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=["--direct_running_mode=in_memory"],
                                                          tmp_dir=str(output / "tmp"))
    inputs = {contract.EXAMPLES: [examples], contract.MODEL: [models["candidate"]],
              contract.BASELINE_MODEL: [models["fp32_baseline"]]}
    if production:  # a third model: the baseline again, in the production role
        inputs[contract.PRODUCTION_MODEL] = [models["fp32_baseline"]]
    executor_class(context).Do(inputs, {contract.EVALUATION: [evaluation], contract.BLESSING: [blessing]},
                               {contract.SETTINGS: settings})
    with open(output / "evaluation" / contract.PRECISION_REPORT_FILE) as handle:
        return blessing, json.load(handle)


def test_candidate_failing_fp32_parity_falls_back_to_the_baseline_which_is_exported(trained, tmp_path):
    examples, models = trained
    blessing, report = _evaluate(trained, tmp_path)
    overall = report["metrics"]["overall"]
    assert overall["fp32_baseline"]["auc"] > 0.8 and overall["fp32_baseline"]["auc"] - overall["candidate"]["auc"] > 0.005
    assert report["blessed"] is True and report["chosen_model"] == "fp32_baseline"
    assert "FP32 baseline blessed instead" in report["summary"]
    assert blessing.get_int_custom_property("blessed") == 1
    assert blessing.get_int_custom_property("current_model_id") == models["fp32_baseline"].id
    assert blessing.get_int_custom_property("baseline_model_id") == models["fp32_baseline"].id
    assert os.path.exists(tmp_path / "blessing" / "BLESSED")

    # ModelExport follows the blessing: it exports the baseline, not the candidate.
    exported = _artifact(ExportedModel, tmp_path / "export")
    config = load_config(export={"latency_examples": 20, "representative_examples": 100})
    schema = _artifact(standard_artifacts.Schema, tmp_path / "schema")
    os.makedirs(schema.uri)
    shutil.copy(load_config().schema_path, schema.uri)
    export_executor.Executor(base_executor.BaseExecutor.Context(tmp_dir=str(tmp_path / "tmp"))).Do(
        {contract.EXAMPLES: [examples], contract.SCHEMA: [schema], contract.MODEL: [models["candidate"]],
         contract.BASELINE_MODEL: [models["fp32_baseline"]], contract.BLESSING: [blessing]},
        {contract.EXPORTED_MODEL: [exported]},
        {contract.SETTINGS: StepSettings(config.export, config.task, "models.taxi", TAXI_TARGET).to_json()})
    with open(tmp_path / "export" / contract.EXPORT_REPORT_FILE) as handle:
        export_report = json.load(handle)
    assert export_report["source_model"]["id"] == models["fp32_baseline"].id
    assert abs(export_report["savedmodel"]["auc"] - overall["fp32_baseline"]["auc"]) < 0.001  # exact vs TFMA AUC
    assert exported.get_string_custom_property("recommended_tflite") == export_report["recommended"]


def test_without_the_fallback_nothing_is_blessed(trained, tmp_path):
    _, models = trained
    blessing, report = _evaluate(trained, tmp_path, fallback_to_fp32=False)
    assert report["blessed"] is False and report["chosen_model"] is None
    assert {(c["gate"], c["metric"]) for c in report["checks"] if not c["passed"]} >= {("fp32_parity", "auc")}
    assert blessing.get_int_custom_property("blessed") == 0
    assert blessing.get_int_custom_property("current_model_id") == models["candidate"].id
    assert os.path.exists(tmp_path / "blessing" / "NOT_BLESSED")
    assert "**NOT BLESSED**" in (tmp_path / "evaluation" / contract.PRECISION_REPORT_MARKDOWN).read_text()


def test_the_pipeline_config_takes_the_batched_metrics():
    """Every task's metrics, three models, overall and sliced: no fallback to the per-example evaluator."""
    targets = [TAXI_TARGET, PredictionTarget("species", "multiclass", ("a", "b", "c")),
               PredictionTarget("fare", "regression")]
    for target in targets:
        config = evaluator_executor.make_eval_config(["candidate", "fp32_baseline", "production"], target,
                                                     "payment_type")
        assert batched_metrics.unsupported_reason(config) is None, target
    with_other_metric = evaluator_executor.make_eval_config(["candidate"], TAXI_TARGET, "")
    with_other_metric.metrics_specs[0].metrics.add(class_name="SquaredPearsonCorrelation")
    # A metric without a batched twin runs on TFMA's own evaluator instead (the executor falls back).
    assert "no batched twin" in batched_metrics.unsupported_reason(with_other_metric)


def test_each_step_reads_its_settings_as_one_typed_record():
    """A StepSettings travels as JSON and comes back as the same record, its section typed as the step's own;
    the evaluator takes its section and target from it; an unknown setting is an error naming the step."""
    config = load_config(evaluate={"absolute_bar": 0.7, "slice_feature": ""},
                         export={"tflite_variants": ["float16", "full_int8"]})
    for section in (config.train, config.evaluate, config.export):
        record = StepSettings(section, config.task, config.train.model, TAXI_TARGET)
        assert StepSettings.from_json(record.to_json(), type(section), "a step") == record
    text = StepSettings(config.evaluate, config.task, config.train.model, TAXI_TARGET).to_json()
    assert evaluator_executor.read_settings(text) == (config.evaluate, TAXI_TARGET)
    unknown = json.loads(text)
    unknown["section"]["no_such_setting"] = 1
    with pytest.raises(ValueError, match="PrecisionEvaluator settings: unknown EvaluateConfig setting.*no_such_setting"):
        evaluator_executor.read_settings(json.dumps(unknown))
def test_batched_metrics_match_tfma_per_example_evaluator_on_the_models(trained, tmp_path):
    """Three models, overall and per payment type: every metric, the gates and the blessing as TFMA's own
    extractors and evaluator give them (1e-4 is the requirement; the difference is float rounding)."""
    _, batched = _evaluate(trained, tmp_path / "batched", production=True)
    _, reference = _evaluate(trained, tmp_path / "reference", executor_class=_TfmaPerExampleExecutor, production=True)
    assert batched["metrics"].keys() == reference["metrics"].keys() and len(batched["metrics"]) > 2
    for slice_name, per_model in reference["metrics"].items():
        assert batched["metrics"][slice_name].keys() == per_model.keys() == {"candidate", "fp32_baseline",
                                                                             "production"}
        for model, values in per_model.items():
            assert batched["metrics"][slice_name][model].keys() == values.keys()
            assert set(values) == {"example_count", "binary_crossentropy", "binary_accuracy", "auc", "precision",
                                   "recall"}
            for name, value in values.items():
                mine = batched["metrics"][slice_name][model][name]
                assert (mine is None) == (value is None), (slice_name, model, name)
                assert value is None or abs(mine - value) <= 1e-6, (slice_name, model, name, mine, value)
    for key in ("blessed", "chosen_model", "summary"):
        assert batched[key] == reference[key]
    assert [(c["gate"], c["model"], c["metric"], c["passed"]) for c in batched["checks"]] == \
        [(c["gate"], c["model"], c["metric"], c["passed"]) for c in reference["checks"]]
    assert sorted(os.listdir(tmp_path / "batched" / "evaluation")) == \
        sorted(os.listdir(tmp_path / "reference" / "evaluation"))


# --- Synthetic edge cases: the batched evaluator against TFMA's, model-free --------------------------------

_STAGE = "ColumnsAsModelOutputs"


def _columns_as_model_outputs(model_names):
    """A TFMA extractor standing in for batch_scoring.py: the label and each model's prediction are columns."""
    def add(extracts):
        batch = extracts[tfma.constants.ARROW_RECORD_BATCH_KEY]
        column = lambda name: batch.column(batch.schema.get_field_index(name)).flatten().to_numpy()  # noqa: E731
        return {**extracts, tfma.constants.LABELS_KEY: {name: column("label") for name in model_names},
                tfma.constants.PREDICTIONS_KEY: {name: column(f"prediction_{name}") for name in model_names}}
    return tfma.extractors.Extractor(stage_name=_STAGE, ptransform=beam.Map(add))


def _synthetic_batches(rows_per_batch=(1500, 700, 1)):
    """Record batches with multi-valued, missing and integer slice features, fractional labels, and
    predictions at 0, 1, the 0.5 threshold, bucket edges and outside [0, 1]."""
    rng = np.random.default_rng(7)
    payments = [b"Cash", b"Credit Card", b"Dispute"]
    batches = []
    for rows in rows_per_batch:
        payment = [None if rng.random() < 0.05 else
                   [payments[i] for i in rng.choice(3, size=rng.integers(0, 3), replace=False)] for _ in range(rows)]
        hour = [None if rng.random() < 0.1 else [int(rng.integers(0, 4))] for _ in range(rows)]
        label = (rng.random(rows) < 0.3).astype(np.float32)
        label[rng.random(rows) < 0.05] = 0.25
        predictions = {}
        for name, special in (("a", [0.0, 1.0, 0.5, 0.0001, 0.9999]), ("b", [1.0, 0.0, 0.5, 1.25, -0.1])):
            values = rng.random(rows).astype(np.float32)
            chosen = rng.random(rows) < 0.1
            values[chosen] = rng.choice(np.array(special, dtype=np.float32), size=chosen.sum())
            predictions[name] = values
        batches.append(pa.RecordBatch.from_arrays(
            [pa.array(payment, type=pa.large_list(pa.large_binary())), pa.array(hour, type=pa.large_list(pa.int64())),
             pa.array([[v] for v in label], type=pa.large_list(pa.float32()))]
            + [pa.array([[v] for v in predictions[name]], type=pa.large_list(pa.float32())) for name in ("a", "b")],
            ["payment_type", "hour", "label", "prediction_a", "prediction_b"]))
    return batches


def _synthetic_config():
    config = evaluator_executor.make_eval_config(["a", "b"], PredictionTarget("label", "binary", ("0", "1")),
                                                 "payment_type")
    for spec in (tfma.SlicingSpec(feature_keys=["hour"]), tfma.SlicingSpec(feature_keys=["payment_type", "hour"]),
                 tfma.SlicingSpec(feature_values={"payment_type": "Cash"})):
        config.slicing_specs.append(spec)
    for spec in config.model_specs:
        spec.ClearField("signature_name")
        spec.ClearField("preprocessing_function_names")
    return config


def _tfma_metrics(output_path, batches, config, extractors, evaluators):
    with beam.Pipeline() as pipeline:
        _ = (pipeline | beam.Create(batches, reshuffle=False)
             | tfma.ExtractEvaluateAndWriteResults(eval_config=config, output_path=str(output_path),
                                                   extractors=extractors, evaluators=evaluators))
    metrics = {}
    for per_slice in tfma.load_metrics(str(output_path)):
        for entry in per_slice.metric_keys_and_values:
            metrics[(str(per_slice.slice_key).replace("\n", " "), str(entry.key).replace("\n", " "))] = \
                entry.value.double_value.value
    return metrics


def test_batched_metrics_match_tfma_on_edge_cases(tmp_path):
    config = _synthetic_config()
    batches = _synthetic_batches()
    reference = _tfma_metrics(
        tmp_path / "reference", batches, config,
        [_columns_as_model_outputs(["a", "b"]), features_extractor.FeaturesExtractor(eval_config=config),
         unbatch_extractor.UnbatchExtractor(),
         slice_key_extractor.SliceKeyExtractor(eval_config=config, materialize=False)],
        [tfma.evaluators.MetricsPlotsAndValidationsEvaluator(eval_config=config)])
    batched = _tfma_metrics(tmp_path / "batched", batches, config, [_columns_as_model_outputs(["a", "b"])],
                            [batched_metrics.evaluator(config, run_after=_STAGE)])
    assert batched.keys() == reference.keys()
    slices = {slice_key for slice_key, _ in reference}
    assert len(slices) > 15  # overall, payment types, hours, their crosses, the Cash value slice
    nan = 0
    for key, value in reference.items():
        if math.isnan(value):
            nan += 1
            assert math.isnan(batched[key]), key
        elif math.isinf(value):
            assert batched[key] == value, key
        else:
            assert abs(batched[key] - value) <= 1e-9 * max(1.0, abs(value)), (key, batched[key], value)
    assert nan > 0  # predictions outside [0, 1] make cross-entropy NaN for model b, in both


def test_slice_groups_follow_tfma_slicer():
    batch = _synthetic_batches((300,))[0]
    config = _synthetic_config()
    groups = batched_metrics.slice_groups(list(config.slicing_specs), batch, {})
    payment, hour = batch.column(0).to_pylist(), batch.column(1).to_pylist()
    assert list(groups[()]) == list(range(300))
    for value in ("Cash", "Credit Card", "Dispute"):
        expected = [i for i in range(300) if payment[i] and value.encode() in payment[i]]
        assert list(groups[(("payment_type", value),)]) == expected
    expected = [i for i in range(300) if hour[i] == [2] and payment[i] and b"Dispute" in payment[i]]
    assert list(groups[(("hour", 2), ("payment_type", "Dispute"))]) == expected
    assert all(isinstance(key[0][1], int) for key in groups if key and key[0][0] == "hour")


# --- Multiclass and regression twins --------------------------------------------------------------------

def _outputs_as_rows(model_names):
    """Like _columns_as_model_outputs, for K values per example: each model's prediction column holds a row."""
    def add(extracts):
        batch = extracts[tfma.constants.ARROW_RECORD_BATCH_KEY]

        def column(name):
            values = batch.column(batch.schema.get_field_index(name)).flatten().to_numpy()
            rows = values.reshape(batch.num_rows, -1)
            return rows.reshape(batch.num_rows) if rows.shape[1] == 1 else rows
        return {**extracts, tfma.constants.LABELS_KEY: {name: column("label") for name in model_names},
                tfma.constants.PREDICTIONS_KEY: {name: column(f"prediction_{name}") for name in model_names}}
    return tfma.extractors.Extractor(stage_name=_STAGE, ptransform=beam.Map(add))


def _task_batches(task, rows_per_batch=(1200, 500, 1)):
    """Record batches with a slice feature, labels and two models' predictions for `task`: class ids and
    probability rows (ties, certainty, a zero row) for multiclass; skewed values with outliers for regression."""
    rng = np.random.default_rng(11)
    batches = []
    for rows in rows_per_batch:
        payment = [[[b"Cash", b"Credit Card"][int(rng.integers(0, 2))]] for _ in range(rows)]
        arrays, types = [pa.array(payment, type=pa.large_list(pa.large_binary()))], ["payment_type"]
        if task == "multiclass":
            labels = rng.integers(0, 3, rows)
            arrays.append(pa.array([[int(v)] for v in labels], type=pa.large_list(pa.int64())))
            for name in ("a", "b"):
                scores = rng.dirichlet([1.0, 1.0, 1.0], size=rows).astype(np.float32)
                special = rng.random(rows)
                scores[special < 0.05] = [0.5, 0.5, 0.0]  # a tie: the first class is the prediction
                scores[(special >= 0.05) & (special < 0.08)] = np.eye(3, dtype=np.float32)[labels[(special >= 0.05)
                                                                                                & (special < 0.08)]]
                scores[special > 0.995] = 0.0  # no class above the threshold
                arrays.append(pa.array([list(row) for row in scores], type=pa.large_list(pa.float32())))
        else:
            labels = rng.gamma(2.0, 6.0, rows).astype(np.float32)
            arrays.append(pa.array([[float(v)] for v in labels], type=pa.large_list(pa.float32())))
            for name in ("a", "b"):
                predictions = (labels + rng.normal(scale=3.0, size=rows)).astype(np.float32)
                predictions[rng.random(rows) < 0.01] = 500.0  # outliers
                arrays.append(pa.array([[float(v)] for v in predictions], type=pa.large_list(pa.float32())))
        batches.append(pa.RecordBatch.from_arrays(arrays, types + ["label", "prediction_a", "prediction_b"]))
    return batches


def _task_config(task):
    classes = ("x", "y", "z") if task == "multiclass" else ()
    config = evaluator_executor.make_eval_config(["a", "b"], PredictionTarget("label", task, classes),
                                                 "payment_type")
    for spec in config.model_specs:
        spec.ClearField("signature_name")
        spec.ClearField("preprocessing_function_names")
        spec.ClearField("prediction_key")
    return config


def _tfma_outputs(output_path, batches, config, extractors, evaluators):
    """TFMA's metrics and plots: {(slice, key): value}, plots as their text protos."""
    metrics = _tfma_metrics(output_path, batches, config, extractors, evaluators)
    for per_slice in tfma.load_plots(str(output_path)):
        for entry in per_slice.plot_keys_and_values:
            metrics[(str(per_slice.slice_key), str(entry.key))] = str(entry.value)
    return metrics


def test_multiclass_twins_match_tfma_per_example_metrics_and_confusion_matrix(tmp_path):
    """Sparse categorical accuracy and cross-entropy (Keras metrics TFMA wraps: float32 sums, so 1e-6), recall
    per class (binarized) and the confusion matrix plot (exactly), overall and per payment type."""
    config, batches = _task_config("multiclass"), _task_batches("multiclass")
    reference = _tfma_outputs(
        tmp_path / "reference", batches, config,
        [_outputs_as_rows(["a", "b"]), features_extractor.FeaturesExtractor(eval_config=config),
         unbatch_extractor.UnbatchExtractor(), slice_key_extractor.SliceKeyExtractor(eval_config=config,
                                                                                    materialize=False)],
        [tfma.evaluators.MetricsPlotsAndValidationsEvaluator(eval_config=config)])
    assert batched_metrics.unsupported_reason(config) is None
    batched = _tfma_outputs(tmp_path / "batched", batches, config, [_outputs_as_rows(["a", "b"])],
                            [batched_metrics.evaluator(config, run_after=_STAGE)])
    assert batched.keys() == reference.keys()
    names = " ".join(key for _, key in reference)
    for metric in ("sparse_categorical_accuracy", "sparse_categorical_crossentropy", "recall",
                   "multi_class_confusion_matrix_plot", "class_id"):
        assert metric in names, metric
    for key, value in reference.items():
        if isinstance(value, str):
            assert batched[key] == value, key  # the confusion matrix, cell for cell
        elif math.isnan(value):
            assert math.isnan(batched[key]), key
        else:
            assert abs(batched[key] - value) <= 1e-6 * max(1.0, abs(value)), (key, batched[key], value)


def test_regression_twins_give_the_exact_means_per_slice(tmp_path):
    """MSE, MAE, mean label and prediction, calibration: checked against numpy (TFMA's own per-example MSE and
    MAE count a merged accumulator twice when a runner merges partial sums, so they are no reference)."""
    config, batches = _task_config("regression"), _task_batches("regression")
    batched = _tfma_metrics(tmp_path / "batched", batches, config, [_outputs_as_rows(["a", "b"])],
                            [batched_metrics.evaluator(config, run_after=_STAGE)])
    labels = np.concatenate([b.column(1).flatten().to_numpy() for b in batches]).astype(np.float64)
    payment = np.concatenate([np.array(b.column(0).flatten().to_pylist()) for b in batches])
    found = 0
    for (slice_key, key), value in batched.items():
        model = "a" if 'model_name: "a"' in key else "b"
        predictions = np.concatenate([b.column(2 if model == "a" else 3).flatten().to_numpy()
                                      for b in batches]).astype(np.float64)
        members = np.ones(len(labels), bool)
        if "Cash" in slice_key or "Credit Card" in slice_key:
            members = payment == (b"Cash" if "Cash" in slice_key else b"Credit Card")
        error = labels[members] - predictions[members]
        expected = {"mean_squared_error": (error ** 2).mean(), "mean_absolute_error": np.abs(error).mean(),
                    "mean_label": labels[members].mean(), "mean_prediction": predictions[members].mean(),
                    "calibration": predictions[members].sum() / labels[members].sum(),
                    "example_count": members.sum()}
        name = key.split('name: "')[1].split('"')[0]
        assert value == pytest.approx(expected[name], rel=1e-6), (slice_key, key)
        found += 1
    assert found == 3 * 2 * 6  # overall and two payment types, two models, six metrics


def test_a_production_model_of_another_task_label_or_classes_is_not_compared():
    """The production comparison is skipped, with the reason, for a model that predicts something else; a model
    from before model facts were written is a binary one."""
    fares = PredictionTarget("fare", "regression")

    def mismatch(facts: dict, target: PredictionTarget = fares) -> str:
        return target.mismatch(ModelFacts.from_json(facts))

    facts = {"task": "regression", "label": "fare", "classes": []}
    assert mismatch(facts) == ""
    assert mismatch({**facts, "label": "tips"}) == "it predicts the label 'tips', the candidate 'fare'"
    assert mismatch({**facts, "task": "binary", "classes": ["no", "yes"]}).startswith(
        "it predicts a binary task with classes ['no', 'yes'], the candidate a regression task")
    assert mismatch({}, PredictionTarget("big_tipper", "binary", ("not_big_tipper", "big_tipper"))) == ""
    assert mismatch({}) == "it predates model facts (a binary model); the candidate is regression"


def test_a_tasks_metric_tfma_lacks_is_scored_from_the_per_example_predictions_and_none_is_replaced():
    from components.core import tasks

    labels = np.array([1.0, 2.0, 3.0, 10.0])
    predictions = {"candidate": np.array([1.0, 2.0, 3.0, 4.0]), "fp32_baseline": np.array([0.0, 0.0, 0.0, 0.0])}
    own = tasks.task_named("tests.pipeline.dag.quantile_task:QuantileTask")
    try:
        metrics = {"overall": {"candidate": {"mean_absolute_error": 1.5}, "fp32_baseline": {"example_count": 4}},
                   "weekday=sun": {"candidate": {"mean_absolute_error": 6.0}}}
        completed = evaluator_executor.scored_beside_tfma(metrics, own, labels, predictions)
        assert completed["overall"]["candidate"] == {"mean_absolute_error": 1.5,  # TFMA's value kept as it is
                                                     "pinball_loss": pytest.approx(0.9 * 6 / 4)}
        assert completed["overall"]["fp32_baseline"] == {"example_count": 4, "mean_absolute_error": 4.0,
                                                         "pinball_loss": pytest.approx(0.9 * 16 / 4)}
        assert completed["weekday=sun"] == {"candidate": {"mean_absolute_error": 6.0}}  # slices: TFMA's alone
        regression = {"overall": {"candidate": {"mean_absolute_error": 1.5, "mean_squared_error": 9.0,
                                                "root_mean_squared_error": 3.0}}}
        assert evaluator_executor.scored_beside_tfma(
            json.loads(json.dumps(regression)), tasks.task_named("regression"), labels, predictions) == regression
    finally:
        tasks.TASKS.pop(own.name)
