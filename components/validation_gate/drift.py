"""Drift between two spans' statistics, measured by TFDV with the comparators in the curated schema.

Pure functions over TFDV protos (no TFX): testable with statistics generated on the spot.
"""
from __future__ import annotations

import math

import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2, schema_pb2, statistics_pb2

MEASURE_NAMES = {"L_INFTY": "L-infinity distance", "JENSEN_SHANNON_DIVERGENCE": "Jensen-Shannon divergence",
                 "NORMALIZED_ABSOLUTE_DIFFERENCE": "normalized absolute difference"}
# The curated schema's field that holds each measure's threshold (a feature's drift_comparator).
COMPARATOR_FIELDS = {"L_INFTY": "infinity_norm", "JENSEN_SHANNON_DIVERGENCE": "jensen_shannon_divergence",
                     "NORMALIZED_ABSOLUTE_DIFFERENCE": "normalized_abs_difference"}


def measure_drift(current: statistics_pb2.DatasetFeatureStatisticsList,
                  previous: statistics_pb2.DatasetFeatureStatisticsList, schema: schema_pb2.Schema) -> dict:
    """Input: this span's and the previous span's statistics (one split each) and the schema with its
    drift comparators. Output: feature -> [{measure, value, threshold, drifted}, ...], one entry per
    comparator measurement of every feature that has a comparator (a feature may carry several, e.g. an
    L-infinity distance and a Jensen-Shannon divergence); `drifted` when the value is above the threshold."""
    anomalies = tfdv.validate_statistics(current, schema, previous_statistics=previous)
    measured: dict[str, list[dict]] = {}
    for info in anomalies.drift_skew_info:
        for measurement in info.drift_measurements:
            measure = anomalies_pb2.DriftSkewInfo.Measurement.Type.Name(measurement.type)
            measured.setdefault(".".join(info.path.step), []).append({
                "measure": measure, "value": round(measurement.value, 6), "threshold": measurement.threshold,
                "drifted": measurement.value > measurement.threshold})
    return {feature: sorted(entries, key=lambda entry: entry["measure"]) for feature, entries in sorted(measured.items())}


def drifted(measured: dict) -> list[tuple[str, dict]]:
    """Input: measure_drift's output. Output: (feature, measurement) for every measurement past its threshold."""
    return [(feature, entry) for feature, entries in measured.items() for entry in entries if entry["drifted"]]


def describe_drift(split: str, feature: str, measured: dict, previous_span: int | None) -> str:
    """One line of the error a drift-blocked run ends with, for one measurement of one feature, with the
    schema setting that would accept it."""
    name = MEASURE_NAMES.get(measured["measure"], measured["measure"])
    against = f" vs span {previous_span}" if previous_span is not None else ""
    field = COMPARATOR_FIELDS.get(measured["measure"], measured["measure"].lower())
    accepting = math.ceil(measured["value"] * 100 + 1e-9) / 100 + 0.01  # above the value measured
    return (f"  {split}: {feature}: drift {name} {measured['value']:.3f} > threshold "
            f"{measured['threshold']:.3f}{against} (accepted with feature {{ name: \"{feature}\" drift_comparator "
            f"{{ {field} {{ threshold: {accepting:.2f} }} }} }})")


ACCEPT_ADVICE = ("a change that is real is accepted by raising the feature's drift_comparator threshold in the curated "
                 "schema (the config's schema_path) as shown, then running again (python -m pipeline run --config "
                 "...); until a span is accepted, each new span is compared with the last one accepted")
