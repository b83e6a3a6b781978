"""TFRecord ingestion executor: checked, split and counted tf.Examples as a standard Examples artifact."""
from __future__ import annotations

import json
import os
from typing import Any, Callable

import apache_beam as beam
import tensorflow as tf
from absl import logging
from tfx import types
from tfx.dsl.components.base import base_beam_executor
from tfx.dsl.io import fileio
from tfx.proto import example_gen_pb2
from tfx.types import artifact_utils
from tfx.components.util import examples_utils

from components.core import artifact_files, contract
from components.tfrecord_ingest import tfrecord_files
from components.tfrecord_ingest import spans as spans_module

SPLITS = ("train", "eval")
SHARD_NAME = "data_tfrecord-{index:05d}-of-{count:05d}.gz"  # ExampleGen's naming: downstream readers see gzip
SUMMARIES_DIR = ".file-summaries"  # per input file, written by the Beam workers, read and removed by Do()
MAX_LISTED_BAD_RECORDS = 20


class Executor(base_beam_executor.BaseBeamExecutor):
    """Do(): reads the last `span_window` spans of `input_base` as a Beam job (one unit of work per input
    file), checks every record, writes train/eval, records counts and the report."""

    def Do(self, input_dict: dict[str, list[types.Artifact]], output_dict: dict[str, list[types.Artifact]],
           exec_properties: dict[str, Any]) -> None:
        examples = artifact_utils.get_single_instance(output_dict[contract.EXAMPLES])
        spans = spans_module.resolve_spans(exec_properties[contract.INPUT_BASE],
                                      int(exec_properties.get(contract.SPAN_WINDOW) or 1))
        leave_out = tuple(json.loads(exec_properties.get(contract.SPLIT_LEAVES_OUT) or "[]"))
        report = ingest([span_dir for _, span_dir in spans], examples.uri,
                        float(exec_properties[contract.EVAL_FRACTION]), make_pipeline=self._make_beam_pipeline,
                        leave_out=leave_out)
        examples.split_names = artifact_utils.encode_split_names(list(SPLITS))
        examples.span = spans[-1][0]
        examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
        for split in SPLITS:
            examples.set_int_custom_property(contract.SPLIT_EXAMPLES_PROPERTY.format(split=split),
                                             report["counts"][split])
        examples.set_int_custom_property(contract.INPUT_FILES_PROPERTY, len(report["files"]))
        examples.set_string_custom_property(contract.INPUT_DIR_PROPERTY, ",".join(span_dir for _, span_dir in spans))
        examples.set_string_custom_property(contract.SPANS_PROPERTY, ",".join(str(span) for span, _ in spans))
        # What was read, fingerprinted as the pipeline fingerprints it: later runs use it to tell which
        # models and statistics came from which data.
        examples.set_string_custom_property(contract.FINGERPRINT_PROPERTY, spans_module.fingerprint_spans(spans))
        report["span"] = spans[-1][0]
        report["spans"] = [span for span, _ in spans]
        artifact_files.write_json(os.path.join(examples.uri, contract.INGEST_REPORT_FILE), report)


