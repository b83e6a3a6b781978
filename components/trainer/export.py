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

from components.core import contract
from components.core.packing import PackedModel, pack, served
from components.core.model_module import ModelModule, raw_signature_spec, task_of
from components.core.records import model_ready_dir
from components.core.savedmodel import write_signatures


def build_model(model_module: ModelModule, preprocessing: keras.Model, folds: int = 1) -> PackedModel:
    """Output: what the Trainer trains under the policy set: the model module's packed model on `preprocessing`,
    its members dealt to `folds` copies (components/core/packing.py)."""
    return pack(model_module, preprocessing, folds)


def build_float32(model_module: ModelModule, preprocessing: keras.Model, folds: int = 1) -> PackedModel:
    """Output: build_model under the float32 policy (whatever policy is set, and set again afterwards)."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy("float32")
    try:
        return build_model(model_module, preprocessing, folds)
    finally:
        keras.config.set_dtype_policy(previous)


def float32_served(model_module: ModelModule, preprocessing: keras.Model, trained: PackedModel,
                   folds: int) -> keras.Model:
    """Input: the model module, its preprocessing, the trained packed model and its folds. Output: the model it
    serves (the members' mean), in float32."""
    copy = build_float32(model_module, preprocessing, folds)
    copy.set_weights(trained.get_weights())
    return served(copy)


def export_serving_model(model_module: ModelModule, preprocessing: keras.Model, model: keras.Model,
                         export_dir: str) -> None:
    """Writes `export_dir` as a SavedModel with the serving_default (serialized tf.Examples), serving_raw (one
    tensor per raw feature), transform_features (the label) and preprocess signatures; serving_default and
    serving_raw return the task's outputs (components/core/tasks.py: serving_outputs). `model` must already be
    float32 (see float32_served). serving_default parses tf.Examples keyed by the column names; serving_raw
    and preprocess take one argument per column under its internal name (raw_signature_spec; see
    raw_signature_arguments), and hand the preprocessing a dict keyed by the column names."""
    task, classes = task_of(model_module), tuple(model_module.CLASSES)
    example_spec = [tf.TensorSpec([None], tf.string, name="examples")]
    raw_spec = [raw_signature_spec(model_module.INPUTS)]

    @tf.function(input_signature=raw_spec)  # traced once, called by serve_raw too (a large graph: seconds)
    def preprocess(features):
        return preprocessing(features)

    @tf.function(input_signature=raw_spec)  # traced once, called by serve_examples too
    def serve_raw(features):
        output = tf.cast(model(preprocess(features), training=False), tf.float32)
        return task.serving_outputs(output, classes)

    @tf.function(input_signature=example_spec)
    def serve_examples(serialized):
        return serve_raw(tf.io.parse_example(serialized, model_module.INPUTS))

    @tf.function(input_signature=example_spec)
    def transform_features(serialized):
        features = tf.io.parse_example(serialized, model_module.LABEL_INPUTS)
        return {model_module.LABEL_KEY: model_module.make_label(features)}

    write_signatures(export_dir, [preprocessing, model], {
        contract.SERVING_SIGNATURE: serve_examples, contract.RAW_SIGNATURE: serve_raw,
        contract.TRANSFORM_SIGNATURE: transform_features, contract.PREPROCESS_SIGNATURE: preprocess})
    _export_keras_files(preprocessing, model, model_ready_dir(export_dir))


def _export_keras_files(preprocessing: keras.Model, model: keras.Model, export_dir: str) -> None:
    """Saves the model alone (model-ready inputs) and the fitted preprocessing as Keras files: the TFLite
    export traces preprocessing + model at the input shape devices use (one raw example, the same
    computation as serving_raw), and a later training can warm-start from this model."""
    fileio.makedirs(export_dir)
    model.save(os.path.join(export_dir, contract.MODEL_READY_FILE))
    preprocessing.save(os.path.join(export_dir, contract.PREPROCESSING_FILE))
