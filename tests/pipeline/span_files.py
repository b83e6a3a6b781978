"""Test helpers shared by the DAG tests: read and write spans of tf.Examples, count a step's outputs."""
import os

import tensorflow as tf


def read_span(span_dir: str) -> list[tf.train.Example]:
    """The tf.Examples of a span's gzip shards, in file order."""
    files = sorted(tf.io.gfile.glob(os.path.join(span_dir, "*.gz")))
    return [tf.train.Example.FromString(r) for r in
            tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()]


def write_records(path, records, compression=None) -> str:
    """Writes tf.Examples (or raw bytes) as one TFRecord file, creating its folder. Output: the path."""
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with tf.io.TFRecordWriter(str(path), options=compression) as writer:
        for record in records:
            writer.write(record if isinstance(record, bytes) else record.SerializeToString())
    return str(path)


def count_outputs(config, node: str, key: str) -> int:
    """How many output folders a step has written under `key` in the config's pipeline root."""
    return len(tf.io.gfile.glob(os.path.join(config.pipeline_root, node, key, "*")))


def private_copy(span_root: str, folder) -> str:
    """A copy of `span_root`'s span-1 in `folder` (a test that adds spans must not change the shared one).
    Output: the copy's data root."""
    import shutil

    shutil.copytree(os.path.join(span_root, "span-1"), os.path.join(str(folder), "span-1"))
    return str(folder)
