"""ValidationGate executor: stops the run on blocking schema anomalies or on drift from the previous span; a
column the schema does not know is reported, not blocking (the model leaves it out)."""
from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf
import tensorflow_data_validation as tfdv
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils

from components.core import contract
from components.validation_gate import drift


class BlockingAnomaliesError(RuntimeError):
    """The data breaks the curated schema or drifted; the message names each split and feature."""


class Executor(base_executor.BaseExecutor):
    """Do(): reads each split's anomalies, measures drift against the data the served model was trained on, writes
    validation_report.json, raises if anything blocks."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        anomalies = artifact_utils.get_single_instance(input_dict[contract.ANOMALIES])
        statistics = artifact_utils.get_single_instance(input_dict[contract.STATISTICS])
        examples = artifact_utils.get_single_instance(input_dict[contract.EXAMPLES])
        schema = io_utils.SchemaReader().read(io_utils.get_only_uri_in_dir(
            artifact_utils.get_single_uri(input_dict[contract.SCHEMA])))
        previous = (input_dict.get(contract.PREVIOUS_VALIDATION_REPORT) or [None])[-1]
        report_artifact = artifact_utils.get_single_instance(output_dict[contract.VALIDATION_REPORT])

        splits = artifact_utils.decode_split_names(anomalies.split_names)
        report = summarize({split: anomalies_pb2.Anomalies.FromString(io_utils.read_bytes_file(
            os.path.join(anomalies.uri, f"Split-{split}", contract.ANOMALIES_FILE))) for split in splits})
        report["span"] = examples.span
        if previous is not None:
            report["drift"] = _drift_against(previous, statistics, schema)
            report["blocking"] |= any(drift.drifted(features) for features in report["drift"]["splits"].values())
        _copy_statistics(statistics, os.path.join(report_artifact.uri, contract.STATISTICS_COPY_DIR))
        with tf.io.gfile.GFile(os.path.join(report_artifact.uri, contract.VALIDATION_REPORT_FILE), "w") as handle:
            json.dump(report, handle, indent=2)
        report_artifact.set_int_custom_property(contract.BLOCKING_PROPERTY, int(report["blocking"]))
        report_artifact.set_int_custom_property(contract.SPAN_PROPERTY, examples.span)
        for key in (contract.FINGERPRINT_PROPERTY, contract.SPANS_PROPERTY):
            report_artifact.set_string_custom_property(key, examples.get_string_custom_property(key))
        if report["blocking"]:
            raise BlockingAnomaliesError(describe(report))


def summarize(per_split: dict[str, anomalies_pb2.Anomalies]) -> dict:
    """Input: split -> TFDV Anomalies. Output: JSON-ready report; ERROR-severity anomalies are blocking, but
    a column the schema does not know (TFDV's SCHEMA_NEW_COLUMN, which it marks ERROR): the model, built from
    the schema, leaves it out, so it is listed under `new_columns` (what TFDV's own
    ValidationOptions(new_features_are_warnings=True) does, which ExampleValidator does not expose)."""
    report = {"blocking": False, "splits": {}, "new_columns": []}
    for split, anomalies in per_split.items():
        features = {}
        for name, info in sorted(anomalies.anomaly_info.items()):
            new_column = bool(info.reason) and all(
                reason.type == anomalies_pb2.AnomalyInfo.SCHEMA_NEW_COLUMN for reason in info.reason)
            blocking = info.severity == anomalies_pb2.AnomalyInfo.ERROR and not new_column
            features[name] = {"blocking": blocking, "short": info.short_description,
                              "description": info.description}
            if new_column:
                features[name]["new_column"] = True
                if name not in report["new_columns"]:
                    report["new_columns"].append(name)
            report["blocking"] |= blocking
        dataset = [reason.short_description for reason in anomalies.dataset_anomaly_info.reason]
        if dataset:
            features["<dataset>"] = {"blocking": True, "short": "; ".join(dataset), "description": ""}
            report["blocking"] = True
        report["splits"][split] = features
    report["new_columns"].sort()
    return report


def describe(report: dict) -> str:
    """The error a blocked run ends with: every blocking anomaly and every drifted feature, by split."""
    lines = [f"  {split}: {feature}: {info['short']} ({info['description']})"
             for split, features in report["splits"].items()
             for feature, info in features.items() if info["blocking"]]
    drift_report = report.get("drift") or {"splits": {}}
    drifted = [drift.describe_drift(split, feature, measured, drift_report.get("previous_span"))
               for split, features in drift_report["splits"].items()
               for feature, measured in drift.drifted(features)]
    if drifted and (sizes := drift.describe_sizes(report.get("span"), drift_report)):
        drifted.append(f"  {sizes}")
    lines += drifted + ([f"  {drift.ACCEPT_ADVICE}"] if drifted else [])
    if report.get("new_columns"):
        lines.append(f"  not blocking: new column(s) {', '.join(report['new_columns'])}, not in the schema: the model "
                     "leaves them out until init is run again or the schema lists them")
    return ("the data breaks the curated schema or drifted from the previous span; training did not start:\n"
            + "\n".join(lines))


def _drift_against(previous: types.Artifact, statistics: types.Artifact, schema) -> dict:
    """Drift of each split of `statistics` from the same split of the reference span, and the records
    of each split on both sides (`records`, `previous_records`)."""
    result = {"previous_span": previous.get_int_custom_property(contract.SPAN_PROPERTY),
              "previous_spans": previous.get_string_custom_property(contract.SPANS_PROPERTY), "splits": {},
              "records": {}, "previous_records": {}}
    for split in artifact_utils.decode_split_names(statistics.split_names):
        previous_path = os.path.join(previous.uri, contract.STATISTICS_COPY_DIR, f"Split-{split}",
                                     contract.STATISTICS_FILE)
        if not tf.io.gfile.exists(previous_path):
            continue
        current = tfdv.load_stats_binary(os.path.join(statistics.uri, f"Split-{split}", contract.STATISTICS_FILE))
        reference = tfdv.load_stats_binary(previous_path)
        result["splits"][split] = drift.measure_drift(current, reference, schema)
        result["records"][split] = drift.records_of(current)
        result["previous_records"][split] = drift.records_of(reference)
    return result


def _copy_statistics(statistics: types.Artifact, destination: str) -> None:
    for split in artifact_utils.decode_split_names(statistics.split_names):
        split_dir = os.path.join(destination, f"Split-{split}")
        tf.io.gfile.makedirs(split_dir)
        tf.io.gfile.copy(os.path.join(statistics.uri, f"Split-{split}", contract.STATISTICS_FILE),
                         os.path.join(split_dir, contract.STATISTICS_FILE), overwrite=True)
