"""Pure helpers for TFRecord ingestion: find files, detect compression, check records, split.

Nothing here depends on TFX, so each piece is testable on its own.
"""
from __future__ import annotations

import gzip
import hashlib
import os
from dataclasses import dataclass
from typing import Iterator

import tensorflow as tf
from google.protobuf import message as proto_message
from google.protobuf import unknown_fields

GZIP_MAGIC = b"\x1f\x8b"
RECORD_FRAMING_BYTES = 16  # per record: 8-byte length, 4-byte length CRC, payload, 4-byte payload CRC
SPLIT_BUCKETS = 10_000


class IngestionError(ValueError):
    """Bad input: the message names the file (and record index when there is one)."""


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


def list_record_files(input_dir: str) -> list[str]:
    """Input: a directory. Output: its data files, sorted by name (hidden files and subdirectories skipped)."""
    if not tf.io.gfile.isdir(input_dir):
        raise IngestionError(f"{input_dir}: input directory does not exist")
    files = sorted(
        os.path.join(input_dir, name)
        for name in tf.io.gfile.listdir(input_dir)
        if not name.startswith((".", "_")) and not tf.io.gfile.isdir(os.path.join(input_dir, name))
    )
    if not files:
        raise IngestionError(f"{input_dir}: no TFRecord files in the input directory")
    return files


def detect_compression(path: str) -> str:
    """Input: a TFRecord file. Output: 'GZIP' when it starts with the gzip magic bytes, else ''."""
    with tf.io.gfile.GFile(path, "rb") as handle:
        return "GZIP" if handle.read(2) == GZIP_MAGIC else ""


def iter_records(path: str) -> Iterator[tuple[int, bytes]]:
    """Input: a TFRecord file (gzip or plain). Output: (index, serialized record) pairs.

    A truncated file or a CRC mismatch raises UnreadableRecordError naming the file and the record index.
    """
    compression = detect_compression(path)
    dataset = tf.data.TFRecordDataset(path, compression_type=compression, buffer_size=1 << 20)
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
        for _ in tf.data.TFRecordDataset(path, compression_type=compression).skip(start):
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


def split_of(record: bytes, eval_fraction: float) -> str:
    """Input: a serialized record and the eval fraction. Output: 'train' or 'eval', by a hash of the bytes.

    Deterministic across runs and machines; identical records always land in the same split.
    """
    bucket = int.from_bytes(hashlib.blake2b(record, digest_size=8).digest(), "big") % SPLIT_BUCKETS
    return "eval" if bucket < round(eval_fraction * SPLIT_BUCKETS) else "train"


SPAN_PREFIX = "span-"


def resolve_spans(data_root: str, window: int = 1) -> list[tuple[int, str]]:
    """Input: a data root and how many of its latest spans to read. Output: [(span number, directory)] of
    the last `window` `span-N` folders, oldest first.

    A root without span folders is read as a single span 0.
    """
    if not tf.io.gfile.isdir(data_root):
        raise IngestionError(f"{data_root}: input directory does not exist")
    if window < 1:
        raise IngestionError(f"{data_root}: span window must be at least 1, got {window}")
    spans = []
    for name in tf.io.gfile.listdir(data_root):
        name = name.rstrip("/")
        number = name[len(SPAN_PREFIX):]
        if name.startswith(SPAN_PREFIX) and number.isdigit():
            spans.append((int(number), os.path.join(data_root, name)))
    return sorted(spans)[-window:] if spans else [(0, data_root)]


EDGE_BYTES = 64 * 1024  # fingerprint_spans reads this much from the start and from the end of each file


def fingerprint_spans(spans: list[tuple[int, str]]) -> str:
    """Input: (span, directory) pairs. Output: a digest of the span numbers and, per file, its name, size,
    mtime and a SHA-256 of its first and last EDGE_BYTES (64 KiB): new or changed data changes it.

    The content digest catches a file rewritten in place with the same size within the mtime granularity
    (tf.io.gfile reports local mtimes in whole seconds), or with its mtime restored. A gzip file's last bytes
    hold the CRC-32 of everything in it, so any change to a gzip shard is seen; a plain TFRecord file changed
    only in its middle, to the same size, with the same mtime, is not. Costs at most 128 KiB read per file.

    The pipeline passes it to ingestion as an execution property (so new data invalidates the cache) and
    ingestion records it on the Examples it writes (so later runs can tell which models saw which data).
    """
    digest = hashlib.sha256()
    for span, span_dir in spans:
        digest.update(f"span={span}".encode())
        for path in list_record_files(span_dir):
            stat = tf.io.gfile.stat(path)
            digest.update(f"{os.path.basename(path)}:{stat.length}:{stat.mtime_nsec}:"
                          f"{_edges_digest(path, stat.length)}".encode())
    return digest.hexdigest()[:16]


def _edges_digest(path: str, size: int) -> str:
    """SHA-256 of a file's first EDGE_BYTES and (when longer) its last EDGE_BYTES, read through tf.io.gfile."""
    digest = hashlib.sha256()
    with tf.io.gfile.GFile(path, "rb") as handle:
        digest.update(handle.read(EDGE_BYTES))
        if size > EDGE_BYTES:
            handle.seek(max(EDGE_BYTES, size - EDGE_BYTES))
            digest.update(handle.read(EDGE_BYTES))
    return digest.hexdigest()


def fingerprint_input(data_root: str, window: int = 1) -> str:
    """Input: a data root and span window. Output: the fingerprint of the spans ingestion would read now."""
    return fingerprint_spans(resolve_spans(data_root, window))
