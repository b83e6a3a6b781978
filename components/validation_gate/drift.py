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


# A span of fewer records than this, or than this share of the reference's, is named as small beside its drift
FEW_RECORDS, FEW_RECORDS_SHARE = 100, 0.1


def records_of(statistics: statistics_pb2.DatasetFeatureStatisticsList) -> int:
    """The records one split's statistics were computed over."""
    return int(sum(dataset.num_examples for dataset in statistics.datasets))


def describe_sizes(span: int | None, drift_report: dict) -> str:
    """The line that says how many records drift was measured on: this span's and the reference's, per split
    ("" when the report does not hold them); for a span of few records (FEW_RECORDS, or FEW_RECORDS_SHARE of the
    reference's), that so few say little, and what to do."""
    records, previous = drift_report.get("records") or {}, drift_report.get("previous_records") or {}
    if not records:
        return ""
    this = f"span {span}" if span is not None else "this span"
    against = drift_report.get("previous_span")
    reference_span = f"span {against}'s" if against is not None else "the reference span's"
    line = f"{this} holds {_split_counts(records)}, against {reference_span} {_split_counts(previous)}"
    total, reference = sum(records.values()), sum(previous.values())
    if total < FEW_RECORDS or total < FEW_RECORDS_SHARE * reference:
        line += (f": drift over {total:,} record(s) says little. Is the span complete? Prepare it again from the whole "
                 "table, or add its rows to the next span; accepting it trains a model on them")
    return line


def _split_counts(records: dict[str, int]) -> str:
    """"1,203 records (train 802, eval 401)"."""
    return (f"{sum(records.values()):,} record(s) ("
            + ", ".join(f"{split} {count:,}" for split, count in records.items()) + ")")


ACCEPT_ADVICE = ("a change that is real is accepted by raising the feature's drift_comparator threshold in the curated "
                 "schema (the config's schema_path) as shown, then running again (python -m pipeline run --config "
                 "...); each new span is compared with the data of the last blessed model, so a span whose model no "
                 "gate blessed never becomes the reference")
