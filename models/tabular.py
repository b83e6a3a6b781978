"""A model built from the schema and the label alone: what `python -m pipeline init` configures, so that a
user's own table trains with no code.

`configure(schema_path, task)` reads the curated schema and the config's `task` section (type, label,
classes, excluded features) and returns the model module: every schema feature but the label and the
excluded ones is an input, preprocessed by its kind, the kind decided on the training sample:
- numbers (floats, and integers with more than CATEGORICAL_MAX distinct values): a missing-value indicator,
  the value standardized (missing: the mean), and with BINS_MIN_ROWS training rows or more its quantile bin
  (BINS bins) through an embedding;
- strings and integers with few distinct values: a Vocabulary of the values seen (up to MAX_VOCABULARY, the
  rest one out-of-vocabulary index, a missing value its own) through an embedding.
Then two dense layers and a head by task: a sigmoid (binary), a softmax (multiclass), or a linear output
rescaled by the training labels' mean and spread (regression). Every layer is device-safe (models/layers.py),
so the TFLite device model takes the raw features.

Missing values: an absent float is NaN, an absent integer MISSING_INT, an absent string "": what the
SavedModel parses an absent feature as, and what a device caller passes (the export report lists them).
A model module of one's own (models/interface.py) is the way beyond this: models/taxi.py is an example.
"""
from __future__ import annotations

import math

import keras
import numpy as np
import tensorflow as tf

from components.tasks import BINARY, MULTICLASS, REGRESSION, TaskError
from models.layers import Standardize, Vocabulary, embed, keras_dtype

CATEGORICAL_MAX = 50  # an integer with at most this many distinct values in the sample is a category
MAX_VOCABULARY = 1000
BINS = 10
BINS_MIN_ROWS = 1000  # quantile bins need data: a smaller training sample gets none (they would overfit)
HIDDEN_UNITS = (64, 32)
MISSING_INT = -(2 ** 63)  # what an absent integer feature is parsed as (int64 has no NaN)
_MISSING = "__missing"  # suffix of a numeric feature's missing-value indicator
_BINS = "__bins"  # suffix of a numeric feature's quantile bin


def configure(schema_path: str, task) -> "SchemaModel":
    """Input: the curated schema's path and the config's `task` section (components.settings.TaskConfig).
    Output: the model module (models.interface.ModelModule) for that schema and label. TaskError names what
    is missing: the task type, the label, or (classification) the classes."""
    if not task.type:
        raise TaskError("models.tabular needs task.type in the config (binary, multiclass or regression)")
    if not task.label:
        raise TaskError("models.tabular needs task.label in the config: the label column")
    if task.type != REGRESSION and not task.classes:
        raise TaskError(f"models.tabular needs task.classes for a {task.type} task: the class names in label order")
    return SchemaModel(schema_path, task.type, task.label, tuple(task.classes), tuple(task.exclude))


