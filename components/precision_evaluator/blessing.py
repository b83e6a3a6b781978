"""A standard ModelBlessing, written the way TFX's Evaluator writes it, so Pusher and resolvers work unchanged.

Custom properties: blessed (1/0), current_model / current_model_id (the blessed model, which may be the FP32
baseline after a fallback), baseline_model / baseline_model_id (the FP32 baseline), chosen ("candidate",
"fp32_baseline" or ""). A BLESSED or NOT_BLESSED marker file sits in the artifact folder.
"""
from __future__ import annotations

import os

from tfx import types
from tfx.components.evaluator import constants

from components.core import artifact_files, contract


def write_blessing(blessing: types.Artifact, blessed: bool, chosen: types.Artifact, chosen_name: str | None,
                   baseline: types.Artifact) -> None:
    """Input: the output ModelBlessing, the verdict, the model it refers to (the candidate when nothing is
    blessed) and its role, and the FP32 baseline model. Output: properties and the marker file set."""
    marker = constants.BLESSED_FILE_NAME if blessed else constants.NOT_BLESSED_FILE_NAME
    # Not empty, unlike TFX's: TensorFlow's S3 filesystem writes no object for an empty file.
    artifact_files.write_text(os.path.join(blessing.uri, marker), chosen.uri + "\n")
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY,
                                     constants.BLESSED_VALUE if blessed else constants.NOT_BLESSED_VALUE)
    blessing.set_string_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY, chosen.uri)
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY, chosen.id)
    blessing.set_string_custom_property(constants.ARTIFACT_PROPERTY_BASELINE_MODEL_URI_KEY, baseline.uri)
    blessing.set_int_custom_property(constants.ARTIFACT_PROPERTY_BASELINE_MODEL_ID_KEY, baseline.id)
    blessing.set_string_custom_property(contract.CHOSEN_PROPERTY, chosen_name or "")
