"""k-fold bagging inside one Keras model, so that every training record is trained on and every one also
scores the model out of fold.

The training split's records are dealt into `folds` folds by a keyed hash of each record's bytes
(`fold_of`: the same fold in every pass, run and worker). The model module's model is built once per fold,
each copy with weights of its own over the one fitted preprocessing, and combined by `bag`:

    model-ready tensors -> copy 0, copy 1, ..., copy k-1 (each [N, width]) -> CopiesMean -> [N, width]

Copy g trains on the records outside fold g and never sees fold g's, so its predictions there are out of
fold: a validation score over the whole training split, every interval, rather than over a slice of it
(the Trainer keeps the interval with the best such score). The served model, the SavedModel and the device
model alike, is the copies' mean, trained between them on every record (builtin TFLite ops only: the copies'
own, PACK and MEAN).

A batch's fold ids ride in Keras's sample-weight slot (float, one per example; FoldBag reads them as such).
A copy that is an ensemble trains each of its members on its records (the mean of the members' losses), as
it would alone: layers that record their members (`RECORDS_MEMBERS`, e.g. models/ensemble.py's MembersMean)
call `record_members`, and FoldBag reads them right after the forward pass.
"""
from __future__ import annotations

import re
import threading
from typing import Callable

import keras
import tensorflow as tf

FOLD_KEY = [0xF01D, 0xBA66]  # the keyed hash of the folds: independent of ingestion's split and of the holdout's
FOLD_BUCKETS = 1 << 20
COPY_NAME = "fold_{}"  # copy g of a bag is the layer fold_g

_building = threading.local()  # copies: how many copies `bag` is building, while it builds them
_recorded = threading.local()  # per thread (each replica traces in a thread of its own): id(layer) -> tensor


def record_members(layer: keras.layers.Layer, members) -> None:
    """Keeps `members` ([N, k, width]: the members' predictions of this forward pass) for `layer`."""
    if not hasattr(_recorded, "tensors"):
        _recorded.tensors = {}
    _recorded.tensors[id(layer)] = members


def recorded_members(layer: keras.layers.Layer):
    """The members `layer` recorded in this thread's last forward pass (None: none)."""
    return getattr(_recorded, "tensors", {}).get(id(layer))


def fold_of(records: tf.Tensor, folds: int) -> tf.Tensor:
    """Input: serialized records (any shape) and the number of folds. Output: each record's fold, int32 in
    [0, folds): a keyed hash of its bytes, the same on every pass, worker and run."""
    bucket = tf.strings.to_hash_bucket_strong(records, FOLD_BUCKETS, FOLD_KEY)
    return tf.cast(bucket % folds, tf.int32)


@keras.saving.register_keras_serializable(package="components.core.bagging")
class CopiesMean(keras.layers.Layer):
    """The copies' outputs (k tensors [N, width]) -> their mean [N, width], float32; it records them stacked
    [N, k, width] for FoldBag."""

    def __init__(self, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)

    def call(self, outputs):
        stacked = keras.ops.stack([keras.ops.cast(output, "float32") for output in outputs], axis=1)
        record_members(self, stacked)
        return keras.ops.mean(stacked, axis=1)

    def compute_output_spec(self, outputs):
        return keras.KerasTensor(outputs[0].shape, dtype="float32")


