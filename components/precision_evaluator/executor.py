"""PrecisionEvaluator executor: TFMA scores candidate, FP32 baseline and production model; gates decide.

One Beam pipeline (TFMA's ExtractEvaluateAndWriteResults) reads the eval split in batches; batch_scoring.py runs
every model's signatures once per batch, per_example.py gathers each example's label and predictions for the
gates' paired comparisons, and batched_metrics.py feeds TFMA's metric computations a batch at a time instead
of an example at a time (where TFMA spends most of its time). The metrics are TFMA's: the same files,
metrics and slices. A config the batched evaluator cannot compute exactly runs TFMA's own extractors and
evaluator instead (the per-example predictions are then gathered by a scoring pass of their own).
"""
from __future__ import annotations

import dataclasses
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

from components.core import artifact_files, contract, tasks
from components.core.records import EvaluationReport, ModelFacts, read_model_facts
from components.core.tasks import PredictionTarget
from components.precision_evaluator import batch_scoring, batched_metrics, gates, per_example
from components.precision_evaluator.blessing import write_blessing
from components.settings import EvaluateConfig, StepSettings

BATCH_SIZE = 4096  # eval examples per batch read, scored and summed together
CONFUSION_MATRIX_PLOT = "multi_class_confusion_matrix_plot"


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
        task = target.task
        candidate = artifact_utils.get_single_instance(input_dict[contract.MODEL])
        baseline = artifact_utils.get_single_instance(input_dict[contract.BASELINE_MODEL])
        candidate_facts = read_model_facts(path_utils.serving_model_path(candidate.uri))
        parity_not_applicable = not_applicable_parity(candidate_facts, skipped_baseline(baseline))
        models = {contract.CANDIDATE: candidate}
        if not skipped_baseline(baseline):
            models[contract.FP32_BASELINE] = baseline
        notes = []
        if input_dict.get(contract.PRODUCTION_MODEL):
            production = artifact_utils.get_single_instance(input_dict[contract.PRODUCTION_MODEL])
            mismatch = target.mismatch(read_model_facts(path_utils.serving_model_path(production.uri)))
            if mismatch:
                notes.append(f"the production model was not compared: {mismatch}")
            else:
                models[contract.PRODUCTION] = production
        evaluation = artifact_utils.get_single_instance(output_dict[contract.EVALUATION])
        blessing = artifact_utils.get_single_instance(output_dict[contract.BLESSING])

        eval_config = make_eval_config(sorted(models), target, settings.slice_feature)
        self._run_tfma(input_dict[contract.EXAMPLES], models, eval_config, evaluation.uri)
        labels, predictions = per_example.read(evaluation.uri)
        task.check_labels(labels, target.classes, "eval split")  # the trivial predictor is built from them
        metrics = scored_beside_tfma(read_metrics(evaluation.uri, task), task, labels, predictions)
        predictions[contract.TRIVIAL] = task.trivial_predictions(labels, target.classes)
        decision = gates.decide(task, gates.EvalPredictions(labels, predictions), settings, parity_not_applicable)
        chosen = models[decision.chosen_model] if decision.chosen_model else candidate
        write_blessing(blessing, decision.blessed, chosen, decision.chosen_model, baseline)
        examples = artifact_utils.get_single_instance(input_dict[contract.EXAMPLES])
        # Which data this blessing was decided on: later runs resolve their production model by it.
        blessing.set_int_custom_property(contract.SPAN_PROPERTY, examples.span)
        for key in (contract.FINGERPRINT_PROPERTY, contract.SPANS_PROPERTY):
            blessing.set_string_custom_property(key, examples.get_string_custom_property(key))
        report = EvaluationReport(
            decision.blessed, decision.chosen_model, decision.summary, decision.checks, task.name, task.primary.name,
            list(target.classes), len(labels), task.trivial_description(labels, target.classes),
            parity_not_applicable or "compared", notes, settings_record(settings, target),
            {name: {"uri": model.uri, "id": model.id} for name, model in models.items()}, metrics,
            read_confusion_matrices(evaluation.uri, len(target.classes)) if task.reports_confusion_matrix else {})
        for folder in (evaluation.uri, blessing.uri):  # the report sits next to both artifacts a gate reads
            artifact_files.write_json(os.path.join(folder, contract.PRECISION_REPORT_FILE), report.to_json())
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
        score = batch_scoring.extractor(eval_config, model_paths)
        gather = per_example.gatherer(output_uri, contract.CANDIDATE)
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


