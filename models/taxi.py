"""Chicago-taxi "big tipper" model: preprocessing layers plus a wide-and-deep Keras model.

`build_preprocessing` turns raw features (one dense tensor per feature, batch-shaped) into scaled numbers
and vocabulary indices; `build_model` maps those to the probability that the tip exceeds 20% of the fare.
The trainer runs the first in the input pipeline and the second on the accelerator, then exports both
as one SavedModel that serves raw tf.Examples with no Transform step, and ModelExport converts both
together into the device model (TFLite: raw features in, builtin ops only).

Preprocessing uses device-safe layers only (models/layers.py), so the device model takes raw features.

Missing values: a record may lack any feature. Both the SavedModel and the device model take an absent
feature as its `INPUTS` default (0.0 for the floats, 0 for `trip_seconds`, -1 for the other integers, ""
for the strings): the export report lists what a device caller passes for each.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from components.core.tasks import BinaryTask
from models.layers import ClippedLog1p, Standardize, Vocabulary, embed, keras_dtype

TASK = BinaryTask()
CLASSES = ("not_big_tipper", "big_tipper")  # label 0, label 1

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
    return taxi_preprocessing(sample, INPUTS)


def taxi_preprocessing(sample: dict[str, np.ndarray], inputs_spec: dict) -> keras.Model:
    """build_preprocessing for the taxi features in `inputs_spec` (name -> FixedLenFeature): every location,
    category and string feature, and any subset of the numeric ones (models.taxi_fare leaves out the fare)."""
    inputs = {name: keras.Input(shape=(), name=name, dtype=keras_dtype(spec.dtype))
              for name, spec in inputs_spec.items()}
    outputs = {}
    for name in _present(_NUMERIC, inputs):
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
    inputs = model_inputs(preprocessing)
    # The output stays float32 whatever precision policy the trainer sets.
    probability = keras.layers.Activation("sigmoid", dtype="float32", name="probability")(
        wide_and_deep(inputs, preprocessing, hidden_units))
    return keras.Model(inputs, probability, name="taxi_wide_deep")


def model_inputs(preprocessing: keras.Model) -> dict:
    """The Keras inputs of a model built on `preprocessing`: one per model-ready tensor."""
    return {name: keras.Input(shape=(), name=name, dtype=tensor.dtype) for name, tensor in preprocessing.output.items()}


def wide_and_deep(inputs: dict, preprocessing: keras.Model, hidden_units: tuple[int, ...]):
    """The wide-and-deep network on the preprocessed taxi features among `inputs` (model_inputs), to one
    float32 value per example (a logit, or a regression value), shape (batch, 1)."""
    vocabulary = {name: _LOCATION_BINS + 1 for name in _present(_LOCATIONS, inputs)}
    vocabulary.update({name: preprocessing.get_layer(f"{name}_lookup").vocabulary_size()
                       for name in _present((*_INTEGER_CATEGORIES, *_TRACT_CATEGORIES, *_STRING_CATEGORIES), inputs)})
    deep = [keras.layers.Reshape((1,))(inputs[name]) for name in _present(_NUMERIC, inputs)]
    deep += [embed(inputs[name], size, 4 if name in _LOCATIONS else 8, name) for name, size in vocabulary.items()]
    wide = [embed(inputs[name], vocabulary[name], 1, f"{name}_wide")
            for name in _present(_LOCATIONS + _STRING_CATEGORIES, inputs)]  # a linear term per category value

    hidden = keras.layers.Concatenate(name="deep_features")(deep)
    for width in hidden_units:
        hidden = keras.layers.Dense(width, activation="relu")(hidden)
    # The last layers stay float32 whatever precision policy the trainer sets.
    deep_output = keras.layers.Dense(1, dtype="float32", name="deep_output")(hidden)
    return keras.layers.Add(dtype="float32", name="wide_and_deep")([deep_output, *wide])


def _present(names, inputs) -> list[str]:
    return [name for name in names if name in inputs]
