"""Chicago-taxi "big tipper" model: preprocessing layers plus a wide-and-deep Keras model.

`build_preprocessing` turns raw features (one dense tensor per feature, batch-shaped) into scaled numbers
and vocabulary indices; `build_model` maps those to the probability that the tip exceeds 20% of the fare.
The trainer runs the first in the input pipeline and the second on the accelerator, then exports both
as one SavedModel that serves raw tf.Examples with no Transform step.
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
# Categories with a known range get a fixed vocabulary (missing -1 is the out-of-vocabulary bucket).
_INTEGER_CATEGORIES = {
    "trip_start_hour": range(0, 24), "trip_start_day": range(1, 8), "trip_start_month": range(1, 13),
    "pickup_community_area": range(1, 78), "dropoff_community_area": range(1, 78),
}
_HASHED_CATEGORIES = ("pickup_census_tract", "dropoff_census_tract")  # ~800 distinct tract ids
_HASH_BINS = 256
_STRING_CATEGORIES = ("payment_type", "company")
_LOCATION_BINS = 10


def make_label(features: dict[str, tf.Tensor]) -> tf.Tensor:
    """Input: parsed LABEL_INPUTS. Output: float32 1.0 where tips > 20% of the fare, else 0.0."""
    return tf.cast(features["tips"] > 0.2 * features["fare"], tf.float32)


def build_preprocessing(sample: dict[str, np.ndarray]) -> keras.Model:
    """Input: a sample of training features (name -> 1-D array) to fit the preprocessing layers.

    Output: a Keras model, dict of raw feature tensors -> dict of model-ready tensors: scaled float32 for
    numeric features, int64 vocabulary indices for categorical ones. It runs in the input pipeline on the
    host and is joined with the trained model at export.
    """
    inputs = {name: keras.Input(shape=(), name=name, dtype=_keras_dtype(spec.dtype))
              for name, spec in INPUTS.items()}
    outputs = {}
    for name in _NUMERIC:
        norm = keras.layers.Normalization(axis=None, name=f"{name}_norm")
        norm.adapt(np.log1p(np.maximum(sample[name].astype("float32"), 0.0)))
        outputs[name] = norm(ClippedLog1p(name=f"{name}_log")(inputs[name]))
    for name in _LOCATIONS:
        bins = keras.layers.Discretization(num_bins=_LOCATION_BINS, name=f"{name}_bins")
        bins.adapt(sample[name].astype("float32"))
        outputs[name] = bins(inputs[name])
    for name, values in _INTEGER_CATEGORIES.items():
        outputs[name] = keras.layers.IntegerLookup(vocabulary=list(values), name=f"{name}_lookup")(inputs[name])
    for name in _HASHED_CATEGORIES:
        outputs[name] = keras.layers.Hashing(_HASH_BINS, name=f"{name}_hash")(inputs[name])
    for name in _STRING_CATEGORIES:
        lookup = keras.layers.StringLookup(num_oov_indices=1, name=f"{name}_lookup")
        lookup.adapt(sample[name])
        outputs[name] = lookup(inputs[name])
    return keras.Model(inputs, outputs, name="taxi_preprocessing")


def build_model(preprocessing: keras.Model, hidden_units: tuple[int, ...] = (128, 64)) -> keras.Model:
    """Input: the model from build_preprocessing. Output: an uncompiled wide-and-deep Keras model,
    dict of preprocessed tensors -> probability that the tip is big, shape (batch, 1).
    """
    inputs = {name: keras.Input(shape=(), name=name, dtype=tensor.dtype)
              for name, tensor in preprocessing.output.items()}
    vocabulary = {name: _LOCATION_BINS + 1 for name in _LOCATIONS}
    vocabulary.update({name: len(values) + 1 for name, values in _INTEGER_CATEGORIES.items()})
    vocabulary.update({name: _HASH_BINS for name in _HASHED_CATEGORIES})
    vocabulary.update({name: preprocessing.get_layer(f"{name}_lookup").vocabulary_size()
                       for name in _STRING_CATEGORIES})
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


def _embed(index, vocabulary_size: int, width: int, name: str):
    embedding = keras.layers.Embedding(vocabulary_size, width, name=f"{name}_embedding")(index)
    return keras.layers.Reshape((width,))(embedding)


def _keras_dtype(dtype: tf.DType) -> str:
    return {tf.float32: "float32", tf.int64: "int64", tf.string: "string"}[dtype]
