"""PrecisionEvaluator executor: TFMA scores candidate, FP32 baseline and production model; gates decide.

One Beam pipeline (TFMA's ExtractEvaluateAndWriteResults) reads the eval split in batches; scoring.py runs
every model's signatures once per batch, per_example.py gathers each example's label and predictions for the
gates' paired comparisons, and batched_metrics.py feeds TFMA's metric computations a batch at a time instead
of an example at a time (where TFMA spends most of its time). The metrics are TFMA's: the same files,
metrics and slices. A config the batched evaluator cannot compute exactly runs TFMA's own extractors and
evaluator instead (the per-example predictions are then gathered by a scoring pass of their own).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import numpy as np
import tensorflow_model_analysis as tfma
from absl import logging
from tfx import types
from tfx.components.util import tfxio_utils
from tfx.components.evaluator import executor as evaluator_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils, path_utils

from components import artifact_files, contract, tasks
from components.precision_evaluator import batched_metrics, gates, per_example, scoring
from components.precision_evaluator.blessing import write_blessing
from components.settings import EvaluateConfig, section_from_dict
from components.trainer.export import read_model_facts

BATCH_SIZE = 4096  # eval examples per batch read, scored and summed together
CONFUSION_MATRIX_PLOT = "multi_class_confusion_matrix_plot"


@dataclasses.dataclass(frozen=True)
class Target:
    """What the models predict, from the model module: its label key, task and class names."""
    label_key: str
    task: str
    classes: tuple[str, ...] = ()


class Executor(evaluator_executor.Executor):
    """Do(): one TFMA run over the eval split for every model, then the gates, the blessing and the report.

    A subclass of TFX's Evaluator executor (a Beam executor) with its own Do: TFX's Kubeflow V2 entrypoint
    then turns the blessing's model ids into the artifact names KFP's resolver looks the blessed model up by
    (tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor, refactor_model_blessing).
    """

    use_batched_metrics = True  # False: TFMA's own extractors and evaluator (one combiner call per example)

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        settings, target = read_settings(exec_properties[contract.SETTINGS])
        task = tasks.task_named(target.task)
        candidate = artifact_utils.get_single_instance(input_dict[contract.MODEL])
        baseline = artifact_utils.get_single_instance(input_dict[contract.BASELINE_MODEL])
        candidate_facts = read_model_facts(path_utils.serving_model_path(candidate.uri))
        parity_not_applicable = not_applicable_parity(candidate_facts, skipped_baseline(baseline))
        models = {gates.CANDIDATE: candidate}
        if not skipped_baseline(baseline):
            models[gates.FP32_BASELINE] = baseline
        notes = []
        if input_dict.get(contract.PRODUCTION_MODEL):
            production = artifact_utils.get_single_instance(input_dict[contract.PRODUCTION_MODEL])
            mismatch = other_target(read_model_facts(path_utils.serving_model_path(production.uri)), target)
            if mismatch:
                notes.append(f"the production model was not compared: {mismatch}")
            else:
                models[gates.PRODUCTION] = production
        evaluation = artifact_utils.get_single_instance(output_dict[contract.EVALUATION])
        blessing = artifact_utils.get_single_instance(output_dict[contract.BLESSING])

        eval_config = make_eval_config(sorted(models), target, settings.slice_feature)
        self._run_tfma(input_dict[contract.EXAMPLES], models, eval_config, evaluation.uri)
        metrics = read_metrics(evaluation.uri, task)
        labels, predictions = per_example.read(evaluation.uri)
        training_labels = tasks.LabelSummary.from_json(candidate_facts["labels"]["train"])
        predictions[gates.TRIVIAL] = tasks.trivial_predictions(task, training_labels, len(labels))
        decision = gates.decide(task, gates.EvalPredictions(labels, predictions), settings, parity_not_applicable)
        chosen = models[decision.chosen_model] if decision.chosen_model else candidate
        write_blessing(blessing, decision.blessed, chosen, decision.chosen_model, baseline)
        examples = artifact_utils.get_single_instance(input_dict[contract.EXAMPLES])
        # Which data this blessing was decided on: later runs resolve their production model by it.
        blessing.set_int_custom_property(contract.SPAN_PROPERTY, examples.span)
        for key in (contract.FINGERPRINT_PROPERTY, contract.SPANS_PROPERTY):
            blessing.set_string_custom_property(key, examples.get_string_custom_property(key))
        report = {**decision.to_json(), "task": task.name, "primary_metric": task.primary.name,
                  "classes": list(target.classes), "eval_examples": len(labels),
                  "trivial_predictor": tasks.trivial_description(task, training_labels, target.classes),
                  "fp32_parity": parity_not_applicable or "compared", "notes": notes,
                  "settings": settings_record(settings, target),
                  "models": {name: {"uri": model.uri, "id": model.id} for name, model in models.items()},
                  "metrics": metrics}
        if task.name == tasks.MULTICLASS:
            report["confusion_matrix"] = read_confusion_matrices(evaluation.uri, len(target.classes))
        for folder in (evaluation.uri, blessing.uri):  # the report sits next to both artifacts a gate reads
            artifact_files.write_json(os.path.join(folder, contract.PRECISION_REPORT_FILE), report)
            artifact_files.write_text(os.path.join(folder, contract.PRECISION_REPORT_MARKDOWN),
                                      gates.render_markdown(decision, metrics, settings.confidence))
        logging.info("PrecisionEvaluator: %s", decision.summary)

    def _run_tfma(self, examples: list[types.Artifact], models: dict[str, types.Artifact],
                  eval_config: tfma.EvalConfig, output_uri: str) -> None:
        """Input: the Examples, {model name: Model}, the eval config, the output folder. Output: TFMA's
        results there (metrics, plots, validations, eval_config.json) and the per-example predictions, from
        one pass over the eval split."""
        model_paths = {name: path_utils.serving_model_path(model.uri) for name, model in sorted(models.items())}
        shared_models = [tfma.default_eval_shared_model(eval_saved_model_path=path, model_name=name,
                                                        eval_config=eval_config)
                         for name, path in model_paths.items()]
        score = scoring.extractor(eval_config, model_paths)
        gather = per_example.gatherer(output_uri, gates.CANDIDATE)
        extractors = evaluators = None  # None: TFMA's defaults
        reason = batched_metrics.unsupported_reason(eval_config) if self.use_batched_metrics else "switched off"
        if reason is None:
            extractors = [score, gather]
            evaluators = [batched_metrics.evaluator(eval_config, run_after=per_example.STAGE_NAME)]
        else:
            logging.warning("PrecisionEvaluator: TFMA's per-example evaluator (batched metrics: %s)", reason)
        tfxio_factory = tfxio_utils.get_tfxio_factory_from_artifact(
            examples=examples, telemetry_descriptors=["PrecisionEvaluator"],
            raw_record_column_name=tfma.constants.ARROW_INPUT_COLUMN)
        pattern = io_utils.all_files_pattern(artifact_utils.get_split_uri(examples, "eval"))
        with self._make_beam_pipeline() as pipeline:
            batches = pipeline | "ReadEvalSplit" >> tfxio_factory(pattern).BeamSource(batch_size=BATCH_SIZE)
            _ = batches | "ExtractEvaluateAndWriteResults" >> tfma.ExtractEvaluateAndWriteResults(
                eval_shared_model=shared_models, eval_config=eval_config, output_path=output_uri,
                extractors=extractors, evaluators=evaluators)
            if reason is not None:  # TFMA's extractors score per example: the gates' predictions are gathered apart
                _ = (batches | "ExtractsForGates" >> tfma.BatchedInputsToExtracts()
                     | "ScoreForGates" >> score.ptransform | "GatherForGates" >> gather.ptransform)


def skipped_baseline(baseline: types.Artifact) -> str:
    """Why the FP32 baseline Model holds no trained model ("" when it does): the reason its Trainer wrote."""
    marker = os.path.join(path_utils.serving_model_path(baseline.uri), contract.SKIPPED_BASELINE_FILE)
    return (artifact_files.read_json_if_exists(marker) or {}).get("reason", "")


def not_applicable_parity(candidate_facts: dict, baseline_skipped: str) -> str:
    """Why the candidate has no FP32 parity check ("" when it has one): it trained in plain float32 without
    XLA, so it is its own FP32 baseline, whether or not a baseline was trained beside it."""
    if baseline_skipped:
        return baseline_skipped
    if candidate_facts.get("precision") == "float32" and candidate_facts.get("xla") is False:
        return "candidate trained in float32 without XLA: it is its own FP32 baseline"
    return ""


def other_target(facts: dict, target: Target) -> str:
    """Why a model described by `facts` cannot be compared with models of `target` ("" when it can)."""
    if not facts:  # a model from before the facts were written: binary, with the label of its day
        return "" if target.task == tasks.BINARY else (
            f"it predates model facts (a binary model); the candidate is {target.task}")
    if facts.get("task") != target.task or tuple(facts.get("classes", ())) != tuple(target.classes):
        return (f"it predicts a {facts.get('task')} task with classes {facts.get('classes')}, the candidate a "
                f"{target.task} task with classes {list(target.classes)}")
    if facts.get("label", target.label_key) != target.label_key:
        return f"it predicts the label {facts['label']!r}, the candidate {target.label_key!r}"
    return ""


def settings_record(settings: EvaluateConfig, target: Target) -> dict:
    """The `evaluate` config section and what the models predict as one JSON-ready dict (the report's
    "settings")."""
    return {**dataclasses.asdict(settings), "target": dataclasses.asdict(target)}


def settings_json(settings: EvaluateConfig, target: Target) -> str:
    """Input: the `evaluate` config section and the model's target. Output: the exec property `settings`."""
    return json.dumps(settings_record(settings, target))


