"""Config loading rules and the TFRecord record contract of the bundled taxi data."""
import csv

import pytest
import tensorflow as tf

from pipeline.config import ConfigError, load_config
from pipeline.data import bundled_taxi_csv, row_to_example, write_taxi_span


def test_yaml_overrides_nested_sections_and_keeps_other_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("output_dir: /tmp/x\ntrain:\n  epochs: 2\n  learning_rate: 1\n")
    config = load_config(str(path), data_root="/data")
    assert (config.output_dir, config.data_root, config.train.epochs) == ("/tmp/x", "/data", 2)
    assert config.train.learning_rate == 1.0 and config.train.batch_size == 256
    assert config.push_dir == "/tmp/x/serving"


@pytest.mark.parametrize("text, key", [
    ("trainer:\n  epochs: 2\n", "trainer"),
    ("train:\n  epoch: 2\n", "train.epoch"),
    ("train:\n  batch_size: -8\n", "train.batch_size"),
    ("train:\n  batch_size: '256'\n", "train.batch_size"),
    ("evaluate:\n  min_auc: 1.5\n", "evaluate.min_auc"),
    ("ingest:\n  eval_fraction: 0\n", "ingest.eval_fraction"),
    ("enable_cache: 'yes'\n", "enable_cache"),
])
def test_bad_config_is_rejected_naming_the_key(tmp_path, text, key):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(str(path))


def test_record_contract_types_and_absent_cells():
    with open(bundled_taxi_csv(), newline="") as handle:
        row = next(csv.DictReader(handle))
    example = row_to_example(row)
    features = example.features.feature
    assert set(features) == {column for column, cell in row.items() if cell != ""}
    assert features["fare"].float_list.value[0] == pytest.approx(float(row["fare"]))
    assert features["trip_start_hour"].int64_list.value[0] == int(row["trip_start_hour"])
    assert features["payment_type"].bytes_list.value[0] == row["payment_type"].encode()
    assert row["pickup_latitude"] == "" and "pickup_latitude" not in features  # empty cell: absent feature
    assert "big_tipper" not in features  # the label is derived, never stored


def test_span_layout_holds_every_row_once(tmp_path):
    span_dir, rows = write_taxi_span(str(tmp_path), span=3, max_rows=101, num_shards=3)
    assert span_dir.endswith("span-3") and rows == 101
    files = sorted(tf.io.gfile.glob(f"{span_dir}/*"))
    assert [f.rsplit("/", 1)[1] for f in files] == [f"data-0000{i}-of-00003.tfrecord.gz" for i in range(3)]
    assert sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP")) == 101
