"""tf.data options every dataset the pipeline iterates gets."""
from __future__ import annotations

import tensorflow as tf


def without_autotuning(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Input: any dataset. Output: the same elements, with tf.data's background autotuning turned off.

    Why: with TensorFlow 2.16, an iterator whose autotuning thread is asleep is not deleted until that thread
    wakes, and the thread's sleeps double (10 ms, 20 ms, 40 ms ...), so ending an iteration (the end of
    Keras's fit, every validation pass) could take as long again as the iteration itself. Without
    autotuning, maps given tf.data.AUTOTUNE keep the parallelism autotuning starts from (the host's cores, at
    most 16) and prefetch(AUTOTUNE) grows its buffer when the consumer waits (bench/trainer_throughput.py
    measures the host's rate). Not covered: on GPUs, the per-device datasets a tf.distribute strategy builds
    around this one (Keras iterates through them) have options of their own, with autotuning on; on one CPU
    the Trainer uses TensorFlow's default strategy, which iterates this dataset itself."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def record_dataset(files, compression: str, **kwargs) -> tf.data.Dataset:
    """Input: TFRecord file(s), their compression ("GZIP" or ""), TFRecordDataset's other arguments. Output:
    their records, without autotuning (the datasets built on it, batches, maps, filters, carry that on)."""
    return without_autotuning(tf.data.TFRecordDataset(files, compression_type=compression, **kwargs))
