"""A task of one's own, as a user writes it in a file beside their config: the 0.9 quantile of a value,
trained and scored by the pinball loss. It subclasses Task itself and defines every part of a task; the
config names it `task.type: quantile_task:QuantileTask`."""
import keras
import numpy as np
import tensorflow as tf

from components.core import tasks
from components.core.task_layers import LabelOutput, label_range

QUANTILE = 0.9
PINBALL = tasks.Metric("pinball_loss", f"pinball loss ({QUANTILE:g})", higher_is_better=False)


def pinball(labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """Per-example pinball loss of the QUANTILE: q (y - p) above the prediction, (1 - q) (p - y) below it."""
    error = np.asarray(labels, np.float64).reshape(-1) - np.asarray(predictions, np.float64).reshape(-1)
    return np.maximum(QUANTILE * error, (QUANTILE - 1) * error)


def keras_pinball(y_true, y_pred):
    """pinball in Keras ops, per example: what training minimizes and the validation metric averages."""
    error = keras.ops.reshape(keras.ops.cast(y_true, "float32"), (-1,)) - keras.ops.reshape(
        keras.ops.cast(y_pred, "float32"), (-1,))
    return keras.ops.maximum(QUANTILE * error, (QUANTILE - 1) * error)


class PinballLoss(keras.losses.Loss):
    """The mean pinball loss of the QUANTILE (Keras)."""

    def call(self, y_true, y_pred):
        return keras_pinball(y_true, y_pred)


class QuantileTask(tasks.Task):
    """The QUANTILE of a number given the features: a value [N, 1]; gated on the pinball loss, relative
    tolerances; the trivial predictor is the eval labels' own QUANTILE, the best constant under that loss."""
    primary = PINBALL
    metrics = (PINBALL, tasks.MAE)
    relative_tolerance = True
    prediction_key = tasks.PREDICTIONS
    validation_metric = "pinball"
    head_name = "quantile"
    float_device_output = True

    # labels
    def class_problem(self, classes):
        return f"a quantile task has no CLASSES, got {classes!r}" if classes else ""

    def label_problem(self, kind, distinct, whole):
        return "holds strings; a quantile is a number's" if kind == "string" else ""

    def invalid_labels(self, labels, classes):
        return ~np.isfinite(np.asarray(labels, np.float64).reshape(-1))

    def check_labels(self, labels, classes, where):
        bad = self.invalid_labels(labels, classes)
        if bad.any():
            raise tasks.TaskError(f"{where}: {int(bad.sum())} label(s) are NaN or infinite")

    def parse_label(self, value, classes):
        return tf.cast(value, tf.float32)

    def label_profile(self, labels):
        ranks = np.argsort(np.argsort(np.asarray(labels, np.float64), kind="stable"), kind="stable")
        return (ranks + 1.0)[:, None] / (len(labels) + 1)

    # head and loss
    def output_layer(self, training_labels, name):
        return LabelOutput(*label_range(training_labels, "none"), dtype="float32", name=name)

    def loss(self):
        return PinballLoss()

    def keras_metrics(self):
        return [keras.metrics.MeanMetricWrapper(keras_pinball, name="pinball"),
                keras.metrics.MeanAbsoluteError(name="mae")]

    def head_description(self):
        return f"; pinball loss of the {QUANTILE:g} quantile"

    # serving and the device model
    def serving_outputs(self, output, classes):
        return {tasks.PREDICTIONS: output}

    def output_description(self, classes):
        return f"{tasks.PREDICTIONS}: float32 [1, 1], the {QUANTILE:g} quantile"

    def output_difference_scale(self, reference):
        reference = np.asarray(reference, np.float64)
        return max(float(np.abs(reference - reference.mean()).mean()), 1e-12)

    # evaluation: TFMA computes what it has; the pinball loss is scored from the per-example predictions
    def tfma_metrics(self, num_classes):
        return [(("ExampleCount", "MeanAbsoluteError", "MeanLabel", "MeanPrediction"), ())]

    def score(self, labels, predictions):
        return {PINBALL.name: float(pinball(labels, predictions).mean()),
                tasks.MAE.name: float(self.per_example(tasks.MAE, labels, predictions).mean())}

    def per_example(self, metric, labels, predictions):
        if metric is PINBALL:
            return pinball(labels, predictions)
        if metric is tasks.MAE:
            return np.abs(np.asarray(labels, np.float64).reshape(-1) - np.asarray(predictions, np.float64).reshape(-1))
        return super().per_example(metric, labels, predictions)

    def trivial_predictions(self, labels, classes):
        labels = np.asarray(labels, np.float64).reshape(-1)
        return np.full(len(labels), np.quantile(labels, QUANTILE) if len(labels) else 0.0)

    def trivial_description(self, labels, classes):
        value = float(np.quantile(labels, QUANTILE)) if len(labels) else 0.0
        return f"always {value:.6g}, the eval split's {QUANTILE:g} quantile (the best constant under the pinball loss)"
