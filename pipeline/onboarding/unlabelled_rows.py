"""Records without a value for the label `init` chose, left out of the spans a data root already holds (the spans
prepare-data writes after that leave such rows out as they are prepared).
"""
from __future__ import annotations

import os

import numpy as np

from components.core.path_operations import file_system
from pipeline.onboarding.column_record import read_record, write_record
from pipeline.onboarding.span_folders import (SPAN_NOTE_FILE, publish, read_span_note, remove_quietly, span_names,
                                              write_json)
from pipeline.onboarding.tfrecord_shards import ShardWriter


def leave_out_unlabelled(data_root: str, label: str) -> dict[str, int]:
    """Input: a data root prepare-data wrote and the label `init` chose. Each span folder is written again
    without the records that have no value for the label (into a hidden folder beside it, renamed into place:
    a failure leaves the span as it was), its note (SPAN_NOTE_FILE) counting them; the label is recorded in
    COLUMNS_FILE so that later spans leave such rows out as they are prepared. Output: span folder -> records
    left out (spans that had none omitted)."""
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    from components.tfrecord_ingest.tfrecord_files import iter_records
    from components.tfrecord_ingest.spans import list_record_files

    files = file_system(data_root)
    decoder = ExamplesToRecordBatchDecoder()
    left_out: dict[str, int] = {}
    for name in span_names(data_root):
        span_dir = os.path.join(data_root, name)
        staging = os.path.join(data_root, f".{name}.partial")
        dropped = 0
        writers: list[ShardWriter] = []
        try:
            remove_quietly(files, staging)
            files.makedirs(staging)
            kept = 0
            for path in list_record_files(span_dir):
                writer = ShardWriter(os.path.join(staging, os.path.basename(path)))
                writers.append(writer)
                batch: list[bytes] = []
                for _, record in iter_records(path):
                    batch.append(record)
                    if len(batch) == 4096:
                        dropped += _write_labelled(decoder, batch, label, writer)
                        batch = []
                if batch:
                    dropped += _write_labelled(decoder, batch, label, writer)
                writers.pop().close()
                kept += writer.records
                if not writer.records:  # ingestion refuses a file without records
                    files.remove(writer.path)
            if dropped and kept:
                note = read_span_note(span_dir)
                if "rows" in note:
                    note["rows"] -= dropped
                note.setdefault("left_out", []).append({"rows": dropped, "why": f"no value for the label {label!r}"})
                write_json(files, os.path.join(staging, SPAN_NOTE_FILE), note)
                publish(files, staging, span_dir)
                left_out[span_dir] = dropped
            else:
                remove_quietly(files, staging)
        except BaseException:
            for writer in writers:
                try:
                    writer.close()
                except Exception:  # noqa: BLE001
                    pass
            remove_quietly(files, staging)
            raise
    record = read_record(data_root) or {}
    if record.get("label") != label:
        record["label"] = label
        write_record(data_root, record)
    return left_out


def _write_labelled(decoder, batch: list[bytes], label: str, writer: "ShardWriter") -> int:
    """Writes the records of `batch` that hold a value for `label`. Output: how many were left out."""
    import pyarrow.compute as pc

    decoded = decoder.DecodeBatch(batch)
    if label in decoded.schema.names:
        values = decoded.column(decoded.schema.get_field_index(label))
        held = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False) > 0
    else:
        held = np.zeros(len(batch), bool)
    for record, keep in zip(batch, held):
        if keep:
            writer.write(record)
    return int((~held).sum())
