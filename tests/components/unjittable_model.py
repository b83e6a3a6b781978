"""A taxi model with one op XLA cannot compile on CPU (AsString): the trainer must fall back to no XLA."""
import keras
import tensorflow as tf

from models import taxi
from models.taxi import CLASSES, INPUTS, LABEL_INPUTS, LABEL_KEY, TASK, build_preprocessing, make_label  # noqa: F401


class RoundTripThroughText(keras.layers.Layer):
    def call(self, x):  # identity in value and gradient, through ops XLA has no CPU kernel for
        return x + tf.stop_gradient(tf.strings.to_number(tf.strings.as_string(x)) - x)


def build_model(preprocessing):
    model = taxi.build_model(preprocessing)
    inputs = {name: keras.Input(shape=(), name=name, dtype=t.dtype) for name, t in preprocessing.output.items()}
    return keras.Model(inputs, RoundTripThroughText(dtype="float32")(model(inputs)))
