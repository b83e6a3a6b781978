"""The model the Trainer trains: one packed network for every fold copy and ensemble member.

A packed model maps model-ready tensors to its members' predictions, float32 [N, M, width]: M members in
`copies` groups of M / copies members each, copy g's members contiguous (members g*M/copies ... ). A model
module that builds such a network itself (`build_packed(preprocessing, copies)`, as models/tabular.py does
from the layers of models/packed.py) gets every member's weights in one set of tensors with a leading member
axis, so that each layer is one batched product over the members: one trace, one XLA cluster, one subgraph
in the SavedModel and in the device model. A module that builds one plain network (`build_model` only) is
built once per copy, the copies side by side (`pack`).

With k-fold bagging (train.folds k > 1) there are k copies. The training split's records are dealt into k
folds by a keyed hash of each record's features, its label's left out (`fold_of`: the same fold in every
pass, run and worker), and copy g's members train on the records outside fold g only, so their predictions on
fold g are out of fold: every interval is validated on the whole training split, each record scored by the copy
that never trained on it. A batch's fold ids ride in Keras's sample-weight slot (float, one per example).
Without fold ids (one copy, or the eval split) every member counts: training minimizes the mean of the members'
losses (so that they stay diverse), and metrics score the members' mean, which is what is served (`served`).
"""
from __future__ import annotations

from typing import Iterable

import keras
import tensorflow as tf

from components.core.record_keys import features_bucket

FOLD_KEY = [0xF01D, 0xBA66]  # the keyed hash of the folds: independent of ingestion's split and of the holdout's
FOLD_BUCKETS = 1 << 20
COPY_NAME = "packed.copy_{}"  # a network built once per copy: its name (a '.', so that no column's can be it)


def fold_of(records: tf.Tensor, folds: int, leave_out: Iterable[str] = ()) -> tf.Tensor:
    """Input: serialized records (any shape), the number of folds and the features the hash leaves out (the
    label's sources). Output: each record's fold, int32 in [0, folds): a keyed hash of its other features
    (components.core.record_keys), the same on every pass, worker and run."""
    bucket = features_bucket(records, FOLD_BUCKETS, FOLD_KEY, leave_out)
    return tf.cast(bucket % folds, tf.int32)


@keras.saving.register_keras_serializable(package="components.core.packing")
class MembersOutput(keras.layers.Layer):
    """The packed model's output: the members' predictions [N, M, width], or one prediction [N, width] per
    copy (a list, which it stacks into [N, copies, width]), as float32 [N, M, width]. `copies`: how many
    groups of members the folds are dealt to (1: all members train on every record)."""

    def __init__(self, copies: int = 1, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.copies = int(copies)

    def call(self, members):
        if isinstance(members, (list, tuple)):
            members = keras.ops.stack([keras.ops.cast(member, "float32") for member in members], axis=1)
        return keras.ops.cast(members, "float32")

    def compute_output_spec(self, members):
        if isinstance(members, (list, tuple)):
            return keras.KerasTensor((members[0].shape[0], len(members), *members[0].shape[1:]), dtype="float32")
        return keras.KerasTensor(members.shape, dtype="float32")

    def get_config(self):
        return {**super().get_config(), "copies": self.copies}


@keras.saving.register_keras_serializable(package="components.core.packing")
class MembersMean(keras.layers.Layer):
    """[N, M, width] members' predictions -> [N, width], their mean (float32): what a packed model serves."""

    def __init__(self, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, members):
        return keras.ops.mean(members, axis=1)

    def compute_output_spec(self, members):
        return keras.KerasTensor((members.shape[0], members.shape[-1]), dtype="float32")


@keras.saving.register_keras_serializable(package="components.core.packing")
class PackedModel(keras.Model):
    """A functional model ending in MembersOutput (built by `pack`). Given fold ids (the sample-weight slot),
    training weighs each member's loss on the records outside its copy's fold only, and validation scores
    each record by the members of the copy that never trained on it (the loss and the compiled metrics
    alike); without fold ids every member's loss counts and the metrics score the members' mean."""

    @property
    def copies(self) -> int:
        """How many copies the folds are dealt to (MembersOutput's)."""
        return self._members_output().copies

    @property
    def members(self) -> int:
        """M, the members of all copies."""
        return int(self.output.shape[1])

    def _members_output(self) -> MembersOutput:
        return next(layer for layer in self.layers if isinstance(layer, MembersOutput))

    def _fold_weights(self, sample_weight, in_fold: bool):
        """[N, M] float32: 1 where member j's copy is the record's fold (in_fold) or is not (else)."""
        folds = keras.ops.cast(keras.ops.round(keras.ops.reshape(sample_weight, (-1,))), "int32")
        copy_of_member = keras.ops.arange(self.members, dtype="int32") * self.copies // self.members
        same = keras.ops.cast(keras.ops.equal(keras.ops.expand_dims(folds, 1), copy_of_member), "float32")
        return same if in_fold else 1.0 - same

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        self._validating = not training  # compute_metrics, called after it in the same step, scores out of fold
        if y is None or y_pred is None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        count, width = y_pred.shape[1], y_pred.shape[2]
        if sample_weight is None:
            weights = None
        else:  # training: outside the copy's fold; validation: inside it; of mean 1 over the pairs that count
            weights = self._fold_weights(sample_weight, in_fold=not training)
            weights = keras.ops.reshape(weights / keras.ops.maximum(keras.ops.mean(weights), 1e-9), (-1,))
        return super().compute_loss(x, keras.ops.repeat(y, count, axis=0), keras.ops.reshape(y_pred, (-1, width)),
                                    weights, training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        if sample_weight is not None and getattr(self, "_validating", True):  # out of fold
            own = self._fold_weights(sample_weight, in_fold=True)
            own = own / keras.ops.maximum(keras.ops.sum(own, axis=1, keepdims=True), 1.0)
            prediction = keras.ops.sum(y_pred * keras.ops.expand_dims(own, -1), axis=1)
        else:  # as served
            prediction = keras.ops.mean(y_pred, axis=1)
        return super().compute_metrics(x, y, prediction, sample_weight=None)


def pack(model_module, preprocessing: keras.Model, copies: int) -> PackedModel:
    """Input: a model module (components/core/model_module.py), its fitted preprocessing and the copies (the
    folds; 1 without bagging). Output: the uncompiled PackedModel, model-ready tensors -> [N, M, width]: the
    module's build_packed(preprocessing, copies) when it has one, else its build_model(preprocessing) built
    once per copy (each with weights of its own), side by side."""
    copies = max(1, int(copies))
    if hasattr(model_module, "build_packed"):  # one network: its layers and weights as they are
        network = model_module.build_packed(preprocessing, copies)
        return PackedModel(network.input, MembersOutput(copies, name="members")(network.output), name="packed")
    networks = [model_module.build_model(preprocessing) for _ in range(copies)]
    for copy, network in enumerate(networks):
        network.name = COPY_NAME.format(copy)
    inputs = keras.tree.map_structure(
        lambda tensor: keras.Input(shape=tensor.shape[1:], name=tensor.name, dtype=tensor.dtype), networks[0].input)
    return PackedModel(inputs, MembersOutput(copies, name="members")([network(inputs) for network in networks]),
                       name="packed")


def served(model: PackedModel) -> keras.Model:
    """The model a PackedModel serves, sharing its layers and weights (the same weights in the same order):
    model-ready tensors -> the members' mean [N, width], float32."""
    return keras.Model(model.input, MembersMean(name="members_mean")(model.output), name="served")
