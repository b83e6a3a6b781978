"""TFLite conversion, interpreter scoring and latency for the model-ready Keras model (TensorFlow here).

Devices run one example at a time, so the model is converted at batch size 1: every shape is static, the
converter folds the shape arithmetic away, and XNNPACK takes the whole graph.
"""
from __future__ import annotations

import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from components.model_export.variants import TFLITE_VARIANTS
from components.native_stderr import native_stderr_to_log

AUC_THRESHOLDS = 10_000  # as many as TFMA's AUC uses


def write_single_example_savedmodel(model: keras.Model, export_dir: str) -> str:
    """Input: the float32 model-ready Keras model. Output: `export_dir`, a SavedModel whose serving_default
    takes one example (shape [1] per input) and returns {"probabilities": [1, 1]}."""
    archive = keras.export.ExportArchive()
    archive.track(model)
    spec = {name: tf.TensorSpec([1], tensor.dtype, name=name) for name, tensor in model.input.items()}
    archive.add_endpoint("serving_default", lambda features: {"probabilities": model(features, training=False)},
                         input_signature=[spec])
    archive.write_out(export_dir, verbose=False)
    return export_dir


def convert(saved_model_dir: str, variant: str, representative: dict[str, np.ndarray] | None = None) -> bytes:
    """Input: a single-example SavedModel, a variant name, and (full_int8 only) model-ready calibration
    features, name -> array of N rows. Output: the .tflite flatbuffer bytes."""
    if variant not in TFLITE_VARIANTS:
        raise ValueError(f"unknown TFLite variant {variant!r} (known: {', '.join(TFLITE_VARIANTS)})")
    converter = tf.lite.TFLiteConverter.from_saved_model(saved_model_dir)
    if variant != "float32":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    if variant == "float16":
        converter.target_spec.supported_types = [tf.float16]
    elif variant == "full_int8":
        if not representative:
            raise ValueError("full_int8 needs a representative dataset")
        rows = len(next(iter(representative.values())))
        converter.representative_dataset = lambda: (
            {name: values[i:i + 1] for name, values in representative.items()} for i in range(rows))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
    with native_stderr_to_log(f"TFLite converter ({variant})"):
        return converter.convert()


def constant_bytes(flatbuffer: bytes) -> int:
    """Bytes in the model's constant buffers (weights, biases, embedding tables): what quantization shrinks.
    The rest of a .tflite file is graph structure (tensors, names, operators, signatures)."""
    from tensorflow.lite.tools import flatbuffer_utils
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(flatbuffer))
    return sum(len(buffer.data) for buffer in model.buffers if buffer.data is not None)


class SingleExampleInterpreter:
    """The TFLite interpreter over one converted model, fed one example at a time as a device would."""

    def __init__(self, flatbuffer: bytes):
        with native_stderr_to_log("TFLite interpreter"):
            self._interpreter = tf.lite.Interpreter(model_content=flatbuffer, num_threads=1)
            self._interpreter.allocate_tensors()
        runner = self._interpreter.get_signature_runner()
        self._inputs = {name: detail["index"] for name, detail in runner.get_input_details().items()}
        self._output = runner.get_output_details()["probabilities"]["index"]
        del runner  # it must not outlive allocate/invoke checks on the interpreter

    def _set_example(self, features: dict[str, np.ndarray], row: int) -> None:
        for name, index in self._inputs.items():
            self._interpreter.set_tensor(index, features[name][row:row + 1])

    def predict(self, features: dict[str, np.ndarray]) -> np.ndarray:
        """Input: model-ready features, name -> array of N rows. Output: N float32 probabilities."""
        rows = len(next(iter(features.values())))
        out = np.empty(rows, np.float32)
        for row in range(rows):
            self._set_example(features, row)
            self._interpreter.invoke()
            out[row] = self._interpreter.get_tensor(self._output).reshape(-1)[0]
        return out

    def median_latency_seconds(self, features: dict[str, np.ndarray], examples: int) -> float:
        """Median wall time of one invoke() over the first `examples` rows (inputs set outside the timing)."""
        rows = min(examples, len(next(iter(features.values()))))
        timings = []
        for row in range(rows):
            self._set_example(features, row)
            start = time.perf_counter()
            self._interpreter.invoke()
            timings.append(time.perf_counter() - start)
        return statistics.median(timings)


def score(labels: np.ndarray, probabilities: np.ndarray) -> dict[str, float]:
    """Input: 0/1 labels and probabilities. Output: {"auc", "binary_accuracy"} from Keras metrics."""
    auc = keras.metrics.AUC(num_thresholds=AUC_THRESHOLDS)
    accuracy = keras.metrics.BinaryAccuracy()
    auc.update_state(labels, probabilities)
    accuracy.update_state(labels, probabilities)
    return {"auc": float(auc.result()), "binary_accuracy": float(accuracy.result())}