class SchemaModel:
    """The ModelModule of one schema and label (see the module docstring)."""

    def __init__(self, schema_path: str, task: str, label: str, classes: tuple[str, ...], exclude: tuple[str, ...]):
        self.TASK, self.LABEL_KEY = task, label
        self.CLASSES = classes if task != REGRESSION else ()
        self._schema_path, self._exclude = schema_path, set(exclude)
        self._features = None  # name -> schema dtype, read on first use
        self._label_scale = (0.0, 1.0)  # regression: the training labels' mean and spread (from the sample)

    def _schema_features(self) -> dict[str, tf.dtypes.DType]:
        if self._features is None:
            from tensorflow_metadata.proto.v0 import schema_pb2
            import tensorflow_data_validation as tfdv

            schema = tfdv.load_schema_text(self._schema_path)
            types = {schema_pb2.FLOAT: tf.float32, schema_pb2.INT: tf.int64, schema_pb2.BYTES: tf.string}
            self._features = {feature.name: types[feature.type] for feature in schema.feature
                              if feature.type in types}
            if self.LABEL_KEY not in self._features:
                raise TaskError(f"task.label: {self.LABEL_KEY!r} is not a feature of the schema {self._schema_path}")
            unknown = sorted(self._exclude - set(self._features))
            if unknown:
                raise TaskError(f"task.exclude: {', '.join(unknown)} not feature(s) of the schema {self._schema_path}")
        return self._features

    @property
    def INPUTS(self) -> dict[str, tf.io.FixedLenFeature]:  # noqa: N802 - the model contract's name
        return {name: tf.io.FixedLenFeature([], dtype, default_value=_missing_value(dtype))
                for name, dtype in self._schema_features().items()
                if name != self.LABEL_KEY and name not in self._exclude}

    @property
    def LABEL_INPUTS(self) -> dict[str, tf.io.FixedLenFeature]:  # noqa: N802
        dtype = self._schema_features()[self.LABEL_KEY]
        return {self.LABEL_KEY: tf.io.FixedLenFeature([], dtype, default_value=_missing_value(dtype))}

    def make_label(self, features: dict[str, tf.Tensor]) -> tf.Tensor:
        """Classification: the class id of the label's value among CLASSES (-1 for any other value, which
        the Trainer reports), float32 for binary; regression: the value as float32."""
        value = features[self.LABEL_KEY]
        if self.TASK == REGRESSION:
            return tf.cast(value, tf.float32)
        text = value if value.dtype == tf.string else tf.strings.as_string(value)
        matches = tf.equal(tf.expand_dims(text, -1), tf.constant(list(self.CLASSES)))
        class_id = tf.where(tf.reduce_any(matches, axis=-1), tf.argmax(tf.cast(matches, tf.int64), axis=-1),
                            tf.constant(-1, tf.int64))
        return tf.cast(class_id, tf.float32) if self.TASK == BINARY else class_id

    def build_preprocessing(self, sample: dict[str, np.ndarray]) -> keras.Model:
        """Input: training rows (name -> 1-D array) of the inputs and the label. Output: a Keras model, raw
        features -> model-ready tensors (module docstring)."""
        if self.TASK == REGRESSION and self.LABEL_KEY in sample:
            labels = np.asarray(sample[self.LABEL_KEY], np.float64)
            labels = labels[np.isfinite(labels)]
            if labels.size:
                self._label_scale = (float(labels.mean()), float(max(labels.std(), 1e-6)))
        specs = self.INPUTS
        inputs = {name: keras.Input(shape=(), name=name, dtype=keras_dtype(spec.dtype)) for name, spec in specs.items()}
        rows = len(next(iter(sample.values()))) if sample else 0
        outputs = {}
        for name, spec in specs.items():
            values = np.asarray(sample[name])
            if spec.dtype == tf.string or (spec.dtype == tf.int64 and len(np.unique(values)) <= CATEGORICAL_MAX):
                outputs[name] = Vocabulary.adapted(values, MAX_VOCABULARY, name=f"{name}_lookup")(inputs[name])
                continue
            present = values[_present(values)].astype(np.float64)
            filled = FillMissing(float(present.mean()) if present.size else 0.0, name=f"{name}_filled")(inputs[name])
            outputs[name + _MISSING] = MissingIndicator(name=f"{name}_missing")(inputs[name])
            outputs[name] = Standardize.fitted(present, name=f"{name}_norm")(filled)
            if rows >= BINS_MIN_ROWS:
                bins = keras.layers.Discretization(num_bins=BINS, name=f"{name}_bins")
                bins.adapt(present.astype("float32") if present.size else np.zeros(1, "float32"))
                outputs[name + _BINS] = bins(filled)
        return keras.Model(inputs, outputs, name="tabular_preprocessing")

    def build_model(self, preprocessing: keras.Model) -> keras.Model:
        """Input: the model from build_preprocessing. Output: an uncompiled Keras model, model-ready tensors ->
        the task's output (models/interface.py), float32 whatever precision policy the trainer sets."""
        inputs = {name: keras.Input(shape=(), name=name, dtype=tensor.dtype)
                  for name, tensor in preprocessing.output.items()}
        parts = []
        for name, tensor in inputs.items():
            if tensor.dtype == "float32":
                parts.append(keras.layers.Reshape((1,))(tensor))
            else:
                size = BINS + 1 if name.endswith(_BINS) else preprocessing.get_layer(f"{name}_lookup").vocabulary_size()
                parts.append(embed(tensor, size, min(8, 1 + math.ceil(math.log2(size))), name))
        hidden = keras.layers.Concatenate(name="features")(parts) if len(parts) > 1 else parts[0]
        for width in HIDDEN_UNITS:
            hidden = keras.layers.Dense(width, activation="relu")(hidden)
        return keras.Model(inputs, self.head(hidden), name="tabular_model")

    def head(self, hidden):
        """Input: the last hidden tensor. Output: the task's output in float32 (class probabilities, the
        probability of the positive class, or the prediction in the label's units)."""
        if self.TASK == MULTICLASS:
            logits = keras.layers.Dense(len(self.CLASSES), dtype="float32", name="logits")(hidden)
            return keras.layers.Activation("softmax", dtype="float32", name="class_probabilities")(logits)
        if self.TASK == BINARY:
            logit = keras.layers.Dense(1, dtype="float32", name="logit")(hidden)
            return keras.layers.Activation("sigmoid", dtype="float32", name="probability")(logit)
        standardized = keras.layers.Dense(1, dtype="float32", name="standardized_prediction")(hidden)
        return Rescale(*self._label_scale, dtype="float32", name="prediction")(standardized)