def ingest(input_dirs: list[str], output_uri: str, eval_fraction: float,
           make_pipeline: Callable[[], beam.Pipeline] = beam.Pipeline,
           leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """Input: directories of TFRecord files (the spans read), the output folder, the eval fraction, the
    Beam pipeline to run in (the executor's: its runner and options) and the features the split's hash
    leaves out (tfrecord_files.split_of). Output: per-split counts and per-file
    record counts; splits written under `output_uri`, one gzip shard per input file and split.

    Each input file is one unit of work (TFRecord files cannot be split, gzip ones least of all): a Beam
    runner spreads the files over its workers. Raises IngestionError (naming file and record index) if any
    record is unreadable or not a tf.Example; every file is still scanned so the error lists all the files
    at fault.
    """
    files = [path for input_dir in input_dirs for path in spans_module.list_record_files(input_dir)]
    summaries_dir = os.path.join(output_uri, SUMMARIES_DIR)
    for split in SPLITS:
        fileio.makedirs(os.path.join(output_uri, f"Split-{split}"))
    with make_pipeline() as pipeline:
        _ = (pipeline
             | "ListFiles" >> beam.Create(list(enumerate(files)))
             | "OneFilePerWorker" >> beam.Reshuffle()
             | "CheckSplitWrite" >> beam.Map(lambda indexed: ingest_file(
                    indexed[0], indexed[1], len(files), output_uri, eval_fraction, leave_out))
             | "WriteSummary" >> beam.Map(lambda summary: artifact_files.write_json(
                    os.path.join(summaries_dir, f"{summary['index']:05d}.json"), summary)))
    summaries = sorted((artifact_files.read_json(os.path.join(summaries_dir, f"{index:05d}.json"))
                        for index in range(len(files))), key=lambda summary: summary["index"])
    fileio.rmtree(summaries_dir)
    counts = {split: sum(summary["counts"][split] for summary in summaries) for split in SPLITS}
    bad_count = sum(summary["bad_count"] for summary in summaries)
    if bad_count:
        listed = [bad for summary in summaries for bad in summary["bad"]][:MAX_LISTED_BAD_RECORDS]
        more = f"\n  ... and {bad_count - len(listed)} more" if bad_count > len(listed) else ""
        raise tfrecord_files.IngestionError(f"{bad_count} bad record(s) in {', '.join(input_dirs)}:\n  "
                                            + "\n  ".join(listed) + more)
    for split in SPLITS:
        if counts[split] == 0:
            raise tfrecord_files.IngestionError(f"{', '.join(input_dirs)}: the {split} split is empty "
                                                f"({sum(counts.values())} records, eval_fraction={eval_fraction})")
    per_file = {_relative_name(summary["path"], input_dirs): summary["records"] for summary in summaries}
    return {"input_dirs": input_dirs, "files": per_file, "counts": counts, "eval_fraction": eval_fraction}


def ingest_file(index: int, path: str, file_count: int, output_uri: str, eval_fraction: float,
                leave_out: tuple[str, ...] = ()) -> dict[str, Any]:
    """Input: one input file (its position among `file_count`), the output folder, the eval fraction and the
    features the split's hash leaves out.
    Output: its summary {index, path, records, counts per split, bad_count, bad (the first few, as text)};
    writes its valid records to `Split-<split>/` shard `index` of each split that gets any. Idempotent: a
    retried bundle rewrites the same shards."""
    artifact_files.register_filesystems_for(path, output_uri)  # on a Beam worker as in the launching process
    counts = {split: 0 for split in SPLITS}
    writers: dict[str, tf.io.TFRecordWriter] = {}
    bad: list[str] = []
    bad_count, seen, unreadable = 0, 0, False

    def note(bad_record: tfrecord_files.BadRecord) -> None:
        nonlocal bad_count
        bad_count += 1
        if len(bad) < MAX_LISTED_BAD_RECORDS:
            bad.append(str(bad_record))

    try:
        for record_index, record in tfrecord_files.iter_records(path):
            seen += 1
            reason = tfrecord_files.check_example(record)
            if reason:
                note(tfrecord_files.BadRecord(path, record_index, reason))
                continue
            split = tfrecord_files.split_of(record, eval_fraction, leave_out)
            if split not in writers:
                shard = SHARD_NAME.format(index=index, count=file_count)
                writers[split] = tf.io.TFRecordWriter(os.path.join(output_uri, f"Split-{split}", shard), "GZIP")
            writers[split].write(record)
            counts[split] += 1
    except tfrecord_files.UnreadableRecordError as error:
        note(error.bad)
        unreadable = True
    finally:
        for writer in writers.values():
            writer.close()
    if seen == 0 and not unreadable:
        note(tfrecord_files.BadRecord(path, 0, "empty file: no records"))
    logging.info("Ingested %s: %d records", path, seen)
    return {"index": index, "path": path, "records": seen, "counts": counts, "bad_count": bad_count, "bad": bad}


def _relative_name(path: str, input_dirs: list[str]) -> str:
    """A file's name, prefixed by its span folder when several spans are read."""
    if len(input_dirs) == 1:
        return os.path.basename(path)
    return os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
