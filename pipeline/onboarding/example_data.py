"""The example datasets that ship in the tfx wheel, written as TFRecord shards in a span layout.

Taxi (binary "big tipper", and the fare regression): the Chicago-taxi CSV, one tf.Example per CSV row, one
feature per column under the same name, typed as CsvExampleGen infers them for this file; an empty cell is
an absent feature; the label is not stored. Penguins (multi-class): TFX's own penguin TFRecords, as they are.
"""
from __future__ import annotations

import csv
import os

import tensorflow as tf
from tfx.dsl.io import fileio

from components.core.datasets import record_dataset

INT_COLUMNS = frozenset({
    "trip_start_hour", "trip_start_day", "trip_start_month", "trip_start_timestamp", "trip_seconds",
    "pickup_community_area", "dropoff_community_area", "pickup_census_tract", "dropoff_census_tract",
})
FLOAT_COLUMNS = frozenset({
    "fare", "tips", "trip_miles",
    "pickup_latitude", "pickup_longitude", "dropoff_latitude", "dropoff_longitude",
})
BYTES_COLUMNS = frozenset({"payment_type", "company"})


def bundled_taxi_csv() -> str:
    """Output: path of the taxi sample inside the installed tfx package (no network needed)."""
    import tfx.examples.chicago_taxi_pipeline as taxi_example
    return os.path.join(os.path.dirname(taxi_example.__file__), "data", "simple", "data.csv")


def row_to_example(row: dict[str, str]) -> tf.train.Example:
    """Input: one CSV row (column -> cell text). Output: its tf.Example; empty cells are left out."""
    example = tf.train.Example()
    for column, cell in row.items():
        if cell == "":
            continue
        feature = example.features.feature[column]
        if column in INT_COLUMNS:
            feature.int64_list.value.append(int(float(cell)))
        elif column in FLOAT_COLUMNS:
            feature.float_list.value.append(float(cell))
        elif column in BYTES_COLUMNS:
            feature.bytes_list.value.append(cell.encode())
        else:
            raise ValueError(f"column {column!r} is not in the taxi record contract")
    return example


def write_taxi_span(data_root: str, span: int = 1, csv_path: str | None = None, num_shards: int = 4,
                    max_rows: int | None = None, gzip: bool = True, first_row: int = 0) -> tuple[str, int]:
    """Input: a data root and span number; which CSV rows (`first_row`, at most `max_rows`). Output: (span
    directory, rows written).

    Writes `<data_root>/span-<span>/data-0000i-of-0000n.tfrecord[.gz]`, rows dealt round-robin to shards.
    """
    span_dir = os.path.join(data_root, f"span-{span}")
    fileio.makedirs(span_dir)  # data_root may be a URI (gs://, s3://) as well as a local path
    suffix = ".tfrecord.gz" if gzip else ".tfrecord"
    paths = [os.path.join(span_dir, f"data-{i:05d}-of-{num_shards:05d}{suffix}") for i in range(num_shards)]
    options = "GZIP" if gzip else None
    temp_paths = [os.path.join(span_dir, "." + os.path.basename(path) + ".tmp") for path in paths]  # hidden: ingestion skips it
    writers = [tf.io.TFRecordWriter(temp, options=options) for temp in temp_paths]
    rows = 0
    with open(csv_path or bundled_taxi_csv(), newline="") as handle:
        for row_number, row in enumerate(csv.DictReader(handle)):
            if row_number < first_row:
                continue
            if max_rows is not None and rows >= max_rows:
                break
            writers[rows % num_shards].write(row_to_example(row).SerializeToString())
            rows += 1
    for writer, temp, path in zip(writers, temp_paths, paths):
        writer.close()
        fileio.rename(temp, path, overwrite=True)  # a reader never sees a half-written shard (atomic on POSIX)
    return span_dir, rows


EXAMPLES = ("taxi", "penguins")


def bundled_penguin_files() -> list[str]:
    """Output: TFX's penguin TFRecords inside the installed tfx package (both of its splits: ingestion
    splits the span again by its own hash)."""
    import tfx.components as tfx_components
    root = os.path.join(os.path.dirname(tfx_components.__file__), "testdata", "penguin", "data")
    return sorted(fileio.glob(os.path.join(root, "Split-*", "*")))


def write_penguin_span(data_root: str, span: int = 1) -> tuple[str, int]:
    """Input: a data root and span number. Output: (span directory, records written): TFX's penguin records."""
    span_dir = os.path.join(data_root, f"span-{span}")
    fileio.makedirs(span_dir)
    files = bundled_penguin_files()
    records = 0
    for index, source in enumerate(files):
        records += sum(1 for _ in record_dataset(source, "GZIP"))
        target = os.path.join(span_dir, f"data-{index:05d}-of-{len(files):05d}.tfrecord.gz")
        temporary = os.path.join(span_dir, "." + os.path.basename(target) + ".tmp")  # hidden: ingestion skips it
        fileio.copy(source, temporary, overwrite=True)
        fileio.rename(temporary, target, overwrite=True)
    return span_dir, records
