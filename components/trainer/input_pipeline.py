"""tf.data input pipeline for TFRecord tf.Examples: interleave, shuffle, batch-then-parse, prefetch."""
from __future__ import annotations

import tensorflow as tf


def make_dataset(file_patterns: list[str], feature_spec: dict[str, tf.io.FixedLenFeature], batch_size: int,
                 label_fn=None, input_names=None, shuffle_buffer: int = 0, repeat: bool = False,
                 seed: int | None = None) -> tf.data.Dataset:
    """Input: TFRecord file patterns (gzip when named *.gz) and a feature spec.

    Output: batches of parsed features dict, or (features, label) when `label_fn` maps parsed features to
    labels; then only `input_names` are kept in the features (label-only inputs are dropped).
    """
    files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {file_patterns}")
    compression = "GZIP" if all(f.endswith(".gz") for f in files) else ""
    dataset = tf.data.Dataset.from_tensor_slices(files)
    dataset = dataset.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression),
        cycle_length=min(len(files), 4), num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle_buffer)
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=False)
    dataset = dataset.map(lambda serialized: tf.io.parse_example(serialized, feature_spec),
                          num_parallel_calls=tf.data.AUTOTUNE)
    if label_fn is not None:
        keep = list(input_names or feature_spec)
        dataset = dataset.map(lambda features: ({name: features[name] for name in keep}, label_fn(features)),
                              num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)
