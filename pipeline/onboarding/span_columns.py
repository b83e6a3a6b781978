"""What `init` reads of a user's data: the latest span under the data root, read as ingestion reads it (every
record must be a tf.Example), in batches and in bounded memory. Per column: its kind, how often it is present,
whether a record holds several values, its distinct values (at most EXACT_DISTINCT kept, beyond them a KMV
sketch), an integer's range; and a uniform sample of STATISTICS_ROWS records for TFDV. Records without a value
for the label are counted and left out. Bad data raises InitError naming the file and record.
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from pipeline.onboarding.type_inference import PLAUSIBLE_SECONDS

EXACT_DISTINCT = 10_000  # distinct values kept per column; beyond, their number is estimated
SKETCH_SIZE = 4096  # hashes kept per column for that estimate (about 2% error)
DECODE_BATCH = 4096  # records decoded at once
STATISTICS_ROWS = 25_000  # the schema is inferred from TFDV statistics of a uniform sample of this many records


class InitError(ValueError):
    """The data or the arguments cannot make a project; the message names the column, file or folder."""


class DistinctCounter:
    """How many distinct values a column holds, in bounded memory: exact up to EXACT_DISTINCT values (they
    are kept, so a label's classes are known), estimated beyond (the K smallest of their 64-bit hashes: a
    KMV sketch, within a few percent)."""

    def __init__(self):
        self.values: set | None = set()  # None once there are more than EXACT_DISTINCT
        self.smallest = np.zeros(0, np.uint64)

    def add(self, values: np.ndarray) -> None:
        import pandas as pd

        if not len(values):
            return
        if self.values is not None:
            self.values.update(np.unique(values).tolist())
            if len(self.values) > EXACT_DISTINCT:
                self.values = None
        hashes = np.unique(pd.util.hash_array(values))
        self.smallest = np.unique(np.concatenate([self.smallest, hashes[:SKETCH_SIZE]]))[:SKETCH_SIZE]

    @property
    def count(self) -> int:
        if self.values is not None:
            return len(self.values)
        return int((SKETCH_SIZE - 1) / (float(self.smallest[-1]) / 2.0 ** 64))


@dataclasses.dataclass
class Column:
    """One feature across the span's records: its kind, how often it is present, its distinct values."""
    name: str
    kind: str  # int | float | string
    present: int = 0  # records that hold a value
    multi_valued: bool = False
    distinct_values: DistinctCounter = dataclasses.field(default_factory=DistinctCounter)
    is_date: bool = False  # int64 seconds since the epoch (prepare-data wrote a date column)
    int_range: tuple[int, int] | None = None  # an integer column's least and greatest value
    whole: bool = True  # every value a whole number (a float column of ids written 1.0, 2.0, ... by pandas)

    @property
    def looks_like_seconds(self) -> bool:
        """An integer column whose values all lie in 1990..2040 as Unix seconds, and differ: maybe times."""
        low, high = self.int_range or (0, 0)
        return (self.kind == "int" and not self.is_date and PLAUSIBLE_SECONDS[0] <= low < high <= PLAUSIBLE_SECONDS[1]
                and self.distinct > 2)

    @property
    def distinct(self) -> int:
        return self.distinct_values.count

    def sorted_values(self) -> list:
        """The distinct values (only while they are few enough to be known exactly), numbers before text."""
        return sorted(self.distinct_values.values or (), key=lambda value: (isinstance(value, str), value))


KINDS = {"int64": "int", "float": "float", "large_binary": "string", "binary": "string"}  # decoded value types


@dataclasses.dataclass
class SpanReading:
    """What read_columns saw of the latest span: the columns of the records kept, how many were kept, a uniform
    sample of them, how many were left out for lacking the label, and every column name any record holds."""
    columns: dict[str, Column]
    records: int
    sample: list[bytes]
    unlabelled: int = 0
    names: set[str] = dataclasses.field(default_factory=set)
    span_dir: str = ""


