"""ValidationGate executor: stops the run when ExampleValidator found blocking (ERROR) anomalies."""
from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf
from tensorflow_metadata.proto.v0 import anomalies_pb2
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils
from tfx.utils import io_utils

ANOMALIES_FILE = "SchemaDiff.pb"  # what ExampleValidator writes in each split folder
REPORT_FILE = "validation_report.json"


class BlockingAnomaliesError(RuntimeError):
    """The data breaks the curated schema; the message names each split and feature."""


class Executor(base_executor.BaseExecutor):
    """Do(): reads each split's anomalies, writes validation_report.json, raises if any is blocking."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        anomalies = artifact_utils.get_single_instance(input_dict["anomalies"])
        report_artifact = artifact_utils.get_single_instance(output_dict["report"])
        splits = artifact_utils.decode_split_names(anomalies.split_names)
        report = summarize({split: anomalies_pb2.Anomalies.FromString(io_utils.read_bytes_file(
            os.path.join(anomalies.uri, f"Split-{split}", ANOMALIES_FILE))) for split in splits})
        tf.io.gfile.makedirs(report_artifact.uri)
        with tf.io.gfile.GFile(os.path.join(report_artifact.uri, REPORT_FILE), "w") as handle:
            json.dump(report, handle, indent=2)
        report_artifact.set_int_custom_property("blocking", int(report["blocking"]))
        if report["blocking"]:
            raise BlockingAnomaliesError(describe(report))


def summarize(per_split: dict[str, anomalies_pb2.Anomalies]) -> dict:
    """Input: split -> TFDV Anomalies. Output: JSON-ready report; ERROR-severity anomalies are blocking."""
    report = {"blocking": False, "splits": {}}
    for split, anomalies in per_split.items():
        features = {}
        for name, info in sorted(anomalies.anomaly_info.items()):
            blocking = info.severity == anomalies_pb2.AnomalyInfo.ERROR
            features[name] = {"blocking": blocking, "short": info.short_description,
                              "description": info.description}
            report["blocking"] |= blocking
        dataset = [reason.short_description for reason in anomalies.dataset_anomaly_info.reason]
        if dataset:
            features["<dataset>"] = {"blocking": True, "short": "; ".join(dataset), "description": ""}
            report["blocking"] = True
        report["splits"][split] = features
    return report


def describe(report: dict) -> str:
    lines = [f"  {split}: {feature}: {info['short']} ({info['description']})"
             for split, features in report["splits"].items()
             for feature, info in features.items() if info["blocking"]]
    return ("blocking data anomalies against the curated schema; training did not start:\n"
            + "\n".join(lines))
