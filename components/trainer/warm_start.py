"""Warm start: continue from a previously blessed model instead of from random weights.

The base model's fitted preprocessing (vocabularies, normalization, bins) is reused as it is, so its
weights keep meaning what they meant, and its float32 weights are copied into the freshly built model.
A base that cannot be read, that reads other columns than the config's model (a column excluded or added
since), or whose weights do not fit the model the current code builds (the model code changed), is reported
and skipped: training then starts from scratch on preprocessing fitted to the data.
"""
from __future__ import annotations

import dataclasses
import os

import keras
import numpy as np
from absl import logging

from components.core import contract
from components.core.model_module import ModelModule
from components.core.packing import MembersOutput
from components.core.records import model_ready_dir
from components.core.task_layers import load_keras_model
from components.trainer.export import build_float32


@dataclasses.dataclass
class WarmStart:
    base_model: str  # serving directory of the base model; "" when there is none
    preprocessing: keras.Model | None = None  # the base's fitted preprocessing; None: fit it to the data
    weights: list[np.ndarray] | None = None  # the base's float32 weights; None: random initialization
    reason: str = ""  # why the warm start was skipped ("" when it applies)

    def to_json(self) -> dict:
        return {"base_model": self.base_model, "applied": self.weights is not None, "reason": self.reason}


def load_warm_start(model_module: ModelModule, base_serving_dir: str | None, enabled: bool,
                    folds: int = 0) -> WarmStart:
    """Input: the model module, the base model's serving directory (TFX's fn_args.base_model; None when no
    model is blessed yet), the config switch and the folds the model is bagged over (train.folds). Output:
    what to start from, or why not (a base of another number of folds does not fit)."""
    if not enabled:
        return WarmStart(base_serving_dir or "", reason="warm start is off in the config")
    if not base_serving_dir:
        return WarmStart("", reason="no blessed model yet")
    folder = model_ready_dir(base_serving_dir)
    try:
        preprocessing = load_keras_model(os.path.join(folder, contract.PREPROCESSING_FILE))
        base = load_keras_model(os.path.join(folder, contract.MODEL_READY_FILE))
    except (OSError, ValueError, TypeError) as error:
        return _skipped(base_serving_dir, f"the base model in {folder} cannot be loaded ({error})")
    copies = next((layer.copies for layer in base.layers if isinstance(layer, MembersOutput)), None)
    if copies is not None and copies != max(1, folds):  # its members saw other folds' records: no out-of-fold score
        return _skipped(base_serving_dir, f"the base model's members were dealt to {copies} fold(s), this "
                        f"training's to {max(1, folds)} (train.folds)")
    weights = base.get_weights()
    reads, needs = _input_names(preprocessing), set(model_module.INPUTS)
    if reads != needs:  # the config's columns changed since (task.exclude, a column left out or added)
        return _skipped(base_serving_dir, "the base model reads other columns than this model: "
                        + "; ".join(f"{what} {', '.join(sorted(names))}" for what, names in
                                    (("no longer read:", reads - needs), ("new:", needs - reads)) if names))
    try:  # a base from older model code (other preprocessing layers) does not fit what this code builds
        expected = [weight.shape for weight in build_float32(model_module, preprocessing, folds).get_weights()]
    except (ValueError, KeyError, TypeError) as error:
        return _skipped(base_serving_dir, f"the base model does not fit the model this code builds ({error})")
    if expected != [weight.shape for weight in weights]:
        return _skipped(base_serving_dir, "the base model's weights do not fit the model this code builds")
    return WarmStart(base_serving_dir, preprocessing, weights)


def apply_warm_start(model: keras.Model, warm: WarmStart) -> None:
    """Copies the base weights into `model` (built from `warm.preprocessing`; any precision policy)."""
    if warm.weights is not None:
        model.set_weights(warm.weights)
        logging.info("Warm start from %s", warm.base_model)


def _input_names(preprocessing: keras.Model) -> set[str]:
    """The raw features a fitted preprocessing model reads (the keys of its input dict)."""
    inputs = preprocessing.input
    return set(inputs) if isinstance(inputs, dict) else {tensor.name for tensor in keras.tree.flatten(inputs)}


def _skipped(base_model: str, reason: str) -> WarmStart:
    logging.warning("Warm start skipped, training from scratch: %s", reason)
    return WarmStart(base_model, reason=reason + "; trained from scratch")
