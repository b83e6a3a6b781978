"""ModelExport executor: the blessed model's SavedModel plus the TFLite ladder, each variant re-evaluated."""
from __future__ import annotations

import importlib
import json
import os
import tempfile
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.dsl.io import fileio
from tfx.types import artifact_utils
from tfx.utils import path_utils

from components import artifact_files
from components.model_export import tflite
from components.model_export.variants import judge_variants, recommended_variant
from components.precision_evaluator.blessing import chosen_model, is_blessed
from components.trainer.export import (MODEL_READY_FILE, PREPROCESS_SIGNATURE, SERVING_SIGNATURE, TRANSFORM_SIGNATURE,
                                       model_ready_dir)

SAVED_MODEL_DIR = "saved_model"
TFLITE_DIR = "tflite"
REPORT_FILE = "export_report.json"
REPORT_MARKDOWN = "export_report.md"
_BATCH = 1024


class Executor(base_executor.BaseExecutor):
    """Do(): copies the blessed model's SavedModel, converts and scores each TFLite variant, writes the report."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        blessing = artifact_utils.get_single_instance(input_dict["blessing"])
        exported = artifact_utils.get_single_instance(output_dict["exported_model"])
        settings = json.loads(exec_properties["settings"])
        fileio.makedirs(exported.uri)
        if not is_blessed(blessing):
            report = {"exported": False, "reason": "the model was not blessed; nothing to export"}
            exported.set_int_custom_property("exported", 0)
            _write_reports(exported.uri, report)
            return
        model = chosen_model(blessing, input_dict["model"] + input_dict["baseline_model"])
        examples = artifact_utils.get_single_instance(input_dict["examples"])
        report = export_model(
            serving_model_dir=path_utils.serving_model_path(model.uri),
            model_module=importlib.import_module(exec_properties["model_module"]),
            train_files=_split_files(examples, "train"), eval_files=_split_files(examples, "eval"),
            output_dir=exported.uri, settings=settings)
        report["source_model"] = {"uri": model.uri, "id": model.id}
        exported.set_int_custom_property("exported", 1)
        exported.set_string_custom_property("source_model_uri", model.uri)
        exported.set_string_custom_property("recommended_tflite", report["recommended"] or "")
        _write_reports(exported.uri, report)


def export_model(serving_model_dir: str, model_module, train_files: list[str], eval_files: list[str],
                 output_dir: str, settings: dict) -> dict:
    """Input: a trained model's serving SavedModel (with the model-ready Keras file beside it), the model module,
    gzip TFRecord files (train: full-int8 calibration; eval: scoring), an output folder and the `export`
    config section.

    Output: the export report; writes <output_dir>/saved_model and <output_dir>/tflite/<variant>.tflite.
    """
    artifact_files.copy_tree(serving_model_dir, os.path.join(output_dir, SAVED_MODEL_DIR))
    saved_model = tf.saved_model.load(serving_model_dir)
    eval_split = _score_savedmodel(saved_model, model_module, eval_files)
    reference = tflite.score(eval_split["labels"], eval_split["probabilities"])
    representative = _model_ready(saved_model, model_module, train_files, settings["representative_examples"])
    keras_model = keras.saving.load_model(os.path.join(model_ready_dir(serving_model_dir), MODEL_READY_FILE))
    results = {}
    with tempfile.TemporaryDirectory() as scratch:
        single_example = tflite.write_single_example_savedmodel(keras_model, os.path.join(scratch, "model"))
        for variant in settings["tflite_variants"]:
            logging.info("ModelExport: converting and scoring the %s TFLite variant", variant)
            flatbuffer = tflite.convert(single_example, variant, representative)
            relative_path = f"{TFLITE_DIR}/{variant}.tflite"
            artifact_files.write_bytes(os.path.join(output_dir, relative_path), flatbuffer)
            interpreter = tflite.SingleExampleInterpreter(flatbuffer)
            probabilities = interpreter.predict(eval_split["model_ready"])
            results[variant] = {
                **tflite.score(eval_split["labels"], probabilities),
                "size_bytes": len(flatbuffer),
                "weight_bytes": tflite.constant_bytes(flatbuffer),
                "median_latency_us": 1e6 * interpreter.median_latency_seconds(eval_split["model_ready"],
                                                                              settings["latency_examples"]),
                **_differences(probabilities, eval_split["probabilities"]),
                "file": relative_path,
            }
    judged = judge_variants(results, reference["auc"], settings["max_tflite_auc_drop"])
    return {"exported": True, "eval_examples": len(eval_split["labels"]), "savedmodel": reference,
            "max_tflite_auc_drop": settings["max_tflite_auc_drop"], "variants": judged,
            "recommended": recommended_variant(judged)}


def _differences(probabilities: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    difference = np.abs(probabilities - reference)
    return {"max_abs_diff": float(difference.max()), "mean_abs_diff": float(difference.mean())}


def _split_files(examples: types.Artifact, split: str) -> list[str]:
    files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([examples], split), "*"))
    if not files:
        raise FileNotFoundError(f"ModelExport: no {split} records under {examples.uri}")
    return sorted(files)


def _records(files: list[str]) -> tf.data.Dataset:
    return tf.data.TFRecordDataset(files, compression_type="GZIP").batch(_BATCH)


def _score_savedmodel(saved_model, model_module, files: list[str]) -> dict[str, Any]:
    """The SavedModel's probabilities, the labels and the model-ready features for every record in `files`."""
    parts: dict[str, list] = {"labels": [], "probabilities": [], "model_ready": []}
    for serialized in _records(files):
        parts["labels"].append(saved_model.signatures[TRANSFORM_SIGNATURE](examples=serialized)[
            model_module.LABEL_KEY].numpy().reshape(-1))
        parts["probabilities"].append(saved_model.signatures[SERVING_SIGNATURE](examples=serialized)[
            "probabilities"].numpy().reshape(-1))
        parts["model_ready"].append(_preprocess(saved_model, model_module, serialized))
    return {"labels": np.concatenate(parts["labels"]), "probabilities": np.concatenate(parts["probabilities"]),
            "model_ready": {name: np.concatenate([batch[name] for batch in parts["model_ready"]])
                            for name in parts["model_ready"][0]}}


