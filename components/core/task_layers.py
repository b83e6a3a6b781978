"""The Keras pieces a regression Task builds the schema-driven model's head and loss from
(components/core/tasks.py: RegressionTask.output_layer, training_loss), and the loader of saved Keras files
that may hold them.

LabelOutput and TransformedAbsoluteError keep the Keras registration they were saved under
("models.tabular>..."), so models saved before they moved here still load. Builtin TFLite ops only.
"""
from __future__ import annotations

import keras
import numpy as np

OPEN = 3e38  # no clamp

def load_keras_model(path: str) -> keras.Model:
    """A .keras file (a model or its preprocessing), with the layers of this module and of packed models
    (components/core/packing.py) known to Keras."""
    from components.core import packing  # noqa: F401 - registers the packed model's classes with Keras
    return keras.saving.load_model(path)


def label_range(labels, transform: str) -> tuple[float, float, float, float]:
    """Input: training labels and the label transform. Output: the transformed finite labels' mean, spread,
    least and greatest (LabelOutput's constants)."""
    values = np.asarray(labels, np.float64)
    values = values[np.isfinite(values)]
    if transform == "log":
        values = np.log1p(np.maximum(values, 0.0))
    if not values.size:
        return (0.0, 1.0, -OPEN, OPEN)
    return (float(values.mean()), float(max(values.std(), 1e-6)), float(values.min()), float(values.max()))


@keras.saving.register_keras_serializable(package="models.tabular")
class LabelOutput(keras.layers.Layer):
    """A regression output in the label's units: v = x * scale + offset clamped to [least, greatest], then
    exp(v) - 1 with `log` (the label transform's inverse), else v. The four constants are (non-trainable)
    weights, so that a warm start copies a base model's; training the rest of the network starts from
    predictions of the labels' size. Builtins only (MUL, ADD, MINIMUM, MAXIMUM, EXP, SUB)."""

    OPEN = OPEN

    def __init__(self, offset: float = 0.0, scale: float = 1.0, least: float = -OPEN, greatest: float = OPEN,
                 log: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.initial = (float(offset), float(scale), float(least), float(greatest))
        self.log = bool(log)

    def build(self, input_shape):
        for name, value in zip(("offset", "scale", "least", "greatest"), self.initial):
            setattr(self, name, self.add_weight(shape=(), initializer=keras.initializers.Constant(value),
                                                trainable=False, name=name))

    def call(self, x):
        value = keras.ops.minimum(keras.ops.maximum(x * self.scale + self.offset, self.least), self.greatest)
        return keras.ops.exp(value) - 1.0 if self.log else value

    def get_config(self):
        offset, scale, least, greatest = self.initial
        return {**super().get_config(), "offset": offset, "scale": scale, "least": least, "greatest": greatest,
                "log": self.log}


@keras.saving.register_keras_serializable(package="models.tabular")
class TransformedAbsoluteError(keras.losses.Loss):
    """Mean |T(label) - T(prediction)|, T(v) = log(1 + max(v, 0)) with `log`, else v: the absolute error
    after the label transform. Its best constant is the labels' median (T keeps the order), which is what the
    MAE rewards."""

    def __init__(self, log: bool = False, name: str = "transformed_absolute_error", **kwargs):
        super().__init__(name=name, **kwargs)
        self.log = bool(log)

    def call(self, y_true, y_pred):
        y_true = keras.ops.reshape(keras.ops.cast(y_true, "float32"), (-1,))
        y_pred = keras.ops.reshape(keras.ops.cast(y_pred, "float32"), (-1,))
        if self.log:
            y_true, y_pred = (keras.ops.log1p(keras.ops.maximum(v, 0.0)) for v in (y_true, y_pred))
        return keras.ops.abs(y_true - y_pred)

    def get_config(self):
        return {**super().get_config(), "log": self.log}
