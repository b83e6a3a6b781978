"""The eval split, the folds and the validation holdout hash a record's features, its label left out: a repeated
feature vector lands on one side whatever its labels (real TensorFlow and protobuf, no stand-ins)."""
import numpy as np
import tensorflow as tf

from components.core.packing import fold_of
from components.core.record_keys import features_bucket, features_digest, protobuf_varint
from components.tfrecord_ingest import executor
from components.tfrecord_ingest.tfrecord_files import split_of
from components.trainer.input_pipeline import count_records, in_holdout


def _record(x: float, kind: bytes, label: int, reverse: bool = False, label_name: str = "y") -> bytes:
    """A serialized tf.Example of x, kind and the label; `reverse` lists its features in the other order."""
    features = {"kind": tf.train.Feature(bytes_list=tf.train.BytesList(value=[kind])),
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=[x])),
                label_name: tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
    entries = [tf.train.Features(feature={name: feature}).SerializeToString(deterministic=True)
               for name, feature in sorted(features.items(), reverse=reverse)]  # one map entry each
    body = b"".join(entries)  # a Features message is its entries side by side, in any order
    return b"\n" + protobuf_varint(len(body)) + body


# 40 feature vectors, each written 10 times with labels 0 and 1: a table of coarse, repeated cells
VECTORS = [(float(i % 8), b"k%d" % (i // 8)) for i in range(40)]
RECORDS = [_record(x, kind, copy % 2) for x, kind in VECTORS for copy in range(10)]


def test_a_record_whose_label_differs_hashes_as_its_twin_whatever_order_it_lists_its_features_in():
    one, other, reordered = _record(2.0, b"a", 0), _record(2.0, b"a", 1), _record(2.0, b"a", 1, reverse=True)
    assert tf.train.Example.FromString(reordered) == tf.train.Example.FromString(other) and reordered != other
    assert features_digest(one, ("y",)) == features_digest(other, ("y",)) == features_digest(reordered, ("y",))
    assert features_digest(one) != features_digest(other)  # nothing left out: the bytes
    buckets = features_bucket(tf.constant([one, other, reordered]), 1000, [1, 2], ("y",)).numpy()
    assert len(set(buckets)) == 1
    assert features_bucket(tf.constant([_record(2.0, b"b", 0)]), 1000, [1, 2], ("y",)).numpy()[0] != buckets[0]
    # any shape in, the same shape out
    assert features_bucket(tf.constant([[one, other]]), 1000, [1, 2], ("y",)).shape == (1, 2)


def test_split_folds_and_holdout_keep_each_repeated_vector_on_one_side_and_still_spread_the_vectors():
    splits = [split_of(record, 0.3, ("y",)) for record in RECORDS]
    folds = fold_of(tf.constant(RECORDS), 4, ("y",)).numpy()
    held = in_holdout(tf.constant(RECORDS), 0.3, ("y",)).numpy()
    for vector in range(len(VECTORS)):
        copies = slice(vector * 10, vector * 10 + 10)
        assert len(set(splits[copies])) == len(set(folds[copies])) == len(set(held[copies])) == 1, vector
    per_vector = slice(0, None, 10)
    assert set(splits[per_vector]) == {"train", "eval"} and len(set(folds[per_vector])) == 4
    assert 0 < held[per_vector].sum() < len(VECTORS)
    # with the label hashed too, the copies of a vector were dealt to both splits by their label
    assert any(len({split_of(record, 0.3) for record in RECORDS[v * 10:v * 10 + 10]}) == 2 for v in range(40))


def test_ingestion_and_the_trainers_holdout_count_leave_the_named_features_out(tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    with tf.io.TFRecordWriter(str(data / "part.tfrecord")) as writer:
        for record in RECORDS:
            writer.write(record)
    report = executor.ingest([str(data)], str(tmp_path / "out"), 0.3, leave_out=("y",))
    evaluation = [bytes(r) for r in tf.data.TFRecordDataset(
        tf.io.gfile.glob(str(tmp_path / "out" / "Split-eval" / "*")), compression_type="GZIP").as_numpy_iterator()]
    assert report["counts"]["eval"] == len(evaluation) and len(evaluation) % 10 == 0
    labels = [tf.train.Example.FromString(r).features.feature["y"].int64_list.value[0] for r in evaluation]
    assert np.mean(labels) == 0.5  # every vector in the eval split brought both of its labels
    held = in_holdout(tf.constant(RECORDS), 0.3, ("y",)).numpy()
    assert count_records([str(data / "part.tfrecord")], 0.3, ("y",)) == held.sum()


def test_the_executor_reads_the_features_to_leave_out_whatever_their_names_hold(tmp_path):
    from tfx.types import standard_artifacts

    from components.core import contract

    data = tmp_path / "in"
    data.mkdir()
    named = [_record(x, kind, copy % 2, label_name="y, z") for x, kind in VECTORS for copy in range(10)]
    assert tf.train.Example.FromString(named[0]).features.feature["y, z"].int64_list.value == [0]
    with tf.io.TFRecordWriter(str(data / "part.tfrecord")) as writer:
        for record in named:
            writer.write(record)
    examples = standard_artifacts.Examples()
    examples.uri = str(tmp_path / "artifact")
    executor.Executor().Do({}, {contract.EXAMPLES: [examples]}, {
        contract.INPUT_BASE: str(data), contract.EVAL_FRACTION: 0.3, contract.INPUT_FINGERPRINT: "x",
        contract.SPLIT_LEAVES_OUT: '["y, z"]'})
    assert examples.get_int_custom_property("eval_examples") % 10 == 0  # each vector's ten copies on one side
