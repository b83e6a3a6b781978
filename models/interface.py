"""What a model module provides (the module `train.model` names, e.g. models.taxi), declared once, and the
one loader every user of a model module goes through.

A new model is one file in models/ that defines the six names of `ModelModule`; `load_model_module`
imports it and names whatever is missing or not callable (config load turns that into an error on
`train.model`, before any step runs).
"""
from __future__ import annotations

import importlib
import typing

if typing.TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf


class ModelModule(typing.Protocol):
    """The interface of a model module."""

    INPUTS: dict[str, tf.io.FixedLenFeature]  # raw serving inputs: name -> how to parse it from a tf.Example
    LABEL_INPUTS: dict[str, tf.io.FixedLenFeature]  # raw features the label is derived from (training data only)
    LABEL_KEY: str  # the label's name in transform_features' output

    @staticmethod
    def make_label(features: dict[str, tf.Tensor]) -> tf.Tensor:
        """Parsed LABEL_INPUTS -> float32 label, one per example."""

    @staticmethod
    def build_preprocessing(sample: dict[str, np.ndarray]) -> keras.Model:
        """A sample of training features (name -> 1-D array) -> a fitted Keras model, raw features ->
        model-ready tensors, built from device-safe layers."""

    @staticmethod
    def build_model(preprocessing: keras.Model) -> keras.Model:
        """The preprocessing model -> an uncompiled Keras model, model-ready tensors -> probability."""


CONSTANTS = ("INPUTS", "LABEL_INPUTS", "LABEL_KEY")
FUNCTIONS = ("make_label", "build_preprocessing", "build_model")


class ModelModuleError(ValueError):
    """A model module that does not import, or lacks part of ModelModule; the message names the module.
    `not_found`: no module of that name was found (a wrong path rather than a broken module)."""

    def __init__(self, message: str, not_found: bool = False):
        super().__init__(message)
        self.not_found = not_found


def _names_the_module(missing: str, name: str) -> bool:
    """True when the missing module is `name` itself or one of its parent packages (models in models.taxi)."""
    return name == missing or name.startswith(missing + ".")


def load_model_module(name: str) -> ModelModule:
    """Input: a module path (models.taxi). Output: the imported module, checked against ModelModule.
    Raises ModelModuleError naming the module and what it lacks."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if not _names_the_module(error.name or "", name):  # the module was found; one of its own imports was not
            raise ModelModuleError(f"importing {name!r} failed: {type(error).__name__}: {error}") from None
        raise ModelModuleError(f"cannot import {name!r}: {error}", not_found=True) from None
    except Exception as error:  # noqa: BLE001 - whatever the module raised while importing
        raise ModelModuleError(f"importing {name!r} failed: {type(error).__name__}: {error}") from None
    missing = [attribute for attribute in CONSTANTS + FUNCTIONS if not hasattr(module, attribute)]
    not_callable = [attribute for attribute in FUNCTIONS
                    if hasattr(module, attribute) and not callable(getattr(module, attribute))]
    if missing or not_callable:
        problems = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"{', '.join(not_callable)} not callable"] if not_callable else [])
        raise ModelModuleError(f"{name!r} ({getattr(module, '__file__', '?')}) {'; '.join(problems)}; "
                               f"a model module defines {', '.join(CONSTANTS + FUNCTIONS)}")
    return typing.cast(ModelModule, module)
