"""Palmer penguins, as TFX's own penguin example has them: three species from four body measurements
(already scaled to [0, 1] in that data), a small dense network with a softmax over the species.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from components.core.tasks import MulticlassTask
from models.layers import Standardize

TASK = MulticlassTask()
CLASSES = ("Adelie", "Chinstrap", "Gentoo")  # species 0, 1, 2
MEASUREMENTS = ("culmen_length_mm", "culmen_depth_mm", "flipper_length_mm", "body_mass_g")
INPUTS = {name: tf.io.FixedLenFeature([], tf.float32, default_value=0.0) for name in MEASUREMENTS}
LABEL_INPUTS = {"species": tf.io.FixedLenFeature([], tf.int64, default_value=-1)}
LABEL_KEY = "species"


def make_label(features: dict[str, tf.Tensor]) -> tf.Tensor:
    """Input: parsed LABEL_INPUTS. Output: the species id (int64, 0..2)."""
    return features["species"]


def build_preprocessing(sample: dict[str, np.ndarray]) -> keras.Model:
    """Input: a sample of training features. Output: raw measurements -> standardized measurements."""
    inputs = {name: keras.Input(shape=(), name=name, dtype="float32") for name in MEASUREMENTS}
    outputs = {name: Standardize.fitted(sample[name], name=f"{name}_norm")(inputs[name]) for name in MEASUREMENTS}
    return keras.Model(inputs, outputs, name="penguin_preprocessing")


def build_model(preprocessing: keras.Model, hidden_units: tuple[int, ...] = (16, 16)) -> keras.Model:
    """Input: the model from build_preprocessing. Output: an uncompiled Keras model, standardized
    measurements -> the probability of each species, shape (batch, 3), float32 whatever precision policy
    the trainer sets."""
    inputs = {name: keras.Input(shape=(), name=name, dtype="float32") for name in preprocessing.output}
    hidden = keras.layers.Concatenate(name="measurements")([keras.layers.Reshape((1,))(inputs[name])
                                                            for name in MEASUREMENTS])
    for width in hidden_units:
        hidden = keras.layers.Dense(width, activation="relu")(hidden)
    logits = keras.layers.Dense(len(CLASSES), dtype="float32", name="logits")(hidden)
    species = keras.layers.Activation("softmax", dtype="float32", name="species")(logits)
    return keras.Model(inputs, species, name="penguin_classifier")
