"""TFRecord ingestion: real files (plain, gzip, corrupt, truncated, wrong type) through the real executor."""
import gzip
import json
import os

import pytest
import tensorflow as tf
from tfx.types import artifact_utils, standard_artifacts

from components.core import contract
from components.tfrecord_ingest import executor, spans, tfrecord_files


def _example(i: int) -> tf.train.Example:
    example = tf.train.Example()
    example.features.feature["fare"].float_list.value.append(float(i))
    example.features.feature["payment_type"].bytes_list.value.append(b"Cash" if i % 2 else b"Credit Card")
    return example


def _write(path, serialized_records, gzip_it=False):
    with tf.io.TFRecordWriter(str(path), options="GZIP" if gzip_it else None) as writer:
        for record in serialized_records:
            writer.write(record)
    return str(path)


def _examples(start, count):
    return [_example(i).SerializeToString() for i in range(start, start + count)]


def _read_split(uri, split):
    pattern = os.path.join(uri, f"Split-{split}", "*")
    return [bytes(r) for r in tf.data.TFRecordDataset(tf.io.gfile.glob(pattern), compression_type="GZIP")
            .as_numpy_iterator()]


def test_plain_and_gzip_files_are_detected_read_and_split_without_loss(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    plain = _write(data / "a.tfrecord", _examples(0, 300))
    zipped = _write(data / "b.tfrecord.gz", _examples(300, 300), gzip_it=True)
    assert tfrecord_files.detect_compression(plain) == ""
    assert tfrecord_files.detect_compression(zipped) == "GZIP"

    report = executor.ingest([str(data)], str(tmp_path / "out"), eval_fraction=0.25)

    train, evaluation = _read_split(str(tmp_path / "out"), "train"), _read_split(str(tmp_path / "out"), "eval")
    assert report["counts"] == {"train": len(train), "eval": len(evaluation)}
    assert sorted(train + evaluation) == sorted(_examples(0, 600))  # nothing lost, nothing duplicated
    assert 0.15 < len(evaluation) / 600 < 0.35
    assert report["files"] == {"a.tfrecord": 300, "b.tfrecord.gz": 300}


def test_split_is_deterministic_and_follows_the_record_bytes(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    _write(data / "a.tfrecord", _examples(0, 200))
    executor.ingest([str(data)], str(tmp_path / "first"), 0.3)
    # Same records in another file order and compression: each record lands in the same split.
    (data / "a.tfrecord").unlink()
    _write(data / "z.tfrecord.gz", list(reversed(_examples(0, 200))), gzip_it=True)
    executor.ingest([str(data)], str(tmp_path / "second"), 0.3)
    for split in ("train", "eval"):
        assert sorted(_read_split(str(tmp_path / "first"), split)) == sorted(_read_split(str(tmp_path / "second"), split))


def test_corrupt_record_names_file_and_index(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    path = _write(data / "a.tfrecord", _examples(0, 10))
    raw = bytearray(open(path, "rb").read())
    record_len = len(_examples(0, 10)[0])
    framed = 8 + 4 + record_len + 4
    offset = 3 * framed + 12 + 2  # a payload byte of record 3 (length and CRCs are 16 bytes per record)
    raw[offset] ^= 0xFF
    open(path, "wb").write(bytes(raw))
    with pytest.raises(tfrecord_files.IngestionError, match=r"a\.tfrecord: record 3: unreadable"):
        executor.ingest([str(data)], str(tmp_path / "out"), 0.3)


def test_truncated_gzip_file_names_file_and_index(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    path = _write(data / "a.tfrecord.gz", _examples(0, 50), gzip_it=True)
    plain = gzip.decompress(open(path, "rb").read())
    open(path, "wb").write(gzip.compress(plain[: len(plain) - 7]))  # last record cut short
    with pytest.raises(tfrecord_files.IngestionError, match=r"a\.tfrecord\.gz: record 49: unreadable"):
        executor.ingest([str(data)], str(tmp_path / "out"), 0.3)


def test_record_that_is_not_a_tf_example_is_named(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    sequence = tf.train.SequenceExample()
    sequence.context.feature["fare"].float_list.value.append(1.0)
    sequence.feature_lists.feature_list["x"].feature.add().int64_list.value.append(1)
    good = _examples(0, 5)
    _write(data / "mixed.tfrecord", good[:2] + [sequence.SerializeToString(), b"\xff\xfe not a proto"] + good[2:])
    with pytest.raises(tfrecord_files.IngestionError) as raised:
        executor.ingest([str(data)], str(tmp_path / "out"), 0.3)
    message = str(raised.value)
    assert "mixed.tfrecord: record 2: not a tf.Example" in message
    assert "mixed.tfrecord: record 3: not a tf.Example" in message
    assert "2 bad record(s)" in message


def test_empty_directory_missing_directory_and_empty_file_are_errors(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(tfrecord_files.IngestionError, match="no TFRecord files"):
        executor.ingest([str(tmp_path / "empty")], str(tmp_path / "out"), 0.3)
    with pytest.raises(tfrecord_files.IngestionError, match="does not exist"):
        executor.ingest([str(tmp_path / "nowhere")], str(tmp_path / "out"), 0.3)
    (tmp_path / "with_empty").mkdir()
    _write(tmp_path / "with_empty" / "good.tfrecord", _examples(0, 20))
    (tmp_path / "with_empty" / "zero.tfrecord").write_bytes(b"")
    with pytest.raises(tfrecord_files.IngestionError, match=r"zero\.tfrecord: record 0: empty file"):
        executor.ingest([str(tmp_path / "with_empty")], str(tmp_path / "out"), 0.3)


def test_executor_writes_standard_examples_artifact_with_counts(tmp_path):
    root = tmp_path / "root"
    for span in (1, 2):
        (root / f"span-{span}").mkdir(parents=True)
        _write(root / f"span-{span}" / "part.tfrecord.gz", _examples(span * 1000, 100 * span), gzip_it=True)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "artifact")

    executor.Executor().Do({}, {contract.EXAMPLES: [examples]}, {
        contract.INPUT_BASE: str(root), contract.EVAL_FRACTION: 0.3, contract.INPUT_FINGERPRINT: "x"})

    assert artifact_utils.decode_split_names(examples.split_names) == ["train", "eval"]
    assert examples.span == 2  # the latest span is read
    train = examples.get_int_custom_property("train_examples")
    evaluation = examples.get_int_custom_property("eval_examples")
    assert train + evaluation == 200 and train > evaluation > 0
    assert len(_read_split(examples.uri, "train")) == train
    report = json.load(open(os.path.join(examples.uri, contract.INGEST_REPORT_FILE)))
    assert report["counts"] == {"train": train, "eval": evaluation} and report["span"] == 2
    assert examples.get_string_custom_property(contract.FINGERPRINT_PROPERTY) == spans.fingerprint_input(str(root))


def test_rolling_window_reads_the_last_spans_together(tmp_path):
    root = tmp_path / "root"
    for span, rows in ((1, 50), (2, 70), (3, 90), (10, 110)):  # span 10 sorts after 3 by number, not by name
        (root / f"span-{span}").mkdir(parents=True)
        _write(root / f"span-{span}" / "part.tfrecord", _examples(span * 1000, rows))
    (root / "span-x").mkdir()  # not a span folder: ignored
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "artifact")

    executor.Executor().Do({}, {contract.EXAMPLES: [examples]}, {
        contract.INPUT_BASE: str(root), contract.EVAL_FRACTION: 0.3, contract.INPUT_FINGERPRINT: "x",
        contract.SPAN_WINDOW: 3})

    report = json.load(open(os.path.join(examples.uri, contract.INGEST_REPORT_FILE)))
    assert report["spans"] == [2, 3, 10] and examples.span == 10
    assert sum(report["counts"].values()) == 70 + 90 + 110
    assert sorted(report["files"]) == ["span-10/part.tfrecord", "span-2/part.tfrecord", "span-3/part.tfrecord"]
    assert examples.get_string_custom_property(contract.SPANS_PROPERTY) == "2,3,10"
    assert (examples.get_string_custom_property(contract.FINGERPRINT_PROPERTY)
            == spans.fingerprint_input(str(root), window=3) != spans.fingerprint_input(str(root), window=1))


def test_fingerprint_changes_when_the_data_changes(tmp_path):
    (tmp_path / "span-1").mkdir()
    _write(tmp_path / "span-1" / "a.tfrecord", _examples(0, 5))
    first = spans.fingerprint_input(str(tmp_path))
    assert spans.fingerprint_input(str(tmp_path)) == first
    _write(tmp_path / "span-1" / "b.tfrecord", _examples(5, 5))
    second = spans.fingerprint_input(str(tmp_path))
    assert second != first
    (tmp_path / "span-2").mkdir()
    _write(tmp_path / "span-2" / "a.tfrecord", _examples(0, 5))
    assert spans.fingerprint_input(str(tmp_path)) != second  # a new span is new data


def test_many_bad_records_are_all_counted_but_only_the_first_listed(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    _write(data / "junk.tfrecord", [b"\xff\xff junk %d" % i for i in range(100)])
    with pytest.raises(tfrecord_files.IngestionError) as raised:
        executor.ingest([str(data)], str(tmp_path / "out"), 0.3)
    message = str(raised.value)
    assert message.startswith("100 bad record(s)")
    assert "junk.tfrecord: record 19:" in message and "junk.tfrecord: record 20:" not in message
    assert "... and 80 more" in message


def test_a_cut_just_after_a_record_is_caught_although_tensorflow_reads_on_quietly(tmp_path):
    """Found by the fuzz test: TFRecordDataset ends without an error at a partial header at the end of a file."""
    data = tmp_path / "in"
    data.mkdir()
    path = _write(data / "a.tfrecord", _examples(0, 20))
    whole = open(path, "rb").read()
    cut = sum(len(record) + tfrecord_files.RECORD_FRAMING_BYTES for record in _examples(0, 15)) + 5
    open(path, "wb").write(whole[:cut])
    assert sum(1 for _ in tf.data.TFRecordDataset(path)) == 15  # TensorFlow alone: 15 records, no error
    with pytest.raises(tfrecord_files.IngestionError, match=r"a\.tfrecord: record 15: truncated: 5 byte\(s\) after"):
        executor.ingest([str(data)], str(tmp_path / "out"), 0.3)