def _missing_value(dtype: tf.dtypes.DType):
    return {tf.float32: float("nan"), tf.int64: MISSING_INT, tf.string: ""}[dtype]


def _present(values: np.ndarray) -> np.ndarray:
    """True where a sample value is not the missing value of its dtype."""
    if values.dtype.kind == "f":
        return ~np.isnan(values)
    return values != MISSING_INT


def _missing(x) -> tf.Tensor:
    """True where x is missing. NaN is the one value not equal to itself (NOT_EQUAL is a TFLite builtin; an
    is-NaN op is not)."""
    return tf.not_equal(x, x) if x.dtype.is_floating else tf.equal(x, tf.constant(MISSING_INT, x.dtype))


@keras.saving.register_keras_serializable(package="models.tabular")
class MissingIndicator(keras.layers.Layer):
    """1.0 where the value is missing (NaN, or MISSING_INT for integers), else 0.0, as float32."""

    def call(self, x):
        return tf.cast(_missing(x), tf.float32)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="float32")


@keras.saving.register_keras_serializable(package="models.tabular")
class FillMissing(keras.layers.Layer):
    """The value as float32, `fill` (the training mean) where it is missing."""

    def __init__(self, fill: float, **kwargs):
        super().__init__(**kwargs)
        self.fill = float(fill)

    def call(self, x):
        return tf.where(_missing(x), tf.constant(self.fill, tf.float32), tf.cast(x, tf.float32))

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="float32")

    def get_config(self):
        return {**super().get_config(), "fill": self.fill}


@keras.saving.register_keras_serializable(package="models.tabular")
class Rescale(keras.layers.Layer):
    """x * scale + offset with the two constants as (non-trainable) weights, so that a warm start copies a base
    model's, and training the rest of the network starts from predictions of the labels' size."""

    def __init__(self, offset: float = 0.0, scale: float = 1.0, **kwargs):
        super().__init__(**kwargs)
        self.initial = (float(offset), float(scale))

    def build(self, input_shape):
        self.offset = self.add_weight(shape=(), initializer=keras.initializers.Constant(self.initial[0]),
                                      trainable=False, name="offset")
        self.scale = self.add_weight(shape=(), initializer=keras.initializers.Constant(self.initial[1]),
                                     trainable=False, name="scale")

    def call(self, x):
        return x * self.scale + self.offset

    def get_config(self):
        return {**super().get_config(), "offset": self.initial[0], "scale": self.initial[1]}
