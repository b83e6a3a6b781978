"""Fuzzing the ingestion record checker with hypothesis, for a bounded number of inputs.

Whatever the bytes, ingestion either reads every record or raises IngestionError naming the file (and the
record index when there is one): no other exception, no crash. In CI (CI set) the inputs are derandomized,
so a failure there reproduces; elsewhere each run explores new inputs. FUZZ_EXAMPLES (default 60) is the
number of files each ingestion test tries; `make test-fast` tries fewer.
"""
import gzip
import os
import tempfile

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings, strategies as st

from components.tfrecord_ingest import executor, tfrecord_files

FUZZ = settings(deadline=None, database=None, derandomize=bool(os.environ.get("CI")),
                suppress_health_check=[HealthCheck.too_slow])
FILES_PER_TEST = int(os.environ.get("FUZZ_EXAMPLES", "60"))  # each one is a whole ingestion run


def _example(fare: float) -> bytes:
    example = tf.train.Example()
    example.features.feature["fare"].float_list.value.append(fare)
    return example.SerializeToString()


def _ingest_bytes(content: bytes):
    """Writes `content` as the only file of a data directory and ingests it. Output: the report or the error."""
    with tempfile.TemporaryDirectory() as folder:
        os.makedirs(os.path.join(folder, "in"))
        with open(os.path.join(folder, "in", "fuzzed.tfrecord"), "wb") as handle:
            handle.write(content)
        try:
            return executor.ingest([os.path.join(folder, "in")], os.path.join(folder, "out"), 0.3)
        except tfrecord_files.IngestionError as error:
            assert "fuzzed.tfrecord" in str(error), error
            return error


def _framed(payloads: list[bytes], compression: str | None = None) -> bytes:
    """TFRecord framing (lengths and CRCs) around each payload, as TFRecordWriter writes it."""
    with tempfile.TemporaryDirectory() as folder:  # a name of our own: mktemp's could be taken before the write
        path = os.path.join(folder, "framed.tfrecord")
        with tf.io.TFRecordWriter(path, options=compression) as writer:
            for payload in payloads:
                writer.write(payload)
        with open(path, "rb") as handle:
            return handle.read()


@FUZZ
@given(st.binary(max_size=300))
def test_check_example_returns_a_reason_or_none_for_any_bytes(record):
    reason = tfrecord_files.check_example(record)
    assert reason is None or reason.startswith(("not a tf.Example", "tf.Example with no features"))


@FUZZ.__class__(FUZZ, max_examples=FILES_PER_TEST)
@given(st.binary(max_size=400))
@pytest.mark.slow
def test_random_files_are_read_or_rejected_with_the_file_named(content):
    _ingest_bytes(content)


@FUZZ.__class__(FUZZ, max_examples=FILES_PER_TEST)
@given(st.lists(st.binary(max_size=80), min_size=1, max_size=8), st.booleans())
@pytest.mark.slow
def test_well_framed_random_payloads_are_checked_record_by_record(payloads, zipped):
    result = _ingest_bytes(_framed(payloads, "GZIP" if zipped else None))
    if isinstance(result, tfrecord_files.IngestionError):
        assert "fuzzed.tfrecord: record " in str(result)
    else:  # every payload happened to be a tf.Example with features
        assert sum(result["counts"].values()) == len(payloads)


@FUZZ.__class__(FUZZ, max_examples=FILES_PER_TEST)
@given(st.data())
@pytest.mark.slow
def test_damaged_valid_files_name_the_file(data):
    zipped = data.draw(st.booleans())
    payloads = [_example(float(i)) for i in range(20)]
    content = bytearray(_framed(payloads, "GZIP" if zipped else None))
    truncated = data.draw(st.booleans())
    if truncated:
        content = content[: data.draw(st.integers(0, len(content) - 1))]
    else:
        for position in data.draw(st.lists(st.integers(0, len(content) - 1), min_size=1, max_size=4)):
            content[position] ^= data.draw(st.integers(1, 255))  # flipped bits
    result = _ingest_bytes(bytes(content))
    if isinstance(result, tfrecord_files.IngestionError):
        return
    read = sum(result["counts"].values())
    if truncated:
        # The one cut no reader can see: a plain file cut exactly between two records is a shorter valid file.
        assert not zipped and len(content) == sum(12 + len(p) + 4 for p in payloads[:read]), (len(content), read)
    else:
        assert read == 20  # a flip that left the file valid (a gzip header byte, say) lost nothing


def test_gzip_helper_is_the_real_format():
    """Guards the helper above: its gzip output is what the gzip module reads back."""
    assert gzip.decompress(_framed([b"x"], "GZIP")) == _framed([b"x"])
