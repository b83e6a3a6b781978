"""PrecisionEvaluator executor: TFMA scores candidate, FP32 baseline and production model; gates decide.

One Beam pipeline (TFMA's ExtractEvaluateAndWriteResults) reads the eval split in batches; scoring.py runs
every model's signatures once per batch and batched_metrics.py feeds TFMA's metric computations a batch at a
time instead of an example at a time (where TFMA spends most of its time). The output is TFMA's: the same
files, metrics and slices. A config the batched evaluator cannot compute exactly runs TFMA's own extractors
and evaluator instead.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any

import tensorflow_model_analysis as tfma
from absl import logging
from tfx import types
from tfx.components.util import tfxio_utils
from tfx.components.evaluator import executor as evaluator_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils, path_utils

from components import artifact_files, contract
from components.precision_evaluator import batched_metrics, gates, scoring
from components.precision_evaluator.blessing import write_blessing
from components.settings import EvaluateConfig, section_from_dict

LABEL_KEY_SETTING = "label_key"  # in the `settings` JSON, beside the evaluate section: the model's label
METRICS = ("ExampleCount", "BinaryCrossEntropy", "BinaryAccuracy", "AUC", "Precision", "Recall")
BATCH_SIZE = 4096  # eval examples per batch read, scored and summed together


class Executor(evaluator_executor.Executor):
    """Do(): one TFMA run over the eval split for every model, then the gates, the blessing and the report.

    A subclass of TFX's Evaluator executor (a Beam executor) with its own Do: TFX's Kubeflow V2 entrypoint
    then turns the blessing's model ids into the artifact names KFP's resolver looks the blessed model up by
    (tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor, refactor_model_blessing).
    """

    use_batched_metrics = True  # False: TFMA's own extractors and evaluator (one combiner call per example)

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        settings, label_key = read_settings(exec_properties[contract.SETTINGS])
        candidate = artifact_utils.get_single_instance(input_dict[contract.MODEL])
        baseline = artifact_utils.get_single_instance(input_dict[contract.BASELINE_MODEL])
        models = {gates.CANDIDATE: candidate, gates.FP32_BASELINE: baseline}
        if input_dict.get(contract.PRODUCTION_MODEL):
            models[gates.PRODUCTION] = artifact_utils.get_single_instance(input_dict[contract.PRODUCTION_MODEL])
        evaluation = artifact_utils.get_single_instance(output_dict[contract.EVALUATION])
        blessing = artifact_utils.get_single_instance(output_dict[contract.BLESSING])

        eval_config = make_eval_config(sorted(models), label_key, settings.slice_feature)
        self._run_tfma(input_dict[contract.EXAMPLES], models, eval_config, evaluation.uri)
        metrics = read_metrics(evaluation.uri)
        decision = gates.decide(metrics, settings)
        chosen = models[decision.chosen_model] if decision.chosen_model else candidate
        write_blessing(blessing, decision.blessed, chosen, decision.chosen_model, baseline)
        examples = artifact_utils.get_single_instance(input_dict[contract.EXAMPLES])
        # Which data this blessing was decided on: later runs resolve their production model by it.
        blessing.set_int_custom_property(contract.SPAN_PROPERTY, examples.span)
        for key in (contract.FINGERPRINT_PROPERTY, contract.SPANS_PROPERTY):
            blessing.set_string_custom_property(key, examples.get_string_custom_property(key))
        report = {**decision.to_json(), "settings": settings_record(settings, label_key),
                  "models": {name: {"uri": model.uri, "id": model.id} for name, model in models.items()},
                  "metrics": metrics}
        for folder in (evaluation.uri, blessing.uri):  # the report sits next to both artifacts a gate reads
            artifact_files.write_json(os.path.join(folder, contract.PRECISION_REPORT_FILE), report)
            artifact_files.write_text(os.path.join(folder, contract.PRECISION_REPORT_MARKDOWN),
                                      gates.render_markdown(decision, metrics))
        logging.info("PrecisionEvaluator: %s", decision.summary)

    def _run_tfma(self, examples: list[types.Artifact], models: dict[str, types.Artifact],
                  eval_config: tfma.EvalConfig, output_uri: str) -> None:
        """Input: the Examples, {model name: Model}, the eval config, the output folder. Output: TFMA's
        results there (metrics, plots, validations, eval_config.json), from one pass over the eval split."""
        model_paths = {name: path_utils.serving_model_path(model.uri) for name, model in sorted(models.items())}
        shared_models = [tfma.default_eval_shared_model(eval_saved_model_path=path, model_name=name,
                                                        eval_config=eval_config)
                         for name, path in model_paths.items()]
        extractors = evaluators = None  # None: TFMA's defaults
        reason = batched_metrics.unsupported_reason(eval_config) if self.use_batched_metrics else "switched off"
        if reason is None:
            extractors = [scoring.extractor(eval_config, model_paths)]
            evaluators = [batched_metrics.evaluator(eval_config, run_after=scoring.STAGE_NAME)]
        else:
            logging.warning("PrecisionEvaluator: TFMA's per-example evaluator (batched metrics: %s)", reason)
        tfxio_factory = tfxio_utils.get_tfxio_factory_from_artifact(
            examples=examples, telemetry_descriptors=["PrecisionEvaluator"],
            raw_record_column_name=tfma.constants.ARROW_INPUT_COLUMN)
        pattern = io_utils.all_files_pattern(artifact_utils.get_split_uri(examples, "eval"))
        with self._make_beam_pipeline() as pipeline:
            _ = (pipeline
                 | "ReadEvalSplit" >> tfxio_factory(pattern).BeamSource(batch_size=BATCH_SIZE)
                 | "ExtractEvaluateAndWriteResults" >> tfma.ExtractEvaluateAndWriteResults(
                        eval_shared_model=shared_models, eval_config=eval_config, output_path=output_uri,
                        extractors=extractors, evaluators=evaluators))


def settings_record(settings: EvaluateConfig, label_key: str) -> dict:
    """The `evaluate` config section and the model's label key as one JSON-ready dict (the report's "settings")."""
    return {**dataclasses.asdict(settings), LABEL_KEY_SETTING: label_key}


def settings_json(settings: EvaluateConfig, label_key: str) -> str:
    """Input: the `evaluate` config section and the model's label key. Output: the exec property `settings`."""
    return json.dumps(settings_record(settings, label_key))


