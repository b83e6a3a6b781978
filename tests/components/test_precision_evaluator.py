"""PrecisionEvaluator and ModelExport executors on real trained models, real TFMA (Beam DirectRunner) and
the real TFLite converter: a candidate that fails FP32 parity, with and without the fallback."""
import dataclasses
import json
import os
import shutil

import pytest
import tensorflow as tf
from tfx.dsl.components.base import base_beam_executor, base_executor
from tfx.proto import example_gen_pb2
from tfx.components.util import examples_utils
from tfx.types import artifact_utils, standard_artifacts

from components.model_export import executor as export_executor
from components.model_export.component import ExportedModel
from components.precision_evaluator import executor as evaluator_executor
from components.trainer.train import TrainingJob, train
from pipeline.config import load_config


def _artifact(cls, uri, artifact_id=None):
    artifact = cls()
    artifact.uri = str(uri)
    if artifact_id is not None:
        artifact.id = artifact_id
    return artifact


@pytest.fixture(scope="module")
def trained(taxi_span_root, tmp_path_factory):
    """An Examples artifact (shard 0 train, shard 1 eval) and two float32 models: a properly trained FP32
    baseline and a 'candidate' left practically untrained (one pass at a learning rate of 1e-7)."""
    root = tmp_path_factory.mktemp("precision")
    shards = sorted(tf.io.gfile.glob(os.path.join(taxi_span_root, "span-1", "*.gz")))
    examples = _artifact(standard_artifacts.Examples, root / "examples", 1)
    for split, shard in zip(("train", "eval"), shards):
        os.makedirs(root / "examples" / f"Split-{split}")
        shutil.copy(shard, root / "examples" / f"Split-{split}" / os.path.basename(shard))
    examples.split_names = artifact_utils.encode_split_names(["train", "eval"])
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    models = {}
    for name, model_id, overrides in (("fp32_baseline", 11, {"epochs": 3}),
                                      ("candidate", 12, {"epochs": 1, "learning_rate": 1e-7})):
        uri = root / name
        settings = dataclasses.asdict(load_config(train={"batch_size": 64, "input_probe_steps": 0, "precision": "float32",
                                                         "xla": "off", **overrides}).train)
        train(TrainingJob(settings=settings, train_files=[shards[0]], eval_files=[shards[1]],
                          serving_model_dir=str(uri / "Format-Serving"), run_dir=str(uri / "run"),
                          checkpoint_dir=str(uri / "checkpoints")))
        models[name] = _artifact(standard_artifacts.Model, uri, model_id)
    return examples, models


def _evaluate(trained, output, **evaluate):
    examples, models = trained
    evaluation = _artifact(standard_artifacts.ModelEvaluation, output / "evaluation")
    blessing = _artifact(standard_artifacts.ModelBlessing, output / "blessing")
    settings = {**dataclasses.asdict(load_config(evaluate={"min_auc": 0.8, **evaluate}).evaluate),
                "label_key": "big_tipper"}
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=["--direct_running_mode=in_memory"],
                                                          tmp_dir=str(output / "tmp"))
    evaluator_executor.Executor(context).Do(
        {"examples": [examples], "model": [models["candidate"]], "baseline_model": [models["fp32_baseline"]]},
        {"evaluation": [evaluation], "blessing": [blessing]}, {"settings": json.dumps(settings)})
    with open(output / "evaluation" / evaluator_executor.REPORT_FILE) as handle:
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
    settings = dataclasses.asdict(load_config(export={"latency_examples": 20, "representative_examples": 100}).export)
    export_executor.Executor(base_executor.BaseExecutor.Context(tmp_dir=str(tmp_path / "tmp"))).Do(
        {"examples": [examples], "model": [models["candidate"]], "baseline_model": [models["fp32_baseline"]],
         "blessing": [blessing]},
        {"exported_model": [exported]}, {"model_module": "models.taxi", "settings": json.dumps(settings)})
    with open(tmp_path / "export" / export_executor.REPORT_FILE) as handle:
        export_report = json.load(handle)
    assert export_report["source_model"]["id"] == models["fp32_baseline"].id
    assert abs(export_report["savedmodel"]["auc"] - overall["fp32_baseline"]["auc"]) < 0.005  # Keras vs TFMA AUC
    assert exported.get_string_custom_property("recommended_tflite") == export_report["recommended"]


def test_without_the_fallback_nothing_is_blessed(trained, tmp_path):
    _, models = trained
    blessing, report = _evaluate(trained, tmp_path, fallback_to_fp32=False)
    assert report["blessed"] is False and report["chosen_model"] is None
    assert {(c["gate"], c["metric"]) for c in report["checks"] if not c["passed"]} >= {("fp32_parity", "auc")}
    assert blessing.get_int_custom_property("blessed") == 0
    assert blessing.get_int_custom_property("current_model_id") == models["candidate"].id
    assert os.path.exists(tmp_path / "blessing" / "NOT_BLESSED")
    assert "**NOT BLESSED**" in (tmp_path / "evaluation" / evaluator_executor.REPORT_MARKDOWN).read_text()
