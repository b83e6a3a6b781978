"""ModelExport executor: the blessed model's SavedModel plus the TFLite ladder of device models (raw features
in, preprocessing inside, builtin ops only), each variant re-evaluated in LiteRT against serving_raw on a
bounded, evenly spread sample of the eval split (components/model_export/scoring.py)."""
from __future__ import annotations

import os
import tempfile
from typing import Any

import numpy as np
import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import io_utils, path_utils

from components.core import artifact_files, contract, tasks
from components.core.datasets import record_dataset
from components.core.model_module import (CALIBRATION_POOL, ModelModule, load_model_module, raw_signature_arguments,
                                          task_of)
from components.core.records import ExportReport, blessed_model, is_blessed, model_ready_dir
from components.core.task_layers import load_keras_model
from components.model_export import scoring, tflite
from components.model_export.variants import judge_variants, recommended_variant
from components.settings import ExportConfig, StepSettings

_BATCH = 1024
INPUTS_DESCRIPTION = "raw features"  # what every TFLite variant takes (the report's "inputs")


class Executor(base_executor.BaseExecutor):
    """Do(): copies the blessed model's SavedModel, converts and scores each TFLite variant, writes the report."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        blessing = artifact_utils.get_single_instance(input_dict[contract.BLESSING])
        exported = artifact_utils.get_single_instance(output_dict[contract.EXPORTED_MODEL])
        record = StepSettings.from_json(exec_properties[contract.SETTINGS], ExportConfig, "ModelExport")
        fileio.makedirs(exported.uri)
        if not is_blessed(blessing):
            report = ExportReport(False, reason="the model was not blessed; nothing to export")
            exported.set_int_custom_property(contract.EXPORTED_PROPERTY, 0)
            _write_reports(exported.uri, report)
            return
        model = blessed_model(blessing, input_dict[contract.MODEL] + input_dict[contract.BASELINE_MODEL])
        examples = artifact_utils.get_single_instance(input_dict[contract.EXAMPLES])
        schema_path = io_utils.get_only_uri_in_dir(artifact_utils.get_single_uri(input_dict[contract.SCHEMA]))
        report = export_model(
            serving_model_dir=path_utils.serving_model_path(model.uri),
            model_module=load_model_module(record.model, record.task, schema_path),
            train_files=_split_files(examples, "train"), eval_files=_split_files(examples, "eval"),
            output_dir=exported.uri, settings=record.section,
            eval_records=examples.get_int_custom_property(contract.SPLIT_EXAMPLES_PROPERTY.format(split="eval"))
            or None)
        report.source_model = {"uri": model.uri, "id": model.id}
        exported.set_int_custom_property(contract.EXPORTED_PROPERTY, 1)
        exported.set_string_custom_property(contract.SOURCE_MODEL_URI_PROPERTY, model.uri)
        exported.set_string_custom_property(contract.RECOMMENDED_TFLITE_PROPERTY, report.recommended or "")
        _write_reports(exported.uri, report)


def export_model(serving_model_dir: str, model_module: ModelModule, train_files: list[str], eval_files: list[str],
                 output_dir: str, settings: ExportConfig, eval_records: int | None = None) -> ExportReport:
    """Input: a trained model's serving SavedModel (with the preprocessing and model-ready Keras files beside
    it), the model module, gzip TFRecord files (train: full-int8 calibration; eval: scoring), an output folder,
    the `export` config section and, when known, the eval split's record count (the Examples artifact's
    `eval_examples`: it saves a counting pass over the split; a count that does not match the files is found
    out and the split counted).

    Output: the export report; writes <output_dir>/saved_model and <output_dir>/tflite/<variant>.tflite.
    Every variant takes raw features (model_module.INPUTS, batch size 1, each input named by its column's
    internal name: the report's "device_inputs" pairs the two) and is scored in LiteRT against the
    SavedModel's serving_raw signature on the same raw features: both on the scoring sample, at most
    `settings.scoring_examples` eval records evenly spread over the split (all of them when 0;
    scoring.sample_positions), each variant's drop and output difference with its paired interval at
    `settings.confidence`. A variant that cannot be converted with builtin ops only is left out of the ladder
    and named in "failed_variants".
    """
    artifact_files.copy_tree(serving_model_dir, os.path.join(output_dir, contract.SAVED_MODEL_DIR))
    task, classes = task_of(model_module), tuple(model_module.CLASSES)
    saved_model = tf.saved_model.load(serving_model_dir)
    eval_split = scoring_sample(saved_model, model_module, task, eval_files, settings.scoring_examples, eval_records)
    reference = task.score(eval_split["labels"], eval_split["predictions"])
    representative = calibration_features(saved_model, model_module, task, train_files, settings.representative_examples)
    results, failed = convert_and_score(serving_model_dir, model_module, eval_split, representative, output_dir,
                                        settings)
    scored = len(eval_split["labels"])
    judged = judge_variants(results, task, reference, settings.max_tflite_drop,
                            sampled=scored < eval_split["total"])
    return ExportReport(
        True, task_name=task.name, primary_metric=task.primary.name, classes=list(classes),
        eval_examples=eval_split["total"], scored_examples=scored, scoring_sample=scoring.SAMPLE_DESCRIPTION,
        confidence=settings.confidence, savedmodel=reference, inputs=INPUTS_DESCRIPTION,
        device_inputs=tflite.input_conventions(model_module.INPUTS, getattr(model_module, "INPUT_NOTES", None)),
        device_output=task.output_description(classes), compared_with=contract.RAW_SIGNATURE,
        runtime=tflite.runtime_name(), max_tflite_drop=settings.max_tflite_drop, variants=judged,
        failed_variants=failed, recommended=recommended_variant(judged))


def convert_and_score(serving_model_dir: str, model_module: ModelModule, eval_split: dict, representative: dict,
                      output_dir: str, settings: ExportConfig) -> tuple[dict[str, dict], dict[str, str]]:
    """Converts each configured TFLite variant of the device model (the Keras files beside the SavedModel),
    writes it to <output_dir>/tflite/ and scores it on the scoring sample. Output: (variant -> its result,
    variant -> why it could not be converted with builtin ops only)."""
    task = task_of(model_module)
    keras_dir = model_ready_dir(serving_model_dir)
    preprocessing = load_keras_model(os.path.join(keras_dir, contract.PREPROCESSING_FILE))
    model = load_keras_model(os.path.join(keras_dir, contract.MODEL_READY_FILE))
    results, failed = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        device_model = tflite.write_device_savedmodel(preprocessing, model, model_module.INPUTS, task.prediction_key,
                                                      os.path.join(scratch, "device_model"))
        converter = tflite.DeviceConverter(device_model)
        for variant in settings.tflite_variants:
            logging.info("ModelExport: converting and scoring the %s TFLite variant", variant)
            try:
                flatbuffer = converter.convert(variant, representative, float_output_layer=task.float_device_output)
            except tflite.ConversionError as error:
                logging.warning("ModelExport: the %s TFLite variant was not converted: %s", variant, error)
                failed[variant] = str(error)
                continue
            relative_path = f"{contract.TFLITE_DIR}/{variant}.tflite"
            artifact_files.write_bytes(os.path.join(output_dir, relative_path), flatbuffer)
            results[variant] = {**variant_result(flatbuffer, model_module, eval_split, settings), "file": relative_path}
    return results, failed


def variant_result(flatbuffer: bytes, model_module: ModelModule, eval_split: dict, settings: ExportConfig) -> dict:
    """One converted variant scored in LiteRT on the scoring sample against the SavedModel's predictions: the
    task's metrics, the drop's paired interval, size and weights, median latency (of the scoring's first
    `latency_examples` invocations), output differences, ops."""
    task = task_of(model_module)
    interpreter = tflite.DeviceInterpreter(flatbuffer, task.prediction_key, model_module.INPUTS)
    predictions, latency = interpreter.predict_timed(eval_split["raw"], settings.latency_examples)
    return {
        **task.score(eval_split["labels"], predictions),
        "drop_interval": scoring.drop_interval(task, eval_split["labels"], predictions, eval_split["predictions"],
                                               settings.confidence),
        "size_bytes": len(flatbuffer),
        **tflite.weight_bytes(flatbuffer),
        "median_latency_us": 1e6 * latency,
        **output_differences(task, predictions, eval_split["predictions"], settings.confidence),
        "ops": tflite.operators(flatbuffer),
        "non_builtin_ops": tflite.non_builtin_ops(flatbuffer),
        "quantized_preprocessing_ops": tflite.quantized_preprocessing_ops(flatbuffer),
    }


def output_differences(task: tasks.Task, predictions: np.ndarray, reference: np.ndarray,
                       confidence: float = 0.95) -> dict[str, Any]:
    """How far a variant's outputs are from the SavedModel's: the mean and largest absolute difference, in
    probability for classifiers; for regression relative to the spread of the SavedModel's predictions
    (their mean absolute deviation), so one tolerance serves any label scale. "mean_abs_diff_interval": the
    interval of the mean at `confidence`, over the per-example mean differences."""
    difference = np.abs(np.asarray(predictions, np.float64) - np.asarray(reference, np.float64))
    difference = difference / task.output_difference_scale(reference)
    per_example = difference.reshape(len(difference), -1).mean(axis=1)
    low, high = scoring.mean_interval(per_example, confidence)
    return {"max_abs_diff": float(difference.max()), "mean_abs_diff": float(difference.mean()),
            "mean_abs_diff_interval": [max(low, 0.0), high]}


def _split_files(examples: types.Artifact, split: str) -> list[str]:
    files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*"))
    if not files:
        raise FileNotFoundError(f"ModelExport: no {split} records under {examples.uri}")
    return sorted(files)


def _records(files: list[str]) -> tf.data.Dataset:
    return record_dataset(files, "GZIP").batch(_BATCH)


def _parse_raw(model_module: ModelModule, serialized: tf.Tensor) -> dict[str, tf.Tensor]:
    """Raw features as a device caller passes them, keyed by column name: an absent feature becomes its
    INPUTS default, which is the missing-value convention of the device model (and what serving_default
    does with the record)."""
    return tf.io.parse_example(serialized, model_module.INPUTS)


def count_records(files: list[str]) -> int:
    """The number of records in gzip TFRecord `files` (one pass, batched: no record is parsed)."""
    return int(record_dataset(files, "GZIP").batch(8 * _BATCH).reduce(
        np.int64(0), lambda count, batch: count + tf.shape(batch, out_type=tf.int64)[0]))


def scoring_sample(saved_model, model_module: ModelModule, task: tasks.Task, files: list[str], examples: int,
                   total: int | None = None) -> dict[str, Any]:
    """Input: the SavedModel, the model module, the task, the eval split's files, the sample size
    (`export.scoring_examples`; 0: every record) and the split's record count if known (None: counted here).
    Output: _score_savedmodel's dict for the records at scoring.sample_positions(total, examples), plus "total",
    the split's record count."""
    if examples == 0:  # every record: one pass, which counts them as well
        split = _score_savedmodel(saved_model, model_module, task, files)
        return {**split, "total": split["read"]}
    if total is None:
        total = count_records(files)
    split = _score_savedmodel(saved_model, model_module, task, files, scoring.sample_positions(total, examples))
    if split["read"] != total:  # a stale count: the sample would not be the one documented
        logging.warning("ModelExport: the eval split holds %d records, not %d as given; sampling again",
                        split["read"], total)
        total = split["read"]
        split = _score_savedmodel(saved_model, model_module, task, files, scoring.sample_positions(total, examples))
    return {**split, "total": total}


def _score_savedmodel(saved_model, model_module: ModelModule, task: tasks.Task, files: list[str],
                      positions: np.ndarray | None = None) -> dict[str, Any]:
    """For every record in `files`, or only those at `positions` (0-based, ascending, in the order the files
    are read): the label, the raw features (keyed by column name) and the SavedModel's serving_raw prediction
    (the task's prediction_key output: [N] or [N, K]); "read": how many records the files hold."""
    parts: dict[str, list] = {"labels": [], "predictions": [], "raw": []}
    read = 0
    for serialized in _records(files):
        start, read = read, read + int(serialized.shape[0])
        if positions is not None:
            chosen = positions[np.searchsorted(positions, start):np.searchsorted(positions, read)] - start
            if not len(chosen):
                continue
            serialized = tf.gather(serialized, chosen)
        raw = _parse_raw(model_module, serialized)
        parts["labels"].append(saved_model.signatures[contract.TRANSFORM_SIGNATURE](examples=serialized)[
            model_module.LABEL_KEY].numpy().reshape(-1))
        output = saved_model.signatures[contract.RAW_SIGNATURE](
            **raw_signature_arguments(model_module.INPUTS, raw))[task.prediction_key].numpy()
        parts["predictions"].append(output.reshape(len(output), -1))
        parts["raw"].append({name: tensor.numpy() for name, tensor in raw.items()})
    if not parts["labels"]:
        raise ValueError(f"ModelExport: no eval records to score in {', '.join(files)}")
    predictions = np.concatenate(parts["predictions"])
    return {"labels": np.concatenate(parts["labels"]),
            "predictions": predictions.reshape(-1) if predictions.shape[1] == 1 else predictions,
            "raw": {name: np.concatenate([batch[name] for batch in parts["raw"]]) for name in parts["raw"][0]},
            "read": read}


def calibration_features(saved_model, model_module: ModelModule, task: tasks.Task, files: list[str],
                         rows: int) -> dict[str, np.ndarray]:
    """The full-int8 calibration set: `rows` of the first CALIBRATION_POOL x `rows` training records (the model
    module's, or components.core.model_module.CALIBRATION_POOL), as the task chooses them from the SavedModel's
    predictions on those (Task.calibration_choice: the first `rows` for classifiers; for regression spread
    evenly over the range of the predictions, extremes included, so that every int8 activation range spans what
    the model predicts on its training data and only a prediction beyond all of that can saturate)."""
    pool = raw_features(model_module, files, rows * getattr(model_module, "CALIBRATION_POOL", CALIBRATION_POOL))

    def predictions() -> np.ndarray:  # called only by a task that chooses by them
        return saved_model.signatures[contract.RAW_SIGNATURE](**raw_signature_arguments(
            model_module.INPUTS, {name: tf.constant(values) for name, values in pool.items()}))[
            task.prediction_key].numpy()

    chosen = task.calibration_choice(len(next(iter(pool.values()))), predictions, rows)
    return {name: values[chosen] for name, values in pool.items()}


def raw_features(model_module: ModelModule, files: list[str], rows: int) -> dict[str, np.ndarray]:
    """The first `rows` records of `files` as raw features, column name -> array (the full-int8 calibration
    set)."""
    serialized = next(iter(record_dataset(files, "GZIP").batch(rows)))
    return {name: tensor.numpy() for name, tensor in _parse_raw(model_module, serialized).items()}


def _write_reports(directory: str, report: ExportReport) -> None:
    artifact_files.write_json(os.path.join(directory, contract.EXPORT_REPORT_FILE), report.to_json())
    artifact_files.write_text(os.path.join(directory, contract.EXPORT_REPORT_MARKDOWN), render_markdown(report))


def _missing_value(item: dict) -> str:
    """What the export report's table says a caller passes for a missing input."""
    value = item["missing_value"]
    if value is None:
        return "(required)"
    return "NaN" if item["dtype"] == "float32" and value == "NaN" else repr(value)


def _cell(text: str) -> str:
    """Text as one Markdown table cell (a column's name may hold `|`)."""
    return str(text).replace("|", "\\|")


def _inputs_table(inputs: list[dict]) -> list[str]:
    """The report's device_inputs as Markdown lines: per input its column, the device input it is passed as
    (a report written before device names were recorded: the column's), the dtype, what to pass (when some
    input has a note) and what to pass when the example lacks it."""
    notes = any(item.get("note") for item in inputs)
    lines = ["| column | device input | dtype | " + ("what to pass | " if notes else "")
             + "pass when the example lacks it |", "| --- | --- | --- | " + ("--- | " if notes else "") + "--- |"]
    for item in inputs:
        note = f"{_cell(item.get('note') or '')} | " if notes else ""
        lines.append(f"| {_cell(item['name'])} | {item.get('device_name', item['name'])} | {item['dtype']} | {note}"
                     f"{_cell(_missing_value(item))} |")
    return lines + [""]


def _scored_line(report: ExportReport) -> str:
    """Which eval records the SavedModel and the variants were scored on: "Scored on N of M eval examples
    (how they were chosen)", or on all M."""
    if report.scored >= report.eval_examples:
        return f"Scored on all {report.eval_examples:,} eval examples"
    return (f"Scored on {report.scored:,} of {report.eval_examples:,} eval examples ({report.scoring_sample}; "
            f"export.scoring_examples)")


def render_markdown(report: ExportReport) -> str:
    """The export report as Markdown: which eval records were scored, the SavedModel's metrics on them, the
    device model's inputs, then one row per TFLite variant with the task's metrics and its drop's interval."""
    if not report.exported:
        return f"# Export\n\nNot exported: {report.reason}.\n"
    task = report.task
    reference = report.savedmodel
    variants = report.variants
    float32 = variants.get("float32")
    metrics = [metric for metric in task.metrics if metric.name in reference]
    scores = ", ".join(f"{metric.label} {reference[metric.name]:.4f}" for metric in metrics)
    lines = ["# Export", "", f"{_scored_line(report)}.", "",
             f"SavedModel ({task.name}): {scores}.", "",
             f"TFLite inputs: {report.inputs}, one example per call (shape [1] each); output "
             f"{report.device_output}. Each variant was scored in {report.runtime} on the same records and "
             f"compared with the SavedModel's {report.compared_with} on the same raw features.", ""]
    if report.device_inputs:
        lines += _inputs_table(report.device_inputs)
    interval = f" [{report.confidence:.0%} interval]" if report.confidence else ""
    lines += ["| variant | " + " | ".join(metric.label for metric in metrics) + f" | {task.primary.label} drop"
              f"{interval} | size (bytes) | size vs float32 | weights vs float32 | median latency (µs) | "
              "latency vs float32 | output diff mean / max | verdict |",
              "| --- | " + " | ".join("---" for _ in metrics) + " | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for variant, result in variants.items():
        size_ratio = f"{result['size_bytes'] / float32['size_bytes']:.2f}x" if float32 else "n/a"
        weight_ratio = f"{result['weight_bytes'] / float32['weight_bytes']:.2f}x" if float32 else "n/a"
        latency_ratio = f"{result['median_latency_us'] / float32['median_latency_us']:.2f}x" if float32 else "n/a"
        verdict = "recommended" if result["recommended"] else "accepted" if result["accepted"] else (
            "rejected: " + "; ".join(result["reasons"]))
        if result.get("notes"):
            verdict += " (" + "; ".join(result["notes"]) + ")"
        drop = f"{result['drop']:.4f}"
        if result.get("drop_interval"):
            drop += " [{:+.4f}, {:+.4f}]".format(*result["drop_interval"])
        lines.append(f"| {variant} | " + " | ".join(f"{result[metric.name]:.4f}" for metric in metrics)
                     + f" | {drop} | {result['size_bytes']:,} | {size_ratio} | {weight_ratio} "
                     f"| {result['median_latency_us']:.1f} | {latency_ratio} "
                     f"| {result['mean_abs_diff']:.2g} / {result['max_abs_diff']:.2g} | {verdict} |")
    for variant, reason in report.failed_variants.items():
        lines.append(f"| {variant} | " + " | ".join("" for _ in metrics) + f" | | | | | | | | not converted: {reason} |")
    lines += ["", f"Recommended for devices: {report.recommended or 'none (no variant was accepted)'}.", ""]
    ops = sorted({op for result in variants.values() for op in result.get("ops", [])})
    if ops:
        lines += [f"Ops (TFLite builtins, no Flex): {', '.join(ops)}.", ""]
    return "\n".join(lines)
