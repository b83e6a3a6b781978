"""TFRecord ingestion executor: checked, split and counted tf.Examples as a standard Examples artifact."""
from __future__ import annotations

import json
import os
from typing import Any

import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_executor
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.components.util import examples_utils

from components.tfrecord_ingest import records

SPLITS = ("train", "eval")
OUTPUT_FILE = "data_tfrecord-00000-of-00001.gz"  # ExampleGen's naming, so downstream readers see gzip
REPORT_FILE = "ingest_report.json"
MAX_LISTED_BAD_RECORDS = 20
SPANS_PROPERTY = "spans"  # custom property on Examples: the span numbers read, comma-separated
FINGERPRINT_PROPERTY = "input_fingerprint"  # custom property on Examples: records.fingerprint_spans of them


class Executor(base_executor.BaseExecutor):
    """Do(): reads the last `span_window` spans of `input_base`, checks every record, writes train/eval."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        examples = artifact_utils.get_single_instance(output_dict["examples"])
        spans = records.resolve_spans(exec_properties["input_base"], int(exec_properties.get("span_window") or 1))
        report = ingest([span_dir for _, span_dir in spans], examples.uri, float(exec_properties["eval_fraction"]))
        examples.split_names = artifact_utils.encode_split_names(list(SPLITS))
        examples.span = spans[-1][0]
        examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
        for split in SPLITS:
            examples.set_int_custom_property(f"{split}_examples", report["counts"][split])
        examples.set_int_custom_property("input_files", len(report["files"]))
        examples.set_string_custom_property("input_dir", ",".join(span_dir for _, span_dir in spans))
        examples.set_string_custom_property(SPANS_PROPERTY, ",".join(str(span) for span, _ in spans))
        # What was read, fingerprinted as the pipeline fingerprints it: later runs use it to tell which
        # models and statistics came from which data.
        examples.set_string_custom_property(FINGERPRINT_PROPERTY, records.fingerprint_spans(spans))
        report["span"] = spans[-1][0]
        report["spans"] = [span for span, _ in spans]
        with tf.io.gfile.GFile(os.path.join(examples.uri, REPORT_FILE), "w") as handle:
            json.dump(report, handle, indent=2)


def ingest(input_dirs: list[str], output_uri: str, eval_fraction: float) -> dict[str, Any]:
    """Input: directories of TFRecord files (the spans read). Output: per-split counts; splits written
    under `output_uri`.

    Raises IngestionError (naming file and record index) if any record is unreadable or not a tf.Example;
    every file is still scanned so the error lists all the files at fault.
    """
    files = [path for input_dir in input_dirs for path in records.list_record_files(input_dir)]
    counts = {split: 0 for split in SPLITS}
    per_file = {}
    bad = _BadRecords()
    writers = {}
    for split in SPLITS:
        split_dir = os.path.join(output_uri, f"Split-{split}")
        tf.io.gfile.makedirs(split_dir)
        writers[split] = tf.io.TFRecordWriter(os.path.join(split_dir, OUTPUT_FILE), options="GZIP")
    try:
        for path in files:
            seen, file_unreadable = 0, False
            try:
                for index, record in records.iter_records(path):
                    seen += 1
                    reason = records.check_example(record)
                    if reason:
                        bad.note(records.BadRecord(path, index, reason))
                        continue
                    split = records.split_of(record, eval_fraction)
                    writers[split].write(record)
                    counts[split] += 1
            except records.UnreadableRecordError as error:
                bad.note(error.bad)
                file_unreadable = True
            if seen == 0 and not file_unreadable:
                bad.note(records.BadRecord(path, 0, "empty file: no records"))
            per_file[_relative_name(path, input_dirs)] = seen
            logging.info("Ingested %s: %d records", path, seen)
    finally:
        for writer in writers.values():
            writer.close()
    if bad.count:
        more = f"\n  ... and {bad.count - len(bad.listed)} more" if bad.count > len(bad.listed) else ""
        listed = "\n  ".join(str(b) for b in bad.listed)
        raise records.IngestionError(f"{bad.count} bad record(s) in {', '.join(input_dirs)}:\n  {listed}{more}")
    for split in SPLITS:
        if counts[split] == 0:
            raise records.IngestionError(f"{', '.join(input_dirs)}: the {split} split is empty "
                                         f"({sum(counts.values())} records, eval_fraction={eval_fraction})")
    return {"input_dirs": input_dirs, "files": per_file, "counts": counts, "eval_fraction": eval_fraction}


def _relative_name(path: str, input_dirs: list[str]) -> str:
    """A file's name, prefixed by its span folder when several spans are read."""
    if len(input_dirs) == 1:
        return os.path.basename(path)
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))


class _BadRecords:
    """Counts every bad record but keeps only the first few for the error message (bounded memory)."""

    def __init__(self):
        self.count = 0
        self.listed: list[records.BadRecord] = []

    def note(self, bad: records.BadRecord) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED_BAD_RECORDS:
            self.listed.append(bad)
