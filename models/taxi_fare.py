"""Chicago-taxi fare: a regression on the same trips, predicting the fare from everything known before it
is paid (the tip is left out: it is paid with the fare). The taxi model's preprocessing and wide-and-deep
network with a linear output instead of a probability; models/taxi.py says how they are built.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from components.core.tasks import RegressionTask
from models import taxi

TASK = RegressionTask()
CLASSES = ()
INPUTS = {name: spec for name, spec in taxi.INPUTS.items() if name != "fare"}
LABEL_INPUTS = {"fare": tf.io.FixedLenFeature([], tf.float32, default_value=0.0)}
LABEL_KEY = "fare"


def make_label(features: dict[str, tf.Tensor]) -> tf.Tensor:
    """Input: parsed LABEL_INPUTS. Output: the fare in dollars, float32."""
    return tf.cast(features["fare"], tf.float32)


def build_preprocessing(sample: dict[str, np.ndarray]) -> keras.Model:
    """Input: a sample of training features. Output: the taxi preprocessing without the fare."""
    return taxi.taxi_preprocessing(sample, INPUTS)


def build_model(preprocessing: keras.Model, hidden_units: tuple[int, ...] = (128, 64)) -> keras.Model:
    """Input: the model from build_preprocessing. Output: an uncompiled Keras model, preprocessed tensors ->
    the fare, shape (batch, 1), float32 whatever precision policy the trainer sets."""
    inputs = taxi.model_inputs(preprocessing)
    fare = keras.layers.Activation("linear", dtype="float32", name="fare")(
        taxi.wide_and_deep(inputs, preprocessing, hidden_units))
    return keras.Model(inputs, fare, name="taxi_fare_wide_deep")
