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


class Executor(base_executor.BaseExecutor):
    """Do(): reads `input_base`'s latest span, checks every record, writes train/eval splits."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        examples = artifact_utils.get_single_instance(output_dict["examples"])
        span, span_dir = records.resolve_span(exec_properties["input_base"])
        report = ingest(span_dir, examples.uri, float(exec_properties["eval_fraction"]))
        examples.split_names = artifact_utils.encode_split_names(list(SPLITS))
        examples.span = span
        examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
        for split in SPLITS:
            examples.set_int_custom_property(f"{split}_examples", report["counts"][split])
        examples.set_int_custom_property("input_files", len(report["files"]))
        examples.set_string_custom_property("input_dir", span_dir)
        report["span"] = span
        with tf.io.gfile.GFile(os.path.join(examples.uri, REPORT_FILE), "w") as handle:
            json.dump(report, handle, indent=2)


def ingest(input_dir: str, output_uri: str, eval_fraction: float) -> dict[str, Any]:
    """Input: a directory of TFRecord files. Output: per-split counts; splits written under `output_uri`.

    Raises IngestionError (naming file and record index) if any record is unreadable or not a tf.Example;
    every file is still scanned so the error lists all the files at fault.
    """
    files = records.list_record_files(input_dir)
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
            per_file[os.path.basename(path)] = seen
            logging.info("Ingested %s: %d records", path, seen)
    finally:
        for writer in writers.values():
            writer.close()
    if bad.count:
        more = f"\n  ... and {bad.count - len(bad.listed)} more" if bad.count > len(bad.listed) else ""
        listed = "\n  ".join(str(b) for b in bad.listed)
        raise records.IngestionError(f"{bad.count} bad record(s) in {input_dir}:\n  {listed}{more}")
    for split in SPLITS:
        if counts[split] == 0:
            raise records.IngestionError(f"{input_dir}: the {split} split is empty "
                                         f"({sum(counts.values())} records, eval_fraction={eval_fraction})")
    return {"input_dir": input_dir, "files": per_file, "counts": counts, "eval_fraction": eval_fraction}


class _BadRecords:
    """Counts every bad record but keeps only the first few for the error message (bounded memory)."""

    def __init__(self):
        self.count = 0
        self.listed: list[records.BadRecord] = []

    def note(self, bad: records.BadRecord) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED_BAD_RECORDS:
            self.listed.append(bad)
