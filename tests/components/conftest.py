"""Fixtures shared by the component tests."""
import os

import pytest
import tensorflow as tf


@pytest.fixture(scope="module")
def files(taxi_span_root):
    """The 3,000-row span: one shard for training, the other for evaluation."""
    shards = sorted(tf.io.gfile.glob(os.path.join(taxi_span_root, "span-1", "*.gz")))
    return {"train_files": [shards[0]], "eval_files": [shards[1]]}