def read_settings(settings_text: str) -> tuple[EvaluateConfig, Target]:
    """Input: the exec property `settings` (settings_json's output). Output: the `evaluate` config section and
    the models' target."""
    values = json.loads(settings_text)
    target = values.pop("target")
    return (section_from_dict(EvaluateConfig, values, "PrecisionEvaluator settings", "evaluation"),
            Target(target["label_key"], target["task"], tuple(target.get("classes", ()))))


def make_eval_config(model_names: list[str], target: Target, slice_feature: str) -> tfma.EvalConfig:
    """Input: the model names, what they predict, the feature to slice on ("" for none). Output: the TFMA
    config: every model on the task's metrics (components/tasks.py), overall and per value of the slice
    feature, no thresholds (gates.py holds the tolerances)."""
    task = tasks.task_named(target.task)
    slicing_specs = [tfma.SlicingSpec()]
    if slice_feature:
        slicing_specs.append(tfma.SlicingSpec(feature_keys=[slice_feature]))
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(name=name, signature_name=contract.SERVING_SIGNATURE, label_key=target.label_key,
                                    prediction_key=task.prediction_key,
                                    preprocessing_function_names=[contract.TRANSFORM_SIGNATURE])
                     for name in model_names],
        slicing_specs=slicing_specs,
        metrics_specs=tasks.tfma_metrics_specs(task, model_names, len(target.classes)))


