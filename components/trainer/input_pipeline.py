"""tf.data input pipeline for TFRecord tf.Examples. Everything here runs on the host CPU while the device
trains on the previous batches.

Two ways to feed a split:
- streamed (`make_dataset` without `cache`): interleave, shuffle the serialized records, batch, parse,
  preprocess, prefetch: the records are parsed and preprocessed again on every pass;
- preprocessed once (`make_dataset(..., cache=True)`): read in file order, batch, parse, preprocess, then
  cache the model-ready tensors (features after preprocessing, and labels; packed into one matrix per dtype),
  in memory or in files (`cache_file`). In memory and repeated or shuffled (training), the whole split is
  read at once into one tensor per dtype (`InMemorySplit`, which the Trainer also cuts its out-of-fold
  validation batches from) and each batch gathered from it by a batch of row numbers
  (`row_batches`: a permutation per pass; repeated, GATHERED_BATCHES batches at a time); otherwise every
  pass after the first reads the cached batches back (from files: unbatched, shuffled among `shuffle_buffer`
  examples, batched again), unpacks and prefetches. `PreprocessedCache` decides, per split, where the cache
  goes from its estimated size (`estimated_bytes`) and removes the cache files when training ends.
"""
from __future__ import annotations

import os
import tempfile
import uuid

import numpy as np
import tensorflow as tf
from absl import logging

from components.core.packing import fold_of
from components.core.record_keys import features_bucket
from components.core.datasets import record_dataset, without_autotuning

MEMORY, DISK = "memory", "disk"  # where a split's preprocessed tensors are cached
AUTO_SHARE_OF_MEMORY = 4  # cache_max_mb 0 (auto): the in-memory cache may take a quarter of the machine's memory
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")  # v2, v1
# Batches fed from memory are gathered and unpacked this many at a time (one map call, then handed out one
# by one): each call's fixed cost, more than a batch's own gather on a CPU, is paid once per this many steps
GATHERED_BATCHES = 16
# A split read into memory raw is preprocessed this many rows per call (InMemorySplit.preprocessed)
PREPROCESS_ROWS = 65_536
# This module's own dataset functions (parsing, packing, gathering rows) are traced as written, not converted by
# autograph (they have no control flow on tensors; converting one costs up to a few tenths of a second, paid by
# every process that trains); the model module's make_label and preprocessing are converted as before.


def list_files(file_patterns: list[str]) -> list[str]:
    """Input: TFRecord file patterns. Output: the sorted files they match; FileNotFoundError if none."""
    files = sorted(f for pattern in file_patterns for f in tf.io.gfile.glob(pattern))
    if not files:
        raise FileNotFoundError(f"no TFRecord files match {file_patterns}")
    return files


def record_compression(files: list[str]) -> str:
    """The compression_type for TFRecordDataset: GZIP when every file is named *.gz (ingestion writes them so)."""
    return "GZIP" if all(f.endswith(".gz") for f in files) else ""