@keras.saving.register_keras_serializable(package="components.core.bagging")
class FoldBag(keras.Model):
    """A functional model built by `bag`: k copies whose mean it serves. Given fold ids (the sample-weight
    slot), training weighs each copy's loss on the records outside its fold only; validation scores each record
    by the copy that never trained on it (the loss and the compiled metrics alike). Without fold ids (e.g.
    the eval split) it is scored as served, on the copies' mean."""

    @property
    def folds(self) -> int:
        """How many copies: the models named fold_0, fold_1, ... (an input named so is not one)."""
        return sum(1 for layer in self.layers
                   if isinstance(layer, keras.Model) and re.fullmatch(COPY_NAME.format(r"\d+"), layer.name))

    def _members_of_copies(self) -> list:
        """Per copy g: its members' predictions [N, m, width] of the last forward pass (a copy with a layer that
        records members), else its output as one member [N, 1, width]."""
        outputs = recorded_members(self._combiner())
        members = []
        for fold in range(self.folds):
            copy = self.get_layer(COPY_NAME.format(fold))
            recorder = next((layer for layer in copy.layers if getattr(layer, "RECORDS_MEMBERS", False)), None)
            own = recorded_members(recorder) if recorder is not None else None
            members.append(keras.ops.cast(own, "float32") if own is not None else outputs[:, fold:fold + 1, :])
        return members

    def _combiner(self) -> CopiesMean:
        return next(layer for layer in self.layers if isinstance(layer, CopiesMean))

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        self._validating = not training  # compute_metrics, called after it in the same step, scores out of fold
        if sample_weight is None or y is None:
            return super().compute_loss(x, y, y_pred, sample_weight, training)
        folds = _fold_ids(sample_weight)
        members, weights = [], []
        for fold, own in enumerate(self._members_of_copies()):
            in_fold = keras.ops.cast(keras.ops.equal(folds, fold), "float32")
            weight = 1.0 - in_fold if training else in_fold  # training: outside the fold; validation: inside it
            members.append(own)
            weights.append(keras.ops.repeat(keras.ops.expand_dims(weight, 1), own.shape[1], axis=1))
        members, weights = keras.ops.concatenate(members, axis=1), keras.ops.concatenate(weights, axis=1)
        count, width = members.shape[1], members.shape[2]
        # weights of mean 1: the loss is the mean over the (member, record) pairs that count
        weights = weights / keras.ops.maximum(keras.ops.mean(weights), 1e-9)
        return super().compute_loss(x, keras.ops.repeat(y, count, axis=0), keras.ops.reshape(members, (-1, width)),
                                    keras.ops.reshape(weights, (-1,)), training)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        # validation: each record scored by the copy that never trained on it; training: as served
        if sample_weight is not None and getattr(self, "_validating", True):
            outputs = recorded_members(self._combiner())  # [N, k, width]
            own = keras.ops.one_hot(_fold_ids(sample_weight), outputs.shape[1], dtype="float32")
            y_pred = keras.ops.sum(outputs * keras.ops.expand_dims(own, -1), axis=1)
        return super().compute_metrics(x, y, y_pred, sample_weight=None)


def copies_being_built() -> int:
    """While `bag` builds its copies, how many it builds (a model module may size one copy by it); else 1."""
    return getattr(_building, "copies", 1)


def _fold_ids(sample_weight) -> tf.Tensor:
    """The fold ids a batch carries in the sample-weight slot, as int32 [N]."""
    return keras.ops.cast(keras.ops.round(keras.ops.reshape(sample_weight, (-1,))), "int32")


def bag(build_copy: Callable[[], keras.Model], folds: int, name: str = "fold_bag") -> keras.Model:
    """Input: a function that builds one copy of the model (model-ready tensors -> [N, width]; called
    `folds` times, each copy with fresh weights) and the number of folds. Output: the FoldBag of the copies,
    or with folds <= 1 the one copy as it is."""
    if folds <= 1:
        return build_copy()
    _building.copies = folds
    try:
        copies = [build_copy() for _ in range(folds)]
    finally:
        _building.copies = 1
    for fold, copy in enumerate(copies):
        copy.name = COPY_NAME.format(fold)
    inputs = keras.tree.map_structure(
        lambda tensor: keras.Input(shape=tensor.shape[1:], name=tensor.name, dtype=tensor.dtype), copies[0].input)
    outputs = CopiesMean(name="copies_mean")([copy(inputs) for copy in copies])
    return FoldBag(inputs, outputs, name=name)
