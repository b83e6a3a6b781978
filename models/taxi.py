"""Chicago-taxi "big tipper" model: preprocessing layers plus a wide-and-deep Keras model.

`build_preprocessing` turns raw features (one dense tensor per feature, batch-shaped) into scaled numbers
and vocabulary indices; `build_model` maps those to the probability that the tip exceeds 20% of the fare.
The trainer runs the first in the input pipeline and the second on the accelerator, then exports both
as one SavedModel that serves raw tf.Examples with no Transform step, and ModelExport converts both
together into the device model (TFLite: raw features in, builtin ops only).

Device-safe preprocessing: ModelExport converts the preprocessing with TFLite's builtin kernels only (no
Flex), so a model module builds it from layers whose ops have builtin kernels and convert exactly:
- arithmetic and elementwise math (`ClippedLog1p`, `Standardize` here): RELU, ADD, LOG, SUB, MUL, ...;
- `keras.layers.Discretization` (BUCKETIZE);
- `Vocabulary` here, for integer and string categories (EQUAL, SELECT_V2, REDUCE_MAX).
Not device-safe: `keras.layers.Hashing` (string hashing has no builtin kernel, and of a number it first
formats the number as a string), `keras.layers.IntegerLookup` (an int64 -> int64 hash table, which
TFLite's builtin tables do not support; one such table in a graph also stops the converter from
lowering any other table), anything that adds tf.strings ops or mutable tables. `StringLookup`'s static
string table does convert (HASHTABLE_FIND), but `Vocabulary` needs no table initialization inside the
file. The SavedModel and the device model run the same layers, so a layer the device cannot run is
replaced in both, never only on the device.

Missing values: a record may lack any feature. Both the SavedModel and the device model take an absent
feature as its `INPUTS` default (0.0 for the floats, 0 for `trip_seconds`, -1 for the other integers, ""
for the strings): the export report lists what a device caller passes for each.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

# Raw serving inputs: name -> how to parse it from a tf.Example (missing values get the default).
INPUTS = {
    "trip_miles": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "fare": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "trip_seconds": tf.io.FixedLenFeature([], tf.int64, default_value=0),
    "pickup_latitude": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "pickup_longitude": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "dropoff_latitude": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "dropoff_longitude": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "trip_start_hour": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "trip_start_day": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "trip_start_month": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "pickup_community_area": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "dropoff_community_area": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "pickup_census_tract": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "dropoff_census_tract": tf.io.FixedLenFeature([], tf.int64, default_value=-1),
    "payment_type": tf.io.FixedLenFeature([], tf.string, default_value=""),
    "company": tf.io.FixedLenFeature([], tf.string, default_value=""),
}
# Raw features the label is derived from; present in training data, not at serving time.
LABEL_INPUTS = {
    "tips": tf.io.FixedLenFeature([], tf.float32, default_value=0.0),
    "fare": INPUTS["fare"],
}
LABEL_KEY = "big_tipper"

_NUMERIC = ("trip_miles", "fare", "trip_seconds")
_LOCATIONS = ("pickup_latitude", "pickup_longitude", "dropoff_latitude", "dropoff_longitude")
# Categories with a known range get a fixed vocabulary (missing -1 is the out-of-vocabulary index).
_INTEGER_CATEGORIES = {
    "trip_start_hour": range(0, 24), "trip_start_day": range(1, 8), "trip_start_month": range(1, 13),
    "pickup_community_area": range(1, 78), "dropoff_community_area": range(1, 78),
}
# Census tracts (~800 ids in Chicago, 11 digits): a vocabulary of the most frequent ones in the training
# sample, the missing value -1 included when it occurs; other tracts share the out-of-vocabulary index.
_TRACT_CATEGORIES = ("pickup_census_tract", "dropoff_census_tract")
_MAX_TRACTS = 500
_STRING_CATEGORIES = ("payment_type", "company")  # every value seen in the sample ("" for missing included)
_MAX_STRINGS = 1000
_LOCATION_BINS = 10


def make_label(features: dict[str, tf.Tensor]) -> tf.Tensor:
    """Input: parsed LABEL_INPUTS. Output: float32 1.0 where tips > 20% of the fare, else 0.0."""
    return tf.cast(features["tips"] > 0.2 * features["fare"], tf.float32)


def build_preprocessing(sample: dict[str, np.ndarray]) -> keras.Model:
    """Input: a sample of training features (name -> 1-D array) to fit the preprocessing layers.

    Output: a Keras model, dict of raw feature tensors -> dict of model-ready tensors: scaled float32 for
    numeric features, int64 vocabulary indices for categorical ones. It runs in the input pipeline on the
    host, is joined with the trained model at export, and uses device-safe layers only (module docstring).
    """
    inputs = {name: keras.Input(shape=(), name=name, dtype=_keras_dtype(spec.dtype))
              for name, spec in INPUTS.items()}
    outputs = {}
    for name in _NUMERIC:
        logged = ClippedLog1p(name=f"{name}_log")
        outputs[name] = Standardize.fitted(logged(sample[name]).numpy(), name=f"{name}_norm")(logged(inputs[name]))
    for name in _LOCATIONS:
        bins = keras.layers.Discretization(num_bins=_LOCATION_BINS, name=f"{name}_bins")
        bins.adapt(sample[name].astype("float32"))
        outputs[name] = bins(inputs[name])
    for name, values in _INTEGER_CATEGORIES.items():
        outputs[name] = Vocabulary(list(values), name=f"{name}_lookup")(inputs[name])
    for name in _TRACT_CATEGORIES:
        outputs[name] = Vocabulary.adapted(sample[name], _MAX_TRACTS, name=f"{name}_lookup")(inputs[name])
    for name in _STRING_CATEGORIES:
        outputs[name] = Vocabulary.adapted(sample[name], _MAX_STRINGS, name=f"{name}_lookup")(inputs[name])
    return keras.Model(inputs, outputs, name="taxi_preprocessing")


def build_model(preprocessing: keras.Model, hidden_units: tuple[int, ...] = (128, 64)) -> keras.Model:
    """Input: the model from build_preprocessing. Output: an uncompiled wide-and-deep Keras model,
    dict of preprocessed tensors -> probability that the tip is big, shape (batch, 1).
    """
    inputs = {name: keras.Input(shape=(), name=name, dtype=tensor.dtype)
              for name, tensor in preprocessing.output.items()}
    vocabulary = {name: _LOCATION_BINS + 1 for name in _LOCATIONS}
    vocabulary.update({name: preprocessing.get_layer(f"{name}_lookup").vocabulary_size()
                       for name in (*_INTEGER_CATEGORIES, *_TRACT_CATEGORIES, *_STRING_CATEGORIES)})
    deep = [keras.layers.Reshape((1,))(inputs[name]) for name in _NUMERIC]
    deep += [_embed(inputs[name], size, 4 if name in _LOCATIONS else 8, name) for name, size in vocabulary.items()]
    wide = [_embed(inputs[name], vocabulary[name], 1, f"{name}_wide")
            for name in _LOCATIONS + _STRING_CATEGORIES]  # a linear term per category value

    hidden = keras.layers.Concatenate(name="deep_features")(deep)
    for width in hidden_units:
        hidden = keras.layers.Dense(width, activation="relu")(hidden)
    # Logits and the output stay float32 whatever precision policy the trainer sets.
    deep_logit = keras.layers.Dense(1, dtype="float32", name="deep_logit")(hidden)
    logit = keras.layers.Add(dtype="float32", name="logit")([deep_logit, *wide])
    probability = keras.layers.Activation("sigmoid", dtype="float32", name="probability")(logit)
    return keras.Model(inputs, probability, name="taxi_wide_deep")


@keras.saving.register_keras_serializable(package="models.taxi")  # saved with the preprocessing (warm start)
class ClippedLog1p(keras.layers.Layer):
    """log(1 + max(x, 0)) as float32: tames the long tails of fares, distances and durations."""

    def call(self, x):
        return keras.ops.log1p(keras.ops.maximum(keras.ops.cast(x, "float32"), 0.0))


@keras.saving.register_keras_serializable(package="models.taxi")
class Standardize(keras.layers.Layer):
    """(x - mean) * scale in float32: Keras's Normalization with its two constants fixed at construction.

    `fitted` rounds both to float16 precision (a relative change below 0.05%, immaterial to a
    standardization), so every TFLite variant holds them exactly: the float16 variant stores all float
    constants in half precision, and a value already representable there survives unchanged.
    """

    def __init__(self, mean: float, scale: float, **kwargs):
        super().__init__(**kwargs)
        self.mean, self.scale = float(mean), float(scale)

    @classmethod
    def fitted(cls, values: np.ndarray, name: str) -> "Standardize":
        """Input: sample values. Output: the layer that maps them to mean 0 and standard deviation ~1."""
        values = np.asarray(values, np.float64)
        mean, std = (float(values.mean()), float(values.std())) if values.size else (0.0, 1.0)
        return cls(float(np.float16(mean)), float(np.float16(1.0 / max(std, 1e-3))), name=name)

    def call(self, x):
        return (keras.ops.cast(x, "float32") - np.float32(self.mean)) * np.float32(self.scale)

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "scale": self.scale}


@keras.saving.register_keras_serializable(package="models.taxi")
class Vocabulary(keras.layers.Layer):
    """int64 or string value -> int64 index: 1 + its position in `vocabulary`, 0 for any other value.

    The answers of Keras's IntegerLookup / StringLookup with one out-of-vocabulary index, computed by
    comparing the value with every vocabulary entry: EQUAL, SELECT_V2 and REDUCE_MAX, builtin TFLite ops
    that run exactly in every variant, 11-digit census tracts included (IntegerLookup's int64 -> int64 hash
    table has no TFLite kernel), with no table to initialize inside the file. Meant for vocabularies of
    up to a few thousand values: each example is compared with all of them.
    """

    def __init__(self, vocabulary, **kwargs):
        super().__init__(**kwargs)
        vocabulary = list(vocabulary)
        self.is_string = bool(vocabulary) and isinstance(vocabulary[0], str)
        self.vocabulary = [str(v) for v in vocabulary] if self.is_string else [int(v) for v in vocabulary]
        if not self.vocabulary or len(set(self.vocabulary)) != len(self.vocabulary):
            raise ValueError(f"{self.name}: the vocabulary must be non-empty and without repeats")

    @classmethod
    def adapted(cls, values: np.ndarray, max_size: int, name: str) -> "Vocabulary":
        """Input: sample values (int64, or bytes for strings). Output: the layer whose vocabulary is the
        `max_size` most frequent of them, most frequent first (ties: smaller value first)."""
        values = np.asarray(values)
        if values.dtype.kind in "OSU":  # strings: kept as text (a value that is not UTF-8 stays out of vocabulary)
            values = np.array([_text(v) for v in values if _text(v) is not None], dtype=object)
        return cls(most_frequent(values, max_size), name=name)

    def call(self, x):
        """Input: values of shape [batch]. Output: their int64 indices, shape [batch]."""
        if x.shape.rank != 1:
            raise ValueError(f"{self.name}: expects values of shape [batch], got {x.shape}")
        if self.is_string:
            vocabulary, x = tf.constant(self.vocabulary, tf.string), tf.convert_to_tensor(x, tf.string)
        else:
            vocabulary, x = tf.constant(self.vocabulary, tf.int64), tf.cast(x, tf.int64)
        # [vocabulary, 1] against [batch] broadcasts to [vocabulary, batch] without reshaping the input: in
        # TFLite a string tensor that an op produces is dynamically sized, and one such tensor keeps the
        # XNNPACK delegate off the whole graph (measured: the wide model's float32 file ran 2x slower).
        matches = tf.equal(tf.expand_dims(vocabulary, -1), x)
        positions = tf.range(1, len(self.vocabulary) + 1, dtype=tf.int64)[:, tf.newaxis]
        return tf.reduce_max(tf.where(matches, positions, tf.constant(0, tf.int64)), axis=0)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="int64")

    def vocabulary_size(self) -> int:
        return len(self.vocabulary) + 1

    def get_config(self):
        return {**super().get_config(), "vocabulary": self.vocabulary}


def most_frequent(values: np.ndarray, count: int) -> list:
    """Input: values (integers or strings) and a count. Output: the `count` most frequent distinct values,
    most frequent first (ties: smaller value first)."""
    distinct, counts = np.unique(np.asarray(values), return_counts=True)
    order = sorted(range(len(distinct)), key=lambda i: (-counts[i], distinct[i]))[:count]
    return [distinct[i].item() if hasattr(distinct[i], "item") else distinct[i] for i in order]


def _text(value) -> str | None:
    try:
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError:
        return None


def _embed(index, vocabulary_size: int, width: int, name: str):
    embedding = keras.layers.Embedding(vocabulary_size, width, name=f"{name}_embedding")(index)
    return keras.layers.Reshape((width,))(embedding)


def _keras_dtype(dtype: tf.DType) -> str:
    return {tf.float32: "float32", tf.int64: "int64", tf.string: "string"}[dtype]