def make_dataset(file_patterns: list[str], feature_spec: dict[str, tf.io.FixedLenFeature], batch_size: int,
                 label_fn=None, input_names=None, preprocess=None, shuffle_buffer: int = 0, repeat: bool = False,
                 cache: bool = False, cache_file: str = "", seed: int | None = None,
                 shard_by_data: bool = False, holdout_share: float = 0.0, holdout: bool = False,
                 folds: int = 0, leave_out: tuple[str, ...] = ()) -> tf.data.Dataset:
    """Input: TFRecord file patterns (gzip when named *.gz) and a feature spec.

    Output: batches of parsed features (dict), or (features, label) when `label_fn` maps parsed features to
    labels; then only `input_names` are kept in the features and `preprocess` (a Keras model or function
    on a features dict) is applied to them. With `shuffle_buffer` the order is shuffled (among that many
    records, or examples from the disk cache, or wholly from the memory cache) and not deterministic
    (faster); `repeat` repeats it without end (batches run across passes). `cache` parses and preprocesses
    the records once, in file order, and keeps the resulting tensors in memory (`cache_file` "": read here
    when training, at the first pass otherwise) or in files named `cache_file`*, read back on every later
    pass: the same examples in every pass as without it, and the same order without shuffling.
    `shard_by_data` makes multi-worker training split elements, not files, between workers (each worker
    builds and caches the whole split, then takes every n-th batch). `holdout_share` > 0 keeps the records of
    the holdout (`holdout` True: in_holdout) or the rest (False). `folds` > 1 (with `label_fn`) adds each
    record's fold (components.core.packing.fold_of) as a third element, (features, label, fold), in the slot
    Keras reads sample weights from, where a fold bag reads it. The holdout's and the folds' hashes leave the
    features `leave_out` names out (the label's sources: components.core.record_keys).
    """
    files = list_files(file_patterns)
    compression = record_compression(files)
    deterministic = cache or not shuffle_buffer  # a cache is filled in file order
    dataset = tf.data.Dataset.from_tensor_slices(files)
    dataset = dataset.interleave(
        lambda path: tf.data.TFRecordDataset(path, compression_type=compression),
        cycle_length=min(len(files), 4), num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if holdout_share:
        dataset = dataset.filter(tf.autograph.experimental.do_not_convert(
            lambda record: tf.equal(in_holdout(record, holdout_share, leave_out), holdout)))
    if not cache:
        if shuffle_buffer:
            dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
        if repeat:
            dataset = dataset.repeat()
    dataset = dataset.batch(batch_size, drop_remainder=False)
    with_folds = folds > 1 and label_fn is not None

    @tf.autograph.experimental.do_not_convert
    def parse(serialized):
        features = tf.io.parse_example(serialized, feature_spec)
        return (features, tf.cast(fold_of(serialized, folds, leave_out), tf.float32)) if with_folds else features

    dataset = dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    in_memory = cache and not cache_file and (shuffle_buffer or repeat)  # fed by batches of row numbers
    # read into memory whole, a split is preprocessed afterwards (InMemorySplit.read), not in a map
    preprocess_after = preprocess if in_memory and label_fn is not None else None
    if label_fn is not None:
        keep = list(input_names or feature_spec)
        transform = (None if preprocess_after else preprocess) or (lambda features: features)

        def model_ready(features, fold=None):
            inputs, label = transform({name: features[name] for name in keep}), label_fn(features)
            return (inputs, label) if fold is None else (inputs, label, fold)

        dataset = dataset.map(model_ready, num_parallel_calls=tf.data.AUTOTUNE, deterministic=deterministic)
    if in_memory:
        return InMemorySplit.read(dataset, preprocess_after).batches(batch_size, shuffle=bool(shuffle_buffer),
                                                                     repeat=repeat, seed=seed,
                                                                     shard_by_data=shard_by_data)
    if cache:
        # Packed: one matrix per dtype, so that a batch is a few tensors, not one per feature (tf.data's cost
        # per example grows with its tensors: 5x faster for the taxi model's 18 when shuffled from the disk cache)
        pack, unpack = _packing(dataset.element_spec)
        dataset = dataset.map(pack, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
        dataset = dataset.cache(cache_file)
        if shuffle_buffer or repeat:  # as without the cache: shuffle examples, batches run across passes
            dataset = dataset.unbatch()
            if shuffle_buffer:
                dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
            if repeat:
                dataset = dataset.repeat()
            dataset = dataset.batch(batch_size, drop_remainder=False)
        dataset = dataset.map(unpack, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return _finish(dataset, shuffle_buffer, shard_by_data)


class InMemorySplit:
    """A split's model-ready tensors read whole into memory: one tensor per dtype (`columns`, rows in file order)
    and `unpack`, which turns rows of them back into the dataset's elements."""

    def __init__(self, columns: tuple[tf.Tensor, ...], unpack):
        self.columns, self.unpack = columns, unpack

    @classmethod
    def read(cls, batches: tf.data.Dataset, preprocess=None) -> "InMemorySplit":
        """Input: a finite dataset of batches, model-ready or (with `preprocess`) raw features first.
        Output: all of it, read here (packed per dtype), its features then preprocessed (preprocessed)."""
        pack, unpack = _packing(batches.element_spec)
        split = cls(read_columns(batches.map(pack, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)), unpack)
        return split.preprocessed(preprocess) if preprocess else split

    def preprocessed(self, preprocess) -> "InMemorySplit":
        """Input: `preprocess`, a function of a batch's features (the first member of each element), called
        here on the host's CPU (where tf.data would run it), PREPROCESS_ROWS rows at a time. Output: the split
        with its features preprocessed, packed again. Calling an already traced tf.function here costs
        milliseconds; the same function inside a tf.data map is instantiated again by every pipeline, a second
        or more for a table's preprocessing."""
        rows = int(self.columns[0].shape[0])
        chunks = []
        with tf.device("/CPU:0"):
            for start in range(0, rows, PREPROCESS_ROWS):
                features, *rest = self.unpack(*(column[start:start + PREPROCESS_ROWS] for column in self.columns))
                chunks.append((preprocess(features), *rest))
            spec = tf.nest.map_structure(lambda leaf: tf.TensorSpec([None, *leaf.shape[1:]], leaf.dtype), chunks[0])
            pack, unpack = _packing(spec)
            columns = _joined([pack(*chunk) for chunk in chunks])
        return InMemorySplit(columns, unpack)

    def batches(self, batch_size: int, shuffle: bool, repeat: bool, seed: int | None,
                shard_by_data: bool = False, cache_file: str | None = None) -> tf.data.Dataset:
        """Batches of `batch_size` rows gathered by row number (row_batches): in file order, or in a
        permutation of their own per pass (`shuffle`); `repeat` without end. With `cache_file` ("": in memory,
        else a file prefix) a cut in file order is kept as the first pass cuts it, and later passes read it: an
        iterator over the cut itself instantiates its functions anew, tens of milliseconds for a table of many
        columns, paid again by every pass of a split validated every interval."""
        columns, unpack = self.columns, self.unpack
        picked = row_batches(int(columns[0].shape[0]), batch_size, shuffle=shuffle, repeat=repeat, seed=seed)

        @tf.autograph.experimental.do_not_convert
        def rows_of(numbers):  # row numbers -> those rows, unpacked
            return unpack(*(tf.gather(column, numbers) for column in columns))

        @tf.autograph.experimental.do_not_convert
        def gathered(group):  # [GATHERED_BATCHES, batch_size] row numbers -> their batches, stacked
            element = rows_of(tf.reshape(group, [-1]))
            return tf.nest.map_structure(lambda leaf: _stacked(leaf, GATHERED_BATCHES, batch_size), element)

        # one map, not parallel: a step is microseconds, less than handing it to another thread costs
        dataset = picked.batch(GATHERED_BATCHES).map(gathered).unbatch() if repeat else picked.map(rows_of)
        if cache_file is not None and not (shuffle or repeat):
            dataset = dataset.cache(cache_file)
        return _finish(dataset, shuffle, shard_by_data)


def _stacked(leaf: tf.Tensor, batches: int, batch_size: int) -> tf.Tensor:
    """A leaf of `batches` batches of `batch_size` rows, [batches * batch_size, ...] -> [batches, batch_size,
    ...] (static where the row shape is)."""
    if leaf.shape[1:].is_fully_defined():
        return tf.reshape(leaf, [batches, batch_size, *leaf.shape[1:].as_list()])
    return tf.reshape(leaf, tf.concat([[batches, batch_size], tf.shape(leaf)[1:]], axis=0))


def _finish(dataset: tf.data.Dataset, shuffle_buffer: int, shard_by_data: bool) -> tf.data.Dataset:
    """The dataset with make_dataset's options (order deterministic unless shuffled, data sharding for
    multi-worker training, tf.data autotuning off), prefetched."""
    options = tf.data.Options()
    options.deterministic = not shuffle_buffer
    if shard_by_data:
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    # No prefetch_to_device: on GPUs Keras hands the dataset to the strategy, whose distributed iterator
    # already copies the next batches to each device; the prefetch below keeps the host side ahead.
    return without_autotuning(dataset.with_options(options)).prefetch(tf.data.AUTOTUNE)


def read_columns(packed_batches: tf.data.Dataset) -> tuple[tf.Tensor, ...]:
    """Input: a finite dataset of packed batches (tuples of tensors, rows first). Output: the whole dataset
    as one tensor per tuple position, its batches' rows one after the other (read once, here)."""
    parts = [list(batch) for batch in without_autotuning(packed_batches)]
    if not parts:
        raise ValueError("no records to train on: the training split is empty")
    columns = _joined(parts)
    parts.clear()
    return columns


def _joined(parts: list) -> tuple[tf.Tensor, ...]:
    """Input: packed batches (sequences of tensors, rows first). Output: one tensor per position, the batches'
    rows one after the other."""
    return tuple(tf.concat([batch[i] for batch in parts], axis=0) for i in range(len(parts[0])))


def row_batches(rows: int, batch_size: int, shuffle: bool, repeat: bool, seed: int | None) -> tf.data.Dataset:
    """Batches of row numbers in [0, rows): each pass holds every row once, in order or (shuffle) in a
    permutation of its own drawn from `seed` and the pass number (the same on every worker, and in every run
    with a seed); with `repeat`, passes follow each other without end and batches run across them.

    Each pass's batches are cut at once into one matrix, while the previous pass is fed: a step costs one
    slice, not a step per row (tf.data's per-element cost would otherwise cap the host near the model's rate)."""
    if seed is None:
        seed = int(np.random.default_rng().integers(2**31))

    @tf.autograph.experimental.do_not_convert
    def order(number):  # the rows of pass `number`, in the order it feeds them
        if not shuffle:
            return tf.range(rows, dtype=tf.int64)
        noise = tf.random.stateless_uniform([rows], seed=tf.stack([tf.constant(seed, tf.int64), number]))
        return tf.cast(tf.argsort(noise), tf.int64)

    passes = tf.data.Dataset.range(2**31 if repeat else 1).map(order)
    if not repeat:
        return passes.rebatch(batch_size, drop_remainder=False)

    @tf.autograph.experimental.do_not_convert
    def cut(left_over, rows_in_order):
        # A pass's rows after the previous pass's left-over tail, cut into as many full batches as they
        # fill; what remains is carried to the next pass.
        picked = tf.concat([left_over, rows_in_order], 0)
        full = tf.size(picked, out_type=tf.int64) // batch_size * batch_size
        return picked[full:], tf.reshape(picked[:full], [-1, batch_size])

    passes = passes.scan(tf.zeros([0], tf.int64), cut).prefetch(1)
    return passes.flat_map(tf.data.Dataset.from_tensor_slices)


HOLDOUT_BUCKETS = 1_000_000
HOLDOUT_KEY = [0x7AB1E, 0x5EED]  # the keyed hash's key: independent of how ingestion split the records


def in_holdout(record: tf.Tensor, share: float, leave_out: tuple[str, ...] = ()) -> tf.Tensor:
    """True for a serialized record in the holdout: a keyed hash of its features but those `leave_out` names
    (components.core.record_keys) falls in the first `share` of HOLDOUT_BUCKETS. The same record is in it on
    every pass, every worker and every run."""
    bucket = features_bucket(record, HOLDOUT_BUCKETS, HOLDOUT_KEY, leave_out)
    return tf.less(bucket, int(share * HOLDOUT_BUCKETS))


def _packing(element_spec):
    """Input: the element_spec of batches (any nest of tensors, batch dimension first). Output: (pack,
    unpack) for Dataset.map: pack turns a batch into a tuple of 2-D tensors, one per dtype (each tensor's
    values flattened per row, side by side), unpack turns such a tuple, of any number of rows, back into the
    nest. A tensor whose row shape is not fully known stays a tensor of its own."""
    specs = tf.nest.flatten(element_spec)
    groups: dict = {}  # dtype name (or the leaf's index, alone) -> [(leaf index, row shape)]
    for index, spec in enumerate(specs):
        row = spec.shape[1:]
        groups.setdefault(spec.dtype.name if row.is_fully_defined() else index, []).append((index, row))

    @tf.autograph.experimental.do_not_convert
    def pack(*element):
        leaves = tf.nest.flatten(element if len(element) > 1 else element[0])
        return tuple(leaves[members[0][0]] if isinstance(key, int) else
                     tf.concat([tf.reshape(leaves[i], [-1, row.num_elements()]) for i, row in members], axis=1)
                     for key, members in groups.items())

    @tf.autograph.experimental.do_not_convert
    def unpack(*packed):
        leaves = [None] * len(specs)
        for tensor, (key, members) in zip(packed, groups.items()):
            if isinstance(key, int):
                leaves[key] = tensor
                continue
            if all(row.rank == 0 for _, row in members):  # one value per row each: one op, no reshapes
                for (i, _), part in zip(members, tf.unstack(tensor, num=len(members), axis=1)):
                    leaves[i] = part
                continue
            parts = tf.split(tensor, [row.num_elements() for _, row in members], axis=1)
            for (i, row), part in zip(members, parts):
                leaves[i] = tf.reshape(part, [-1, *row.as_list()])
        return tf.nest.pack_sequence_as(element_spec, leaves)

    return pack, unpack


def count_records(file_patterns: list[str], holdout_share: float, leave_out: tuple[str, ...] = ()) -> int:
    """Input: TFRecord file patterns, a holdout share and the features its hash leaves out. Output: how many
    of their records are in_holdout."""
    files = list_files(file_patterns)
    records = record_dataset(files, record_compression(files))
    held_out = records.filter(lambda record: in_holdout(record, holdout_share, leave_out))
    return int(held_out.reduce(np.int64(0), lambda count, _: count + 1))


def fill_cache(dataset: tf.data.Dataset) -> int:
    """Runs one whole pass of a cached, unrepeated dataset inside TensorFlow, which writes its cache files
    once and for all (later datasets with the same cache_file only read them). Output: the elements seen."""
    return int(dataset.reduce(np.int64(0), lambda count, _: count + 1))


def estimated_bytes(batch, examples: int) -> int:
    """Input: one batch of model-ready tensors (any nest of tensors or arrays, batch dimension first) and
    the split's example count. Output: the bytes the split's tensors take, at this batch's bytes per example."""
    leaves = tf.nest.flatten(batch)
    rows = int(np.shape(leaves[0])[0]) if leaves and np.ndim(leaves[0]) else 1
    size = 0
    for leaf in leaves:
        values = np.asarray(leaf)
        if values.dtype == object:  # strings: their bytes plus a pointer and length each
            size += sum(len(v) + 16 for v in values.reshape(-1))
        else:
            size += values.nbytes
    return int(size / max(rows, 1) * examples)


def machine_memory_bytes() -> int:
    """The machine's physical memory, or the container's memory limit (cgroup v2 or v1) when lower."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    for path in CGROUP_MEMORY_LIMITS:
        try:
            limit = tf.io.gfile.GFile(path).read().strip()
        except (tf.errors.OpError, OSError):
            continue
        if limit.isdigit():
            total = min(total, int(limit))
    return total


def memory_budget_bytes(cache_max_mb: int) -> int:
    """TrainConfig.cache_max_mb in bytes; 0 (auto): a quarter of machine_memory_bytes()."""
    return cache_max_mb * 2**20 if cache_max_mb else machine_memory_bytes() // AUTO_SHARE_OF_MEMORY


class PreprocessedCache:
    """Where each split's preprocessed tensors are cached: in memory while the splits placed so far fit
    `budget_bytes`, else in files in a scratch folder of its own, created inside `scratch_parent` (a local
    folder; "" = the system's temporary folder) when a split first needs it. `close()` (or leaving the
    `with` block) deletes that folder with every file tf.data wrote there (data, index and lock files)."""

    def __init__(self, budget_bytes: int, scratch_parent: str = ""):
        self.budget_bytes = budget_bytes
        self.scratch_parent = scratch_parent or tempfile.gettempdir()
        self.places: dict[str, str] = {}  # split -> MEMORY | DISK
        self.sizes: dict[str, int] = {}  # split -> estimated bytes
        self.folder = ""  # the scratch folder, once created

    def place(self, split: str, size: int) -> str:
        """Input: a split and its estimated size in bytes. Output: MEMORY when it fits beside the splits
        placed in memory before it, else DISK."""
        in_memory = sum(self.sizes[s] for s, where in self.places.items() if where == MEMORY)
        self.places[split] = MEMORY if in_memory + size <= self.budget_bytes else DISK
        self.sizes[split] = size
        logging.info("Preprocessed %s split (about %.1f MB) cached in %s (budget %.1f MB)", split, size / 2**20,
                     self.places[split], self.budget_bytes / 2**20)
        return self.places[split]

    def cache_file(self, split: str) -> str:
        """tf.data's cache filename for a placed split: "" (in memory) or a file prefix in the scratch folder."""
        if self.places[split] == MEMORY:
            return ""
        if not self.folder:
            self.folder = os.path.join(self.scratch_parent, f"preprocessed-cache-{uuid.uuid4().hex}")
            tf.io.gfile.makedirs(self.folder)
        return os.path.join(self.folder, split)

    def close(self) -> None:
        """Deletes the scratch folder and everything in it (nothing when no split went to disk)."""
        if self.folder and tf.io.gfile.exists(self.folder):
            tf.io.gfile.rmtree(self.folder)
        self.folder = ""

    def __enter__(self) -> "PreprocessedCache":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
