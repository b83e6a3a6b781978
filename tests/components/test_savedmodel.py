"""A SavedModel of signatures over Keras models (components/core/savedmodel.py): the variables saved with it, and
a model whose layer holds a lookup table saved through Keras's own export, which tracks the table."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from components.core.savedmodel import write_signatures


def _scored(model: keras.Model, spec: tf.TensorSpec):
    @tf.function(input_signature=[spec])
    def score(values):
        return {"score": model(values)}
    return score


@pytest.mark.parametrize("with_table", [False, True], ids=["variables", "lookup table"])
def test_the_saved_signature_computes_what_the_model_does(tmp_path, with_table):
    keras.utils.set_random_seed(0)
    if with_table:
        inputs = keras.Input(shape=(), dtype="string")
        index = keras.layers.StringLookup(vocabulary=["a", "b", "c"])(inputs)
        outputs = keras.layers.Dense(2)(keras.layers.Embedding(5, 3)(index))
        values, spec = tf.constant(["a", "c", "z"]), tf.TensorSpec([None], tf.string, name="values")
    else:
        inputs = keras.Input(shape=(4,))
        outputs = keras.layers.Dense(2)(keras.layers.Dense(8, activation="relu")(inputs))
        values, spec = tf.constant(np.random.default_rng(0).normal(size=(3, 4)), tf.float32), tf.TensorSpec(
            [None, 4], tf.float32, name="values")
    model = keras.Model(inputs, outputs)
    write_signatures(str(tmp_path / "saved"), [model], {"serving_default": _scored(model, spec)})
    loaded = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    np.testing.assert_allclose(loaded(values=values)["score"].numpy(), model(values).numpy(), rtol=1e-6)


def test_each_signature_is_traced_once(tmp_path):
    """Tracing a function is most of a small model's export: the save traces none a second time."""
    traces = []
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="values")])
    def score(values):
        traces.append(values.shape)  # Python runs here only while TensorFlow traces
        return {"score": model(values)}

    write_signatures(str(tmp_path / "saved"), [model], {"serving_default": score})
    assert len(traces) == 1
    assert "serving_default" in tf.saved_model.load(str(tmp_path / "saved")).signatures