def read_settings(settings_text: str) -> tuple[EvaluateConfig, str]:
    """Input: the exec property `settings` (settings_json's output). Output: the `evaluate` config section and
    the model's label key."""
    values = json.loads(settings_text)
    label_key = values.pop(LABEL_KEY_SETTING)
    return section_from_dict(EvaluateConfig, values, "PrecisionEvaluator settings", "evaluation"), label_key


def make_eval_config(model_names: list[str], label_key: str, slice_feature: str) -> tfma.EvalConfig:
    """Input: the model names, the label key, the feature to slice on ("" for none). Output: the TFMA config:
    every model on the same metrics, overall and per value of the slice feature, no thresholds (gates.py
    holds the tolerances)."""
    slicing_specs = [tfma.SlicingSpec()]
    if slice_feature:
        slicing_specs.append(tfma.SlicingSpec(feature_keys=[slice_feature]))
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(name=name, signature_name=contract.SERVING_SIGNATURE, label_key=label_key,
                                    preprocessing_function_names=[contract.TRANSFORM_SIGNATURE])
                     for name in model_names],
        slicing_specs=slicing_specs,
        metrics_specs=[tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name=name) for name in METRICS],
                                        model_names=model_names)])


def read_metrics(output_uri: str) -> dict[str, dict[str, dict[str, float]]]:
    """TFMA's metrics as {slice: {model: {metric: value or None}}}; slice "overall" or "<feature>=<value>"."""
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    for per_slice in tfma.load_metrics(output_uri):
        slice_name = "; ".join(f"{key.column}={_slice_value(key)}" for key in per_slice.slice_key.single_slice_keys)
        per_model = metrics.setdefault(slice_name or gates.OVERALL, {})
        for entry in per_slice.metric_keys_and_values:
            if entry.key.is_diff or not entry.value.HasField("double_value"):
                continue
            value = entry.value.double_value.value
            # Undefined metrics (precision with no positive prediction in a slice) are null, not NaN, in JSON.
            per_model.setdefault(entry.key.model_name, {})[entry.key.name] = value if math.isfinite(value) else None
    if gates.OVERALL not in metrics:
        raise ValueError(f"TFMA wrote no overall metrics under {output_uri}: is the eval split empty?")
    return dict(sorted(metrics.items(), key=lambda item: (item[0] != gates.OVERALL, item[0])))


def _slice_value(key) -> str:
    kind = key.WhichOneof("kind")
    value = getattr(key, kind)
    return value.decode() if isinstance(value, bytes) else str(value)