def _model_ready(saved_model, model_module, files: list[str], rows: int) -> dict[str, np.ndarray]:
    """The first `rows` records of `files` as model-ready features (the full-int8 calibration set)."""
    serialized = next(iter(tf.data.TFRecordDataset(files, compression_type="GZIP").batch(rows)))
    return _preprocess(saved_model, model_module, serialized)


def _preprocess(saved_model, model_module, serialized: tf.Tensor) -> dict[str, np.ndarray]:
    raw = tf.io.parse_example(serialized, model_module.INPUTS)
    return {name: tensor.numpy() for name, tensor in saved_model.signatures[PREPROCESS_SIGNATURE](**raw).items()}


def _write_reports(directory: str, report: dict) -> None:
    artifact_files.write_json(os.path.join(directory, REPORT_FILE), report)
    artifact_files.write_text(os.path.join(directory, REPORT_MARKDOWN), render_markdown(report))


def render_markdown(report: dict) -> str:
    """The export report as a Markdown table: one row per TFLite variant."""
    if not report["exported"]:
        return f"# Export\n\nNot exported: {report['reason']}.\n"
    reference = report["savedmodel"]
    variants = report["variants"]
    float32 = variants.get("float32")
    lines = ["# Export", "",
             f"SavedModel on {report['eval_examples']} eval examples: AUC {reference['auc']:.4f}, "
             f"accuracy {reference['binary_accuracy']:.4f}.", "",
             "| variant | AUC | AUC drop | accuracy | size (bytes) | size vs float32 | weights vs float32 | median latency (µs) | "
             "latency vs float32 | output diff mean / max | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for variant, result in variants.items():
        size_ratio = f"{result['size_bytes'] / float32['size_bytes']:.2f}x" if float32 else "n/a"
        weight_ratio = f"{result['weight_bytes'] / float32['weight_bytes']:.2f}x" if float32 else "n/a"
        latency_ratio = f"{result['median_latency_us'] / float32['median_latency_us']:.2f}x" if float32 else "n/a"
        verdict = "recommended" if result["recommended"] else "accepted" if result["accepted"] else (
            "rejected: " + "; ".join(result["reasons"]))
        lines.append(f"| {variant} | {result['auc']:.4f} | {result['auc_drop']:.4f} | {result['binary_accuracy']:.4f} "
                     f"| {result['size_bytes']:,} | {size_ratio} | {weight_ratio} | {result['median_latency_us']:.1f} | {latency_ratio} "
                     f"| {result['mean_abs_diff']:.2g} / {result['max_abs_diff']:.2g} | {verdict} |")
    lines += ["", f"Recommended for devices: {report['recommended'] or 'none (every variant was rejected)'}.", ""]
    return "\n".join(lines)
