"""Pure helpers for TFRecord ingestion: find files, detect compression, check records, split.

Nothing here depends on TFX, so each piece is testable on its own.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from typing import Iterable, Iterator

import tensorflow as tf
from google.protobuf import message as proto_message
from google.protobuf import unknown_fields

from components.core.datasets import record_dataset
from components.core.record_keys import features_digest
from components.tfrecord_ingest.spans import IngestionError

GZIP_MAGIC = b"\x1f\x8b"
RECORD_FRAMING_BYTES = 16  # per record: 8-byte length, 4-byte length CRC, payload, 4-byte payload CRC
SPLIT_BUCKETS = 10_000


@dataclass(frozen=True)
class BadRecord:
    path: str
    index: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: record {self.index}: {self.reason}"


class UnreadableRecordError(IngestionError):
    """A file cannot be read past `bad.index` (truncated, CRC mismatch)."""

    def __init__(self, bad: BadRecord):
        super().__init__(str(bad))
        self.bad = bad


def detect_compression(path: str) -> str:
    """Input: a TFRecord file. Output: 'GZIP' when it starts with the gzip magic bytes, else ''."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        return "GZIP" if handle.read(2) == GZIP_MAGIC else ""


def iter_records(path: str) -> Iterator[tuple[int, bytes]]:
    """Input: a TFRecord file (gzip or plain). Output: (index, serialized record) pairs.

    A truncated file or a CRC mismatch raises UnreadableRecordError naming the file and the record index.
    """
    compression = detect_compression(path)
    dataset = record_dataset(path, compression, buffer_size=1 << 20)
    iterator = iter(dataset.batch(1024).as_numpy_iterator())
    index, consumed = 0, 0
    while True:
        try:
            batch = next(iterator)
        except StopIteration:
            _check_nothing_left(path, compression, index, consumed)
            return
        except tf.errors.DataLossError as error:
            # The batch that failed starts at `index`; find the exact record with an unbatched pass.
            at = _first_unreadable(path, compression, index)
            raise UnreadableRecordError(BadRecord(path, at, f"unreadable ({_short(error)})")) from None
        except tf.errors.OpError as error:
            raise UnreadableRecordError(BadRecord(path, index, f"unreadable ({_short(error)})")) from None
        for record in batch:
            yield index, record
            index += 1
            consumed += RECORD_FRAMING_BYTES + len(record)


def _check_nothing_left(path: str, compression: str, records_read: int, consumed: int) -> None:
    """TensorFlow's reader stops quietly at a partial record header at the end of a file (a cut-off copy
    whose cut fell just after a record). Raises UnreadableRecordError when the file holds more bytes
    than the complete records read."""
    try:
        size = _uncompressed_size(path) if compression else tf.io.gfile.stat(path).length
    except (OSError, EOFError) as error:  # gzip.BadGzipFile is an OSError
        raise UnreadableRecordError(BadRecord(path, records_read, f"unreadable ({error})")) from None
    if size != consumed:
        raise UnreadableRecordError(BadRecord(
            path, records_read, f"truncated: {size - consumed} byte(s) after the last complete record"))


def _uncompressed_size(path: str) -> int:
    with tf.io.gfile.GFile(path, "rb") as raw, gzip.GzipFile(fileobj=raw) as handle:
        size = 0
        while chunk := handle.read(1 << 20):
            size += len(chunk)
        return size


def _first_unreadable(path: str, compression: str, start: int) -> int:
    index = start
    try:
        for _ in record_dataset(path, compression).skip(start):
            index += 1
    except tf.errors.OpError:
        return index
    return index


def _short(error: Exception) -> str:
    text = getattr(error, "message", None) or str(error)
    return text.strip().splitlines()[0][:200]


def check_example(record: bytes) -> str | None:
    """Input: one serialized record. Output: None when it is a tf.Example with features, else why not.

    Strict: bytes that protobuf would accept but that carry fields a tf.Example does not have
    (a SequenceExample's feature_lists, for example) are rejected, and so is an Example with no features.
    """
    example = tf.train.Example()
    try:
        example.ParseFromString(record)
    except proto_message.DecodeError as error:
        return f"not a tf.Example ({error or 'protobuf decode error'})"
    if _has_unknown_fields(example):
        return "not a tf.Example (fields a tf.Example does not have)"
    if not example.features.feature:
        return "tf.Example with no features"
    return None


def _has_unknown_fields(example: tf.train.Example) -> bool:
    if len(unknown_fields.UnknownFieldSet(example)) or len(unknown_fields.UnknownFieldSet(example.features)):
        return True
    return any(len(unknown_fields.UnknownFieldSet(feature)) for feature in example.features.feature.values())


def split_of(record: bytes, eval_fraction: float, leave_out: Iterable[str] = ()) -> str:
    """Input: a serialized record, the eval fraction and the features the hash leaves out (the label's
    sources). Output: 'train' or 'eval', by a hash of its other features (components.core.record_keys).

    Deterministic across runs and machines; records that differ only in what is left out land in the same split.
    """
    bucket = int.from_bytes(features_digest(record, leave_out), "big") % SPLIT_BUCKETS
    return "eval" if bucket < round(eval_fraction * SPLIT_BUCKETS) else "train"
