"""A parameter-efficient ensemble for model modules (TabM-mini: Gorishniy et al., "TabM: Advancing Tabular
Deep Learning with Parameter-Efficient Ensembling", ICLR 2025).

k members share every hidden layer and differ in a multiplicative adapter on the input (its signs drawn at
random) and in their output layer. Each example runs through the shared layers once per member, the k
copies stacked along the batch. In training each member is scored on its own, the loss being the mean of the
members' losses (so they stay diverse); the model's output, in training, serving and on the device alike, is
the mean of the members' predictions.

    features [N, D] -> EnsembleInputs(k) [N*k, D] -> shared layers [N*k, H] -> EnsembleOutputs(k, width)
      [N, k, width] -> per-member activation -> MembersMean [N, width] -> EnsembleModel

Builtin TFLite ops only: MUL, RESHAPE, FULLY_CONNECTED, SUM, MEAN.
"""
from __future__ import annotations

import keras
import numpy as np

from components.core.bagging import record_members, recorded_members


@keras.saving.register_keras_serializable(package="models.ensemble")
class EnsembleInputs(keras.layers.Layer):
    """[N, D] -> [N*k, D]: k copies of each row, copy j multiplied by member j's adapter (trainable, its
    entries initialized to random signs, drawn from Keras's seed). Rows i*k ... i*k+k-1 are example i's."""

    def __init__(self, members: int, **kwargs):
        super().__init__(**kwargs)
        self.members = int(members)

    def build(self, input_shape):
        self.adapter = self.add_weight(shape=(self.members, int(input_shape[-1])), name="adapter",
                                       initializer=_random_signs)

    def call(self, x):
        width = x.shape[-1]
        copies = keras.ops.expand_dims(x, 1) * keras.ops.cast(self.adapter, x.dtype)
        return keras.ops.reshape(copies, (-1, width))

    def compute_output_spec(self, x):
        return keras.KerasTensor((None, x.shape[-1]), dtype=x.dtype)

    def get_config(self):
        return {**super().get_config(), "members": self.members}


def _random_signs(shape, dtype=None):
    """+1 or -1 at random (from Keras's seed, keras.utils.set_random_seed)."""
    return keras.ops.cast(keras.ops.where(keras.random.uniform(shape) < 0.5, -1.0, 1.0), dtype or "float32")


@keras.saving.register_keras_serializable(package="models.ensemble")
class EnsembleOutputs(keras.layers.Layer):
    """[N*k, H] -> [N, k, width]: each member's own linear output layer (float32 whatever the policy). Computed
    as one dense layer giving every row all k members' outputs (a FULLY_CONNECTED, which int8 accumulates in
    32 bits), of which a 0/1 mask keeps the row's own member's."""

    def __init__(self, members: int, width: int, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.members, self.width = int(members), int(width)
        self._own = np.eye(self.members, dtype=np.float32)[None, :, :, None]  # [1, k (row's member), k, 1]

    def build(self, input_shape):
        hidden = int(input_shape[-1])
        self.kernel = self.add_weight(shape=(hidden, self.members * self.width), name="kernel",
                                      initializer=keras.initializers.RandomUniform(-hidden ** -0.5, hidden ** -0.5))
        self.bias = self.add_weight(shape=(self.members * self.width,), name="bias", initializer="zeros")

    def call(self, x):
        every = keras.ops.matmul(keras.ops.cast(x, "float32"), self.kernel) + self.bias  # [N*k, k*width]
        every = keras.ops.reshape(every, (-1, self.members, self.members, self.width))
        return keras.ops.sum(every * self._own, axis=2)

    def compute_output_spec(self, x):
        return keras.KerasTensor((None, self.members, self.width), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "members": self.members, "width": self.width}


@keras.saving.register_keras_serializable(package="models.ensemble")
class MembersMean(keras.layers.Layer):
    """[N, k, width] members' predictions -> [N, width], their mean (float32). It records the members'
    predictions of its last call (components.core.bagging.record_members: per thread, as each replica of a
    distribution strategy traces in a thread of its own), where EnsembleModel.compute_loss, which runs right
    after the forward pass, finds them (and a fold bag of such models, components.core.bagging.FoldBag)."""

    RECORDS_MEMBERS = True

    def __init__(self, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, members):
        record_members(self, members)
        return keras.ops.mean(members, axis=1)

    def compute_output_spec(self, members):
        return keras.KerasTensor((members.shape[0], members.shape[-1]), dtype="float32")


@keras.saving.register_keras_serializable(package="models.ensemble")
class EnsembleModel(keras.Model):
    """A functional model whose output is a MembersMean: trained on the mean of its members' losses (the
    compiled loss, each member's prediction against the label), scored and served on the members' mean."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        recorder = next((layer for layer in self.layers if isinstance(layer, MembersMean)), None)
        members = recorded_members(recorder) if recorder is not None else None
        if members is None or y is None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        count, width = members.shape[1], members.shape[2]
        repeated = keras.ops.repeat(y, count, axis=0)
        weights = None if sample_weight is None else keras.ops.repeat(sample_weight, count, axis=0)
        return super().compute_loss(x, repeated, keras.ops.reshape(members, (-1, width)), weights, training)


def members_count(model: keras.Model) -> int:
    """The number of members of an ensemble model's MembersMean (1: no ensemble)."""
    for layer in model.layers:
        if isinstance(layer, EnsembleOutputs):
            return layer.members
    return 1

