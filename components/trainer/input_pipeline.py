"""tf.data input pipeline for TFRecord tf.Examples: interleave, cache, shuffle, batch-then-parse, preprocess,
prefetch. Everything here runs on the host CPU while the device trains on the previous batches.
"""
from __future__ import annotations

import tensorflow as tf

GZIP_EXPANSION = 5  # a gzip'd tf.Example file takes about this many times its size once read into memory


def list_files(file_patterns: list[str]) -> list[str]:
    """Input: TFRecord file patterns. Output: the sorted files they match; FileNotFoundError if none."""
    files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {file_patterns}")
    return files


def record_compression(files: list[str]) -> str:
    """The compression_type for TFRecordDataset: GZIP when every file is named *.gz (ingestion writes them so)."""
    return "GZIP" if all(f.endswith(".gz") for f in files) else ""



def fits_in_memory(file_patterns: list[str], max_megabytes: int) -> bool:
    """Output: True when the serialized records of these files should take at most `max_megabytes` of RAM."""
    files = list_files(file_patterns)
    size = sum(tf.io.gfile.stat(f).length for f in files)
    if record_compression(files):
        size *= GZIP_EXPANSION
    return size <= max_megabytes * 2**20


def make_dataset(file_patterns: list[str], feature_spec: dict[str, tf.io.FixedLenFeature], batch_size: int,
                 label_fn=None, input_names=None, preprocess=None, shuffle_buffer: int = 0, repeat: bool = False,
                 cache: bool = False, seed: int | None = None, shard_by_data: bool = False) -> tf.data.Dataset:
    """Input: TFRecord file patterns (gzip when named *.gz) and a feature spec.

    Output: batches of parsed features (dict), or (features, label) when `label_fn` maps parsed features to
    labels; then only `input_names` are kept in the features and `preprocess` (a Keras model or function
    on a features dict) is applied to them. With `shuffle_buffer` the order is shuffled and not
    deterministic (faster); `cache` keeps the serialized records in memory after the first pass;
    `shard_by_data` makes multi-worker training split records, not files, between workers.
    """
    files = list_files(file_patterns)
    compression = record_compression(files)
    dataset = tf.data.Dataset.from_tensor_slices(files)
    dataset = dataset.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression),
        cycle_length=min(len(files), 4), num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle_buffer)
    if cache:
        dataset = dataset.cache()
    if shuffle_buffer:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=False)
    dataset = dataset.map(lambda serialized: tf.io.parse_example(serialized, feature_spec),
                          num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle_buffer)
    if label_fn is not None:
        keep = list(input_names or feature_spec)
        transform = preprocess or (lambda features: features)
        dataset = dataset.map(
            lambda features: (transform({name: features[name] for name in keep}), label_fn(features)),
            num_parallel_calls=tf.data.AUTOTUNE, deterministic=not shuffle_buffer)
    options = tf.data.Options()
    options.deterministic = not shuffle_buffer
    if shard_by_data:
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options).prefetch(tf.data.AUTOTUNE)
