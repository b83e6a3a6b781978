"""Exports preprocessing + trained model as one SavedModel whose signatures take and return float32, and
the model alone (model-ready inputs) and the fitted preprocessing as Keras files: ModelExport traces the
two together into the device model (raw features in, TFLite), and a later training warm-starts from them.

The trained model may compute in float16/bfloat16; its variables are float32. Export rebuilds the model
under the float32 policy and copies the weights, so the serving graph holds no half-precision op and runs
on any CPU (a float16 graph is slow or fails on CPUs without float16 kernels: tensorflow#45441).
"""
from __future__ import annotations

import os

import keras
import tensorflow as tf
from tfx.dsl.io import fileio

from components import artifact_files, contract, tasks
from components.feature_names import internal_names
from models.interface import ModelModule, task_of


def model_ready_dir(serving_model_dir: str) -> str:
    """Where the model-ready Keras file (the input of TFLite conversion) sits for a serving SavedModel."""
    # Not os.path.normpath: it turns s3://bucket/x into s3:/bucket/x, a local relative path.
    return os.path.join(os.path.dirname(serving_model_dir.rstrip("/")), contract.MODEL_READY_DIR)


def build_float32(model_module: ModelModule, preprocessing: keras.Model) -> keras.Model:
    """Output: the model module's model on `preprocessing`, built under the float32 policy (whatever policy
    is set, and set again afterwards)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        return model_module.build_model(preprocessing)
    finally:
        keras.config.set_dtype_policy(previous)


def float32_copy(model_module: ModelModule, preprocessing: keras.Model, trained: keras.Model) -> keras.Model:
    """Input: the model module, its preprocessing, the trained model. Output: the same model in float32."""
    copy = build_float32(model_module, preprocessing)
    copy.set_weights(trained.get_weights())
    return copy


def raw_signature_spec(inputs: dict, batch_size: int | None = None) -> dict[str, tf.TensorSpec]:
    """Input: a model module's INPUTS (column -> tf.io.FixedLenFeature) and the batch size (None: any).
    Output: the input signature of a raw-feature signature (serving_raw, preprocess; the device model's
    serving_default is built alike, components/model_export/tflite.py): a dict keyed by column name, as
    the preprocessing model takes it, whose TensorSpecs are named by the columns' internal names
    (components/feature_names.py), which the signature's arguments are called (a column's own name may not
    be a valid argument name, and two that differ only in case collide). A column whose name already is
    valid keeps it."""
    names = internal_names(list(inputs))
    return {column: tf.TensorSpec([batch_size], feature.dtype, name=names[column])
            for column, feature in inputs.items()}


def raw_signature_arguments(inputs: dict, features: dict) -> dict:
    """Input: a model module's INPUTS and raw features keyed by column name (any subset of INPUTS). Output:
    the same values keyed by the raw-feature signatures' argument names (the columns' internal names), to be
    passed as `signature(**arguments)`."""
    names = internal_names(list(inputs))
    return {names[column]: value for column, value in features.items()}


def export_serving_model(model_module: ModelModule, preprocessing: keras.Model, model: keras.Model,
                         export_dir: str) -> None:
    """Writes `export_dir` as a SavedModel with the serving_default (serialized tf.Examples), serving_raw (one
    tensor per raw feature), transform_features (the label) and preprocess signatures; serving_default and
    serving_raw return the task's outputs (components/tasks.py: serving_outputs). `model` must already be
    float32 (see float32_copy). serving_default parses tf.Examples keyed by the column names; serving_raw
    and preprocess take one argument per column under its internal name (raw_signature_spec; see
    raw_signature_arguments), and hand the preprocessing a dict keyed by the column names."""
    archive = keras.export.ExportArchive()
    archive.track(preprocessing)
    archive.track(model)
    task, classes = task_of(model_module), tuple(model_module.CLASSES)
    example_spec = [tf.TensorSpec([None], tf.string, name="examples")]
    raw_spec = [raw_signature_spec(model_module.INPUTS)]

    def preprocess(features):
        return preprocessing(features)

    @tf.function(input_signature=raw_spec)  # traced once, called by serve_examples too
    def serve_raw(features):
        output = tf.cast(model(preprocessing(features), training=False), tf.float32)
        return tasks.serving_outputs(task, output, classes)

    def serve_examples(serialized):
        return serve_raw(tf.io.parse_example(serialized, model_module.INPUTS))

    def transform_features(serialized):
        features = tf.io.parse_example(serialized, model_module.LABEL_INPUTS)
        return {model_module.LABEL_KEY: model_module.make_label(features)}

    archive.add_endpoint(contract.SERVING_SIGNATURE, serve_examples, input_signature=example_spec)
    archive.add_endpoint(contract.RAW_SIGNATURE, serve_raw, input_signature=raw_spec)
    archive.add_endpoint(contract.TRANSFORM_SIGNATURE, transform_features, input_signature=example_spec)
    archive.add_endpoint(contract.PREPROCESS_SIGNATURE, preprocess, input_signature=raw_spec)
    archive.write_out(export_dir, verbose=False)
    _export_keras_files(preprocessing, model, model_ready_dir(export_dir))


def _export_keras_files(preprocessing: keras.Model, model: keras.Model, export_dir: str) -> None:
    """Saves the model alone (model-ready inputs) and the fitted preprocessing as Keras files: the TFLite
    export traces preprocessing + model at the input shape devices use (one raw example, the same
    computation as serving_raw), and a later training can warm-start from this model."""
    fileio.makedirs(export_dir)
    model.save(os.path.join(export_dir, contract.MODEL_READY_FILE))
    preprocessing.save(os.path.join(export_dir, contract.PREPROCESSING_FILE))


MODEL_FACTS_FILE = "model_facts.json"  # beside the Keras files: what the evaluator and export need to know


def model_facts(training_report: dict) -> dict:
    """What later steps read about a trained model: its task, label and classes, the numerics it trained with
    and the label counts of each split (the training split's build the trivial predictor)."""
    return {key: training_report[key] for key in ("model", "task", "label", "classes", "precision", "xla", "labels")}


def write_model_facts(serving_model_dir: str, facts: dict) -> None:
    artifact_files.write_json(os.path.join(model_ready_dir(serving_model_dir), MODEL_FACTS_FILE), facts)


def read_model_facts(serving_model_dir: str) -> dict:
    """The model_facts of a trained model ({} for a model exported before they were written)."""
    return artifact_files.read_json_if_exists(os.path.join(model_ready_dir(serving_model_dir), MODEL_FACTS_FILE)) or {}
