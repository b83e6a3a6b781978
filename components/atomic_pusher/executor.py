"""AtomicPusher executor: publishes a blessed export as a new version folder, or leaves everything as it was."""
from __future__ import annotations

import os
from typing import Any

from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.types import artifact_utils

from components.core import artifact_files, contract
from components.atomic_pusher.publish import publish, versions
from components.core.records import is_blessed


class Executor(base_executor.BaseExecutor):
    """Do(): pushes only when the blessing says blessed and the export holds a model; sets PushedModel's
    standard properties (pushed, pushed_destination, pushed_version)."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        blessing = artifact_utils.get_single_instance(input_dict[contract.BLESSING])
        exported = artifact_utils.get_single_instance(input_dict[contract.EXPORTED_MODEL])
        pushed = artifact_utils.get_single_instance(output_dict[contract.PUSHED_MODEL])
        push_dir = exec_properties[contract.PUSH_DIR]
        export_report = artifact_files.read_json(os.path.join(exported.uri, contract.EXPORT_REPORT_FILE))
        if not is_blessed(blessing) or not export_report["exported"]:
            logging.info("AtomicPusher: the model is not blessed; %s left as it was", push_dir)
            pushed.set_int_custom_property(contract.PUSHED_PROPERTY, 0)
            return
        destination = already_published(push_dir, export_report["source_model"]["uri"])
        if destination is None:
            destination = publish(version_files(exported.uri, export_report, pushed.uri), push_dir)
            logging.info("AtomicPusher: published %s", destination)
        else:
            logging.info("AtomicPusher: %s already serves this model; no new version", destination)
        pushed.set_int_custom_property(contract.PUSHED_PROPERTY, 1)
        pushed.set_string_custom_property(contract.PUSHED_DESTINATION_PROPERTY, destination)
        pushed.set_string_custom_property(contract.PUSHED_VERSION_PROPERTY, os.path.basename(destination))


def version_files(export_uri: str, export_report: dict, info_dir: str) -> dict[str, str]:
    """What one version holds: the SavedModel at its root (TF Serving's layout), the recommended TFLite file
    as model.tflite, the export report, and push_info.json (written to `info_dir` first) naming the source
    model and the variant."""
    files = {"": os.path.join(export_uri, contract.SAVED_MODEL_DIR),
             contract.EXPORT_REPORT_FILE: os.path.join(export_uri, contract.EXPORT_REPORT_FILE)}
    recommended = export_report["recommended"]
    if recommended:
        files[contract.PUSHED_TFLITE_FILE] = os.path.join(export_uri, export_report["variants"][recommended]["file"])
    info = {"source_model": export_report["source_model"], "tflite_variant": recommended,
            "tflite": export_report["variants"].get(recommended) if recommended else None}
    info_path = os.path.join(info_dir, contract.PUSH_INFO_FILE)
    artifact_files.write_json(info_path, info)
    files[contract.PUSH_INFO_FILE] = info_path
    return files


def already_published(push_dir: str, source_model_uri: str) -> str | None:
    """The newest version's folder when it was published from this same model, else None."""
    published = versions(push_dir)
    if not published:
        return None
    newest = os.path.join(push_dir, str(published[-1]))
    info = artifact_files.read_json_if_exists(os.path.join(newest, contract.PUSH_INFO_FILE)) or {}
    return newest if info.get("source_model", {}).get("uri") == source_model_uri else None
