"""Layers of a packed network (components/core/packing.py): M members, each a network with weights of its own,
computed together as one network whose weights carry a leading member axis, so that every layer is one
batched product over the members (TabM's packed ensemble: Gorishniy et al., "TabM: Advancing Tabular Deep
Learning with Parameter-Efficient Ensembling", ICLR 2025).

Inside, a tensor is member-major, [M, N, width]: member j's rows are [j]. The first layer reads features every
member shares ([N, D], such as number encodings) with one product, or features each member has its own
version of ([M, N, D], such as its embeddings) with a batched product; the output layer turns the result
batch-major, [N, M, width], the members' predictions that a packed model ends with.

    numbers [N, D] -> PackedDense -> [M, N, H] -> ... -> PackedDense(batch_major) -> [N, M, width]
    category indices C x [N] -> PackedEmbedding -> [M, N, C * w] -> PackedDense -^

Builtin TFLite ops only: GATHER, FULLY_CONNECTED, BATCH_MATMUL, RESHAPE, TRANSPOSE, ADD, MUL (the device model has
one example, and the converter folds the weights' own arithmetic away).
"""
from __future__ import annotations

import math

import keras
import numpy as np


def _random_signs(shape, dtype=None):
    """+1 or -1 at random (from Keras's seed, keras.utils.set_random_seed)."""
    return keras.ops.cast(keras.ops.where(keras.random.uniform(shape) < 0.5, -1.0, 1.0), dtype or "float32")


@keras.saving.register_keras_serializable(package="models.packed")
class PackedDense(keras.layers.Layer):
    """A dense layer per member: [N, D] (features the members share) or [M, N, D] (each member's own) ->
    [M, N, units], or [N, M, units] with `batch_major`. Each member's kernel is initialized as a dense layer's
    alone would be (uniform within +-`kernel_limit`, by default Glorot's sqrt(6 / (D + units))). With
    `input_scale`, each member first scales each input feature by a trainable factor of its own, initialized to
    a random sign (TabM's adapter), applied to the kernel rather than to the inputs (the same function,
    one product).

    With `kernel_groups` G (shared [N, D] features and `input_scale` only; G divides M), the members come in G
    groups of contiguous members, each group sharing one kernel, [G, D, units], and each member keeping its own
    input scales and bias (TabM's BatchEnsemble form within a group): M / G times fewer weights to update at each
    step, for a first layer over thousands of features. The Trainer's fold copies are such groups (a kernel
    shared across copies would learn from the records a copy is scored on out of fold). In the device model the
    scaling is a MUL on the features, not folded into the kernel."""

    def __init__(self, members: int, units: int, activation=None, use_bias: bool = True, input_scale: bool = False,
                 batch_major: bool = False, kernel_limit: float | None = None, kernel_groups: int = 0,
                 **kwargs):
        super().__init__(**kwargs)
        if kernel_groups and not input_scale:
            raise ValueError("PackedDense: kernels shared by groups of members need input_scale (the members' own "
                             "scales)")
        if kernel_groups and members % kernel_groups:
            raise ValueError(f"PackedDense: {members} members do not divide into {kernel_groups} kernel groups")
        self.members, self.units = int(members), int(units)
        self.activation = keras.activations.get(activation)
        self.use_bias, self.input_scale, self.batch_major = bool(use_bias), bool(input_scale), bool(batch_major)
        self.kernel_limit, self.kernel_groups = kernel_limit, int(kernel_groups)

    def build(self, input_shape):
        self.shared = len(input_shape) == 2
        if self.kernel_groups and not self.shared:
            raise ValueError(f"{self.name}: kernels shared by groups read features the members share, [N, D]; got "
                             f"{tuple(input_shape)}")
        features = int(input_shape[-1])
        limit = self.kernel_limit or math.sqrt(6.0 / (features + self.units))
        shape = (self.kernel_groups or self.members, features, self.units)
        self.kernel = self.add_weight(shape=shape, name="kernel",
                                      initializer=keras.initializers.RandomUniform(-limit, limit))
        if self.input_scale:
            self.scale = self.add_weight(shape=(self.members, features), name="scale", initializer=_random_signs)
        if self.use_bias:
            self.bias = self.add_weight(shape=(self.members, 1, self.units), name="bias", initializer="zeros")

    def call(self, x):
        if self.kernel_groups:  # each member's scaled features, one product per group: [G, M/G * N, D] x [G, D, units]
            scaled = keras.ops.expand_dims(x, 0) * keras.ops.cast(keras.ops.expand_dims(self.scale, 1), x.dtype)
            grouped = keras.ops.reshape(scaled, (self.kernel_groups, -1, x.shape[-1]))
            y = keras.ops.matmul(grouped, keras.ops.cast(self.kernel, x.dtype))
            return self._finish(keras.ops.reshape(y, (self.members, -1, self.units)))
        kernel = self.kernel
        if self.input_scale:
            kernel = kernel * keras.ops.expand_dims(self.scale, -1)
        kernel = keras.ops.cast(kernel, x.dtype)
        if self.shared:  # one product for every member: [N, D] x [D, M * units]
            features = kernel.shape[1]
            flat = keras.ops.reshape(keras.ops.transpose(kernel, (1, 0, 2)), (features, self.members * self.units))
            y = keras.ops.reshape(keras.ops.matmul(x, flat), (-1, self.members, self.units))
            y = keras.ops.transpose(y, (1, 0, 2))
        else:  # one batched product: [M, N, D] x [M, D, units]
            y = keras.ops.matmul(x, kernel)
        return self._finish(y)

    def _finish(self, y):
        """[M, N, units] products -> plus the bias, through the activation, batch-major if asked."""
        if self.use_bias:
            y = y + keras.ops.cast(self.bias, y.dtype)
        y = self.activation(y)
        return keras.ops.transpose(y, (1, 0, 2)) if self.batch_major else y

    def compute_output_spec(self, x):
        rows = x.shape[0] if len(x.shape) == 2 else x.shape[1]
        shape = (rows, self.members, self.units) if self.batch_major else (self.members, rows, self.units)
        return keras.KerasTensor(shape, dtype=self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "members": self.members, "units": self.units,
                "activation": keras.activations.serialize(self.activation), "use_bias": self.use_bias,
                "input_scale": self.input_scale, "batch_major": self.batch_major, "kernel_limit": self.kernel_limit,
                "kernel_groups": self.kernel_groups}


