"""A data root's spans, the data files in each, and their fingerprint, through components.core.path_operations: a
local data root is found and fingerprinted without loading TensorFlow (the command line decides "nothing
new" before any heavy import).
"""
from __future__ import annotations

import hashlib
import os

from components.core.path_operations import file_system

SPAN_PREFIX = "span-"
EDGE_BYTES = 64 * 1024  # fingerprint_spans reads this much from the start and from the end of each file


class IngestionError(ValueError):
    """Bad input: the message names the file (and record index when there is one)."""


class MissingInputError(IngestionError):
    """No data to read: the data root or a span folder does not exist, or holds no file. Found before any
    step runs (the pipeline fingerprints its input when it is built)."""


def list_record_files(input_dir: str) -> list[str]:
    """Input: a directory. Output: its data files, sorted by name (hidden files and subdirectories skipped)."""
    files = file_system(input_dir)
    if not files.isdir(input_dir):
        raise MissingInputError(f"{input_dir}: input directory does not exist")
    found = sorted(os.path.join(input_dir, name) for name in files.listdir(input_dir)
                   if not name.startswith((".", "_")) and not files.isdir(os.path.join(input_dir, name)))
    if not found:
        raise MissingInputError(f"{input_dir}: no TFRecord files in the input directory")
    return found


def resolve_spans(data_root: str, window: int = 1) -> list[tuple[int, str]]:
    """Input: a data root and how many of its latest spans to read. Output: [(span number, directory)] of
    the last `window` `span-N` folders, oldest first.

    A root without span folders is read as a single span 0.
    """
    files = file_system(data_root)
    if not files.isdir(data_root):
        raise MissingInputError(f"{data_root}: input directory does not exist")
    if window < 1:
        raise IngestionError(f"{data_root}: span window must be at least 1, got {window}")
    spans = []
    for name in files.listdir(data_root):
        name = name.rstrip("/")
        number = name[len(SPAN_PREFIX):]
        if name.startswith(SPAN_PREFIX) and number.isdigit():
            spans.append((int(number), os.path.join(data_root, name)))
    return sorted(spans)[-window:] if spans else [(0, data_root)]


def fingerprint_spans(spans: list[tuple[int, str]]) -> str:
    """Input: (span, directory) pairs. Output: a digest of the span numbers and, per file, its name, size,
    mtime and a SHA-256 of its first and last EDGE_BYTES (64 KiB): new or changed data changes it.

    The content digest catches a file rewritten in place with the same size within the mtime granularity
    (whole seconds for local files), or with its mtime restored. A gzip file's last bytes hold the CRC-32 of
    everything in it, so any change to a gzip shard is seen; a plain TFRecord file changed only in its
    middle, to the same size, with the same mtime, is not. Costs at most 128 KiB read per file.

    The pipeline passes it to ingestion as an execution property (so new data invalidates the cache) and
    ingestion records it on the Examples it writes (so later runs can tell which models saw which data).
    """
    digest = hashlib.sha256()
    for span, span_dir in spans:
        digest.update(f"span={span}".encode())
        files = file_system(span_dir)
        for path in list_record_files(span_dir):
            size = files.size(path)
            digest.update(f"{os.path.basename(path)}:{size}:{files.mtime_nsec(path)}:"
                          f"{_edges_digest(files, path, size)}".encode())
    return digest.hexdigest()[:16]


def _edges_digest(files, path: str, size: int) -> str:
    """SHA-256 of a file's first EDGE_BYTES and (when longer) its last EDGE_BYTES."""
    digest = hashlib.sha256()
    with files.open(path, "rb") as handle:
        digest.update(handle.read(EDGE_BYTES))
        if size > EDGE_BYTES:
            handle.seek(max(EDGE_BYTES, size - EDGE_BYTES))
            digest.update(handle.read(EDGE_BYTES))
    return digest.hexdigest()


def fingerprint_input(data_root: str, window: int = 1) -> str:
    """Input: a data root and span window. Output: the fingerprint of the spans ingestion would read now."""
    return fingerprint_spans(resolve_spans(data_root, window))
