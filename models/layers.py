"""Device-safe Keras layers for model modules' preprocessing, and small helpers to build models with them.

ModelExport converts a model's preprocessing with TFLite's builtin kernels only (no Flex), so preprocessing
is built from layers whose ops have builtin kernels and convert exactly:
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
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf


@keras.saving.register_keras_serializable(package="models.layers")  # saved with the preprocessing (warm start)
class ClippedLog1p(keras.layers.Layer):
    """log(1 + max(x, 0)) as float32: tames the long tails of fares, distances and durations."""

    def call(self, x):
        return keras.ops.log1p(keras.ops.maximum(keras.ops.cast(x, "float32"), 0.0))


@keras.saving.register_keras_serializable(package="models.layers")
class Standardize(keras.layers.Layer):
    """(x - mean) * scale in float32: Keras's Normalization with its two constants fixed at construction.

    `fitted` rounds both to float16 precision where that moves the standardized values by at most 0.01 of
    a standard deviation, so every TFLite variant holds them exactly: the float16 variant stores all float
    constants in half precision, and a value already representable there survives unchanged. Where
    rounding would move them more (a mean of 41.89 with a spread of 0.04, say) or overflow float16 (a
    timestamp), both stay float32, and a float16 variant that cannot hold them is rejected by its output
    check at export.
    """

    def __init__(self, mean: float, scale: float, **kwargs):
        super().__init__(**kwargs)
        self.mean, self.scale = float(mean), float(scale)

    @classmethod
    def fitted(cls, values: np.ndarray, name: str) -> "Standardize":
        """Input: sample values. Output: the layer that maps them to mean 0 and standard deviation ~1."""
        values = np.asarray(values, np.float64)
        mean, std = (float(values.mean()), float(values.std())) if values.size else (0.0, 1.0)
        scale = 1.0 / max(std, 1e-3)
        with np.errstate(over="ignore"):
            mean16, scale16 = float(np.float16(mean)), float(np.float16(scale))
        if (np.isfinite(mean16) and np.isfinite(scale16) and abs(mean16 - mean) * scale <= 0.01
                and abs(scale16 / scale - 1) <= 1e-3):
            mean, scale = mean16, scale16
        return cls(mean, scale, name=name)

    def call(self, x):
        return (keras.ops.cast(x, "float32") - np.float32(self.mean)) * np.float32(self.scale)

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "scale": self.scale}


@keras.saving.register_keras_serializable(package="models.layers")
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
        # XNNPACK delegate off the whole graph.
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


def embed(index, vocabulary_size: int, width: int, name: str):
    """An embedding of `width` per index, flattened to (batch, width)."""
    embedding = keras.layers.Embedding(vocabulary_size, width, name=f"{name}_embedding")(index)
    return keras.layers.Reshape((width,))(embedding)


def keras_dtype(dtype: tf.DType) -> str:
    """The Keras dtype name of a tf.io feature's dtype."""
    return {tf.float32: "float32", tf.int64: "int64", tf.string: "string"}[dtype]