def metric_name(key) -> str:
    """A TFMA MetricKey proto's name in the report: the metric's name, with `/class_<id>` for one class."""
    if key.HasField("sub_key") and key.sub_key.HasField("class_id"):
        return f"{key.name}/class_{key.sub_key.class_id.value}"
    return key.name


def read_metrics(output_uri: str, task: tasks.Task) -> dict[str, dict[str, dict[str, float]]]:
    """TFMA's metrics as {slice: {model: {metric: value or None}}}; slice "overall" or "<feature>=<value>";
    per-class metrics as "<metric>/class_<id>"; what the task derives from them added (regression: RMSE)."""
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    for per_slice in tfma.load_metrics(output_uri):
        slice_name = "; ".join(f"{key.column}={_slice_value(key)}" for key in per_slice.slice_key.single_slice_keys)
        per_model = metrics.setdefault(slice_name or gates.OVERALL, {})
        for entry in per_slice.metric_keys_and_values:
            if entry.key.is_diff or not entry.value.HasField("double_value"):
                continue
            value = entry.value.double_value.value
            # Undefined metrics (precision with no positive prediction in a slice) are null, not NaN, in JSON.
            per_model.setdefault(entry.key.model_name, {})[metric_name(entry.key)] = (
                value if math.isfinite(value) else None)
    if gates.OVERALL not in metrics:
        raise ValueError(f"TFMA wrote no overall metrics under {output_uri}: is the eval split empty?")
    metrics = {name: {model: tasks.derived_metrics(task, values) for model, values in per_model.items()}
               for name, per_model in metrics.items()}
    return dict(sorted(metrics.items(), key=lambda item: (item[0] != gates.OVERALL, item[0])))


def read_confusion_matrices(output_uri: str, classes: int) -> dict[str, list[list[int]]]:
    """{model: rows of actual classes, columns of predicted classes} over the whole eval split (TFMA's
    multi-class confusion matrix plot at threshold 0: the most probable class is the prediction)."""
    matrices = {}
    for per_slice in tfma.load_plots(output_uri):
        if per_slice.slice_key.single_slice_keys:
            continue
        for entry in per_slice.plot_keys_and_values:
            if entry.key.name != CONFUSION_MATRIX_PLOT:
                continue
            counts = np.zeros((classes, classes), dtype=np.int64)
            for matrix in entry.value.multi_class_confusion_matrix_at_thresholds.matrices[:1]:
                for cell in matrix.entries:
                    if 0 <= cell.predicted_class_id < classes:
                        counts[cell.actual_class_id, cell.predicted_class_id] += int(cell.num_weighted_examples)
            matrices[entry.key.model_name] = counts.tolist()
    return matrices


def _slice_value(key) -> str:
    kind = key.WhichOneof("kind")
    value = getattr(key, kind)
    return value.decode() if isinstance(value, bytes) else str(value)