@keras.saving.register_keras_serializable(package="models.packed")
class PackedEmbedding(keras.layers.Layer):
    """Embeddings per member of one or more categorical columns of the same width: a list of C int64 index
    tensors [N] (column c's in [0, sizes[c])) -> [M, N, C * width], member j's row of each column's index from
    tables of its own. One lookup for every column and member: the columns' tables stacked into one
    [sum(sizes), M * width] table, each column's indices offset to its rows."""

    def __init__(self, sizes, width: int, members: int, **kwargs):
        super().__init__(**kwargs)
        self.sizes, self.width, self.members = [int(size) for size in sizes], int(width), int(members)
        self._offsets = np.cumsum([0] + self.sizes[:-1]).astype(np.int32)

    def build(self, input_shape):
        self.embeddings = self.add_weight(shape=(sum(self.sizes), self.members * self.width), name="embeddings",
                                          initializer=keras.initializers.RandomUniform(-0.05, 0.05))

    def call(self, indices):
        columns = len(self.sizes)
        stacked = keras.ops.stack([keras.ops.cast(index, "int32") for index in keras.tree.flatten(indices)], axis=1)
        rows = keras.ops.take(keras.ops.cast(self.embeddings, self.compute_dtype), stacked + self._offsets, axis=0)
        rows = keras.ops.reshape(rows, (-1, columns, self.members, self.width))  # [N, C, M, width]
        rows = keras.ops.transpose(rows, (2, 0, 1, 3))  # [M, N, C, width]
        return keras.ops.reshape(rows, (self.members, -1, columns * self.width))

    def compute_output_spec(self, indices):
        first = keras.tree.flatten(indices)[0]
        return keras.KerasTensor((self.members, first.shape[0], len(self.sizes) * self.width), dtype=self.compute_dtype)

    def get_config(self):
        return {**super().get_config(), "sizes": self.sizes, "width": self.width, "members": self.members}


def members_count(model: keras.Model) -> int:
    """The members of a network built from these layers (its PackedDense layers'), 1 for any other."""
    for layer in model._flatten_layers(include_self=False):
        if isinstance(layer, (PackedDense, PackedEmbedding)):
            return layer.members
    return 1