def read_columns(data_root: str, label: str | None = None) -> SpanReading:
    """The latest span under `data_root`, read as ingestion reads it, a batch of records at a time. With a
    `label`, the records without a value for it are counted and left out of everything else (when no record
    holds the label, none is left out: check_label names the missing column). Output: the columns, the records
    kept, a uniform sample of at most STATISTICS_ROWS of them (serialized; the same for the same data), the
    records left out. InitError naming the folder, or the file and record that is no tf.Example with
    features."""
    import random
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    from components.tfrecord_ingest.tfrecord_files import iter_records
    from components.tfrecord_ingest.spans import IngestionError, list_record_files, resolve_spans
    reading = SpanReading({}, 0, [])
    chooser = random.Random(0)

    def note(batch: list[bytes], path: str, first: int) -> None:
        kept = _note_batch(reading, decoder, batch, path, first, label)
        for record in (record for record, keep in zip(batch, kept) if keep):
            reading.records += 1
            if len(reading.sample) < STATISTICS_ROWS:  # a reservoir: every record kept with the same chance
                reading.sample.append(record)
            elif (slot := chooser.randrange(reading.records)) < STATISTICS_ROWS:
                reading.sample[slot] = record

    try:
        (_, span_dir), = resolve_spans(data_root, 1)
        reading.span_dir = span_dir
        files = list_record_files(span_dir)
        decoder = ExamplesToRecordBatchDecoder()
        for path in files:
            batch: list[bytes] = []
            first = 0
            for index, record in iter_records(path):
                if not batch:
                    first = index
                batch.append(record)
                if len(batch) == DECODE_BATCH:
                    note(batch, path, first)
                    batch = []
            if batch:
                note(batch, path, first)
    except IngestionError as error:
        raise InitError(str(error)) from None
    if label is not None and label not in reading.names:
        reading.records, reading.unlabelled = reading.records + reading.unlabelled, 0
    if not reading.records and not reading.unlabelled:
        raise InitError(f"{data_root}: no records")
    for name, kind in _date_columns(data_root).items():
        if name in reading.columns and reading.columns[name].kind == "int":
            reading.columns[name].is_date = kind == "date"
    return reading


def _note_batch(reading: SpanReading, decoder, batch: list[bytes], path: str, first_index: int,
                label: str | None = None) -> np.ndarray:
    """Adds one batch of serialized records to `reading.columns`: those that hold `label` (every record when
    None, or when no record seen so far holds it). Output: which records were kept. InitError naming the file
    and record for a record that is no tf.Example, or one with no features."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from components.tfrecord_ingest.tfrecord_files import check_example
    try:
        decoded = decoder.DecodeBatch(batch)
    except RuntimeError:
        decoded = None
    if decoded is None or decoded.num_columns == 0:
        for offset, record in enumerate(batch):
            problem = check_example(record)
            if problem:
                raise InitError(f"{path}: record {first_index + offset}: {problem}")
    lengths = {name: pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
               for name, values in zip(decoded.schema.names, decoded.columns)}
    any_present = np.logical_or.reduce([length > 0 for length in lengths.values()])
    if not any_present.all():
        offset = int(np.argmin(any_present))
        raise InitError(f"{path}: record {first_index + offset}: tf.Example with no features")
    reading.names |= {name for name, length in lengths.items() if (length > 0).any()}
    keep = np.ones(decoded.num_rows, bool)
    if label is not None:
        keep = lengths[label] > 0 if label in lengths else np.zeros(decoded.num_rows, bool)
        reading.unlabelled += int((~keep).sum())
        if not keep.all():
            decoded = decoded.filter(pa.array(keep))
    for name, values in zip(decoded.schema.names, decoded.columns):
        lengths = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
        held = lengths > 0
        kind = KINDS.get(str(values.type.value_type), "string")
        column = reading.columns.setdefault(name, Column(name, kind))
        column.present += int(held.sum())
        column.multi_valued |= bool((lengths > 1).any())
        first = pc.list_element(pc.filter(values, held), 0) if held.any() else None
        if first is not None:
            first = first.to_numpy(zero_copy_only=False)
            if kind == "string":
                first = np.array([value.decode("utf-8", "replace") for value in first], dtype=object)
            elif kind == "float":
                column.whole &= bool(np.all(np.isfinite(first) & (np.floor(first) == first)))
            elif kind == "int":
                low, high = int(first.min()), int(first.max())
                column.int_range = (min(low, column.int_range[0]), max(high, column.int_range[1])) \
                    if column.int_range else (low, high)
            column.distinct_values.add(first)
    return keep


def _date_columns(data_root: str) -> dict[str, str]:
    """Column -> type, as prepare-data --csv recorded them for the data root ({} for other data)."""
    from tfx.dsl.io import fileio

    from pipeline.onboarding.column_record import COLUMNS_FILE
    path = os.path.join(data_root, COLUMNS_FILE)
    if not fileio.exists(path):
        return {}
    with fileio.open(path) as handle:
        return json.loads(handle.read()).get("types", {})
