"""run_fn for TFX's Trainer: trains `custom_config['model']` on the Examples splits and exports it.

Consumes (through FnArgs): train/eval file patterns, serving_model_dir, model_run_dir, custom_config with
the model module path and training settings. Produces a SavedModel with float32 signatures:
`serving_default` (serialized tf.Example -> probabilities) and `transform_features` (serialized
tf.Example -> label), which TFMA uses to derive the label from raw features.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from components.trainer.device import describe_devices
from components.trainer.input_pipeline import make_dataset

ADAPT_SAMPLE_SIZE = 20_000


def run_fn(fn_args) -> None:
    config = fn_args.custom_config
    model_module = importlib.import_module(config["model"])
    feature_spec = {**model_module.INPUTS, **model_module.LABEL_INPUTS}
    keras.utils.set_random_seed(config["seed"])

    sample = read_sample(fn_args.train_files, model_module.INPUTS, ADAPT_SAMPLE_SIZE)
    model = model_module.build_model(sample)
    model.compile(
        optimizer=keras.optimizers.Adam(config["learning_rate"]),
        loss=keras.losses.BinaryCrossentropy(),
        metrics=[keras.metrics.AUC(name="auc"), keras.metrics.BinaryAccuracy(name="binary_accuracy")])

    def dataset(files, training):
        return make_dataset(files, feature_spec, config["batch_size"], label_fn=model_module.make_label,
                            input_names=list(model_module.INPUTS),
                            shuffle_buffer=config["shuffle_buffer"] if training else 0, seed=config["seed"])

    start = time.monotonic()
    history = model.fit(dataset(fn_args.train_files, True), validation_data=dataset(fn_args.eval_files, False),
                        epochs=config["epochs"], verbose=0,
                        callbacks=[keras.callbacks.TensorBoard(os.path.join(fn_args.model_run_dir, "logs"))])
    seconds = time.monotonic() - start
    final = {name: float(values[-1]) for name, values in history.history.items()}
    logging.info("Trained %s in %.1f s: %s", config["model"], seconds, final)
    export_serving_model(model, model_module, fn_args.serving_model_dir)
    os.makedirs(fn_args.model_run_dir, exist_ok=True)
    with open(os.path.join(fn_args.model_run_dir, "training_report.json"), "w") as handle:
        json.dump({"model": config["model"], "device": dataclasses.asdict(describe_devices()),
                   "train_seconds": seconds, "epochs": config["epochs"],
                   "final_metrics": final, "history": {k: [float(v) for v in vs] for k, vs in history.history.items()}},
                  handle, indent=2)


def read_sample(file_patterns: list[str], inputs: dict, size: int) -> dict[str, np.ndarray]:
    """Input: training files and the model's input spec. Output: up to `size` rows, name -> 1-D array."""
    batches = make_dataset(file_patterns, inputs, batch_size=1024).take(-(-size // 1024))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in inputs}
    for batch in batches.as_numpy_iterator():
        for name, values in batch.items():
            parts[name].append(values)
    return {name: np.concatenate(values)[:size] for name, values in parts.items()}


def export_serving_model(model: keras.Model, model_module, export_dir: str) -> None:
    """Writes a SavedModel whose signatures take serialized tf.Examples and return float32."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    example_spec = [tf.TensorSpec([None], tf.string, name="examples")]

    def serve_examples(serialized):
        features = tf.io.parse_example(serialized, model_module.INPUTS)
        return {"probabilities": tf.cast(model(features, training=False), tf.float32)}

    def transform_features(serialized):
        features = tf.io.parse_example(serialized, model_module.LABEL_INPUTS)
        return {model_module.LABEL_KEY: model_module.make_label(features)}

    archive.add_endpoint("serving_default", serve_examples, input_signature=example_spec)
    archive.add_endpoint("transform_features", transform_features, input_signature=example_spec)
    archive.write_out(export_dir, verbose=False)
