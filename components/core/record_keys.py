"""What the eval split, the folds and the validation holdout hash a record by: its features, the label's left out.

Records that differ only in their label must land on the same side of a split. Hashed with the label, the
copies of a repeated feature vector would be dealt by label: on a table where many rows share their feature
cells (a few coarse columns), the eval split would then hold, for such a vector, only labels the training
split never showed with it, and every score on it would be inverted (an AUC far below 0.5). Hashing the
features alone keeps a repeated vector, whatever its labels, in one split, one fold and one side of the
holdout. The hash does not depend on the order in which a record lists its features.

`leave_out` names the features left out (the label's sources: what the label is read from and the model
does not read); with none left out a record is hashed by its bytes.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

import tensorflow as tf

ENTRY_BUCKETS = 1 << 62  # each feature's hash before they are summed (int64 sums wrap, order-free)


def features_digest(record: bytes, leave_out: Iterable[str] = ()) -> bytes:
    """Input: a serialized tf.Example and the features to leave out. Output: an 8-byte digest of its other
    features (names and values, in name order); of its bytes when nothing is left out."""
    leave_out = frozenset(leave_out)
    if not leave_out:
        return hashlib.blake2b(record, digest_size=8).digest()
    example = tf.train.Example.FromString(record)
    digest = hashlib.blake2b(digest_size=8)
    for name in sorted(example.features.feature):
        if name not in leave_out:
            value = example.features.feature[name].SerializeToString(deterministic=True)
            digest.update(len(name).to_bytes(4, "big") + name.encode() + len(value).to_bytes(4, "big") + value)
    return digest.digest()


def features_bucket(records: tf.Tensor, buckets: int, key: list[int], leave_out: Iterable[str] = ()) -> tf.Tensor:
    """Input: serialized tf.Examples (any shape), a bucket count, a hash key and the features to leave out.
    Output: each record's bucket, int64 in [0, buckets): a keyed hash of its other features (of its bytes
    when nothing is left out), the same on every pass, worker and run."""
    leave_out = sorted(set(leave_out))
    if not leave_out:
        return tf.strings.to_hash_bucket_strong(records, buckets, key)
    flat = tf.reshape(records, [-1])
    _, (features,) = tf.io.decode_proto(flat, "tensorflow.Example", ["features"], [tf.string])
    _, (entries,) = tf.io.decode_proto(tf.reshape(features, [-1]), "tensorflow.Features", ["feature"],
                                       [tf.string])  # [N, most features], "" past a record's own
    kept = tf.not_equal(entries, "")
    for name in leave_out:  # a map entry starts with its key: tag 1, the key's length, the key
        prefix = b"\n" + protobuf_varint(len(name.encode())) + name.encode()
        kept &= tf.not_equal(tf.strings.substr(entries, 0, len(prefix)), prefix)
    hashed = tf.strings.to_hash_bucket_strong(entries, ENTRY_BUCKETS, key)
    summed = tf.reduce_sum(tf.where(kept, hashed, tf.zeros_like(hashed)), axis=-1)
    bucket = tf.strings.to_hash_bucket_strong(tf.strings.as_string(summed), buckets, key)
    return tf.reshape(bucket, tf.shape(records))


def protobuf_varint(value: int) -> bytes:
    """Protobuf's base-128 varint of a non-negative int."""
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        out.append(byte | (0x80 if value else 0))
        if not value:
            return bytes(out)
