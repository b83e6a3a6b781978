"""Resolver strategies that look past artifacts made from this run's own data.

A run resolves two things from MLMD: the latest blessed model (evaluation baseline and warm start) and the
last ValidationReport of data a blessed model was trained on (drift reference). TFX's stock strategies return
the newest ones, which on an unchanged re-run are this data's own outputs from the previous run: the resolved
inputs then differ from that run's, and the evaluator, both trainers and the gate miss the cache. These strategies skip
artifacts whose `input_fingerprint` (set from the Examples by the evaluator and the gate) equals this
run's data fingerprint, so an unchanged re-run resolves what the first run resolved and every step is a
cache hit, while new data still resolves the newest model and report.

Kubeflow Pipelines v2 runs only TFX's stock strategies; the Kubeflow compile uses those (see wiring.py).
"""
from __future__ import annotations

from tfx import types
from tfx.components.evaluator import constants
from tfx.dsl.components.common import resolver
from tfx.types import standard_artifacts

from components.core import contract


def _from_other_data(artifacts: list[types.Artifact], input_fingerprint: str) -> list[types.Artifact]:
    return [artifact for artifact in artifacts
            if artifact.get_string_custom_property(contract.FINGERPRINT_PROPERTY) != input_fingerprint]


class LatestOfBlessedData(resolver.ResolverStrategy):
    """Each channel: its newest artifact made from data a blessed model was trained on (before any model was
    blessed: data any model was trained on), and not from data with `input_fingerprint` (none if there is
    none). The evaluator's ModelBlessing, blessed or not, carries the input fingerprint of the data the model was
    trained on. The drift reference: the data the served model learned from, never a span that stopped the run,
    produced no model (a training that failed) or only one not fit to serve (three rows accepted)."""

    def __init__(self, input_fingerprint: str):
        self._input_fingerprint = input_fingerprint

    def resolve_artifacts(self, store, input_dict: dict[str, list[types.Artifact]]) -> dict:
        verdicts = [(blessing.custom_properties[contract.FINGERPRINT_PROPERTY].string_value,
                     blessing.custom_properties[constants.ARTIFACT_PROPERTY_BLESSED_KEY].int_value
                     if constants.ARTIFACT_PROPERTY_BLESSED_KEY in blessing.custom_properties else 0)
                    for blessing in store.get_artifacts_by_type(standard_artifacts.ModelBlessing.TYPE_NAME)
                    if contract.FINGERPRINT_PROPERTY in blessing.custom_properties]
        blessed = {fingerprint for fingerprint, verdict in verdicts if verdict == constants.BLESSED_VALUE}
        trained = blessed or {fingerprint for fingerprint, _ in verdicts}
        return {key: sorted([artifact for artifact in _from_other_data(artifacts, self._input_fingerprint)
                             if artifact.get_string_custom_property(contract.FINGERPRINT_PROPERTY) in trained],
                            key=lambda a: a.id)[-1:]
                for key, artifacts in input_dict.items()}


class LatestBlessedModelFromOtherData(resolver.ResolverStrategy):
    """The newest blessed model (and its blessing) whose blessing was not made on data with `input_fingerprint`.

    Input channels `model` (Model) and `model_blessing` (ModelBlessing), as for TFX's LatestBlessedModelStrategy.
    """

    def __init__(self, input_fingerprint: str):
        self._input_fingerprint = input_fingerprint

    def resolve_artifacts(self, store, input_dict: dict[str, list[types.Artifact]]) -> dict:
        blessings = {
            blessing.get_int_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_ID_KEY): blessing
            for blessing in sorted(_from_other_data(input_dict[contract.MODEL_BLESSING], self._input_fingerprint),
                                   key=lambda a: a.id)
            if blessing.get_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY)
            == constants.BLESSED_VALUE}
        for model in sorted(input_dict[contract.MODEL], key=lambda a: a.id, reverse=True):
            if model.id in blessings:
                return {contract.MODEL: [model], contract.MODEL_BLESSING: [blessings[model.id]]}
        return {contract.MODEL: [], contract.MODEL_BLESSING: []}