def not_applicable_parity(candidate_facts: ModelFacts, baseline_skipped: str) -> str:
    """Why the candidate has no FP32 parity check ("" when it has one): it trained in plain float32 without
    XLA, so it is its own FP32 baseline, whether or not a baseline was trained beside it."""
    if baseline_skipped:
        return baseline_skipped
    if candidate_facts.precision == "float32" and candidate_facts.xla is False:
        return "candidate trained in float32 without XLA: it is its own FP32 baseline"
    return ""


def settings_record(settings: EvaluateConfig, target: PredictionTarget) -> dict:
    """The `evaluate` config section and what the models predict as one JSON-ready dict (the report's
    "settings")."""
    return {**dataclasses.asdict(settings), "target": target.to_json()}


def read_settings(settings_text: str) -> tuple[EvaluateConfig, PredictionTarget]:
    """Input: the exec property `settings` (a StepSettings' JSON). Output: the `evaluate` config section and
    the models' target."""
    record = StepSettings.from_json(settings_text, EvaluateConfig, "PrecisionEvaluator")
    return record.section, record.target


def make_eval_config(model_names: list[str], target: PredictionTarget, slice_feature: str) -> tfma.EvalConfig:
    """Input: the model names, what they predict, the feature to slice on ("" for none). Output: the TFMA
    config: every model on the task's metrics (components/core/tasks.py), overall and per value of the slice
    feature, no thresholds (gates.py holds the tolerances)."""
    task = target.task
    slicing_specs = [tfma.SlicingSpec()]
    if slice_feature:
        slicing_specs.append(tfma.SlicingSpec(feature_keys=[slice_feature]))
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(name=name, signature_name=contract.SERVING_SIGNATURE, label_key=target.label_key,
                                    prediction_key=task.prediction_key,
                                    preprocessing_function_names=[contract.TRANSFORM_SIGNATURE])
                     for name in model_names],
        slicing_specs=slicing_specs,
        metrics_specs=[tfma.MetricsSpec(
            metrics=[tfma.MetricConfig(class_name=name) for name in names], model_names=model_names,
            binarize=tfma.BinarizationOptions(class_ids={"values": list(class_ids)}) if class_ids else None)
            for names, class_ids in task.tfma_metrics(len(target.classes))])


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
        per_model = metrics.setdefault(slice_name or contract.OVERALL, {})
        for entry in per_slice.metric_keys_and_values:
            if entry.key.is_diff or not entry.value.HasField("double_value"):
                continue
            value = entry.value.double_value.value
            # Undefined metrics (precision with no positive prediction in a slice) are null, not NaN, in JSON.
            per_model.setdefault(entry.key.model_name, {})[metric_name(entry.key)] = (
                value if math.isfinite(value) else None)
    if contract.OVERALL not in metrics:
        raise ValueError(f"TFMA wrote no overall metrics under {output_uri}: is the eval split empty?")
    metrics = {name: {model: task.derived_metrics(values) for model, values in per_model.items()}
               for name, per_model in metrics.items()}
    return dict(sorted(metrics.items(), key=lambda item: (item[0] != contract.OVERALL, item[0])))


def scored_beside_tfma(metrics: dict, task: tasks.Task, labels: np.ndarray, predictions: dict) -> dict:
    """Input: read_metrics' table, the task, the eval labels and each model's per-example predictions. Output:
    the table with each metric of the task that TFMA does not compute (a task of one's own may have one) scored
    over the whole eval split (Task.score) for every model, under OVERALL; a slice keeps what TFMA gave."""
    for model, values in metrics[contract.OVERALL].items():
        missing = [metric.name for metric in task.metrics if metric.name not in values]
        if missing and model in predictions:
            scored = task.score(labels, predictions[model])
            values.update({name: scored[name] for name in missing if name in scored})
    return metrics


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
