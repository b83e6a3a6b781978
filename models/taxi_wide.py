"""The taxi model with a much wider deep tower: enough arithmetic per example to show an accelerator's
(or a bf16 CPU's) speed in benchmarks, where the default taxi model is bound by per-step overhead.
"""
from __future__ import annotations

import keras

from models.taxi import CLASSES, INPUTS, LABEL_INPUTS, LABEL_KEY, TASK, build_preprocessing, make_label  # noqa: F401
from models import taxi

HIDDEN_UNITS = (1024, 1024, 512)


def build_model(preprocessing: keras.Model) -> keras.Model:
    """Input: the model from build_preprocessing. Output: the wide-and-deep model with HIDDEN_UNITS."""
    return taxi.build_model(preprocessing, HIDDEN_UNITS)
