"""A span's data files: rows of typed columns serialized as tf.Examples in canonical bytes (serialize_rows), and
gzip-compressed TFRecord shards written without TensorFlow (ShardWriter).
"""
from __future__ import annotations

import gzip
import struct

import numpy as np

SHARDS = 4


def serialize_rows(lists: dict, present: np.ndarray) -> list[bytes]:
    """Input: column -> list array of one block (one value per row), and the rows x columns presence matrix.
    Output: each row's serialized tf.Example holding only its present columns (rows grouped by which columns
    they hold, each group encoded at once by tfx-bsl's encoder), in canonical form (canonical_examples: equal
    rows give equal bytes, so ingestion's hash splits the same CSV the same way every time)."""
    import pyarrow as pa
    from tfx_bsl.coders.example_coder import RecordBatchToExamples

    from pipeline.onboarding.canonical_examples import canonical

    names = list(lists)
    patterns, group_of_row = np.unique(present, axis=0, return_inverse=True)
    records: list[bytes] = [b""] * len(present)
    for group, pattern in enumerate(patterns):
        rows = np.flatnonzero(group_of_row.reshape(-1) == group)
        kept = [name for name, keep in zip(names, pattern) if keep]
        indices = pa.array(rows)
        batch = pa.RecordBatch.from_arrays([lists[name].take(indices) for name in kept], kept)
        for row, record in zip(rows, canonical(RecordBatchToExamples(batch))):
            records[row] = record
    return records


class ShardWriter:
    """Gzip TFRecord files written without TensorFlow (TFRecord framing: length, masked CRC-32C of the
    length, data, masked CRC-32C of the data); a URI is written through tf.io.gfile."""

    def __init__(self, path: str):
        if "://" in path:
            import tensorflow as tf
            self._raw = tf.io.gfile.GFile(path, "wb")
        else:
            self._raw = open(path, "wb")
        self._file = gzip.GzipFile(fileobj=self._raw, mode="wb", compresslevel=6, mtime=0)
        self.path, self.records = path, 0

    def write(self, record: bytes) -> None:
        self.records += 1
        length = struct.pack("<Q", len(record))
        self._file.write(length + struct.pack("<I", _masked_crc(length)) + record
                         + struct.pack("<I", _masked_crc(record)))

    def close(self) -> None:
        self._file.close()
        self._raw.close()


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF
