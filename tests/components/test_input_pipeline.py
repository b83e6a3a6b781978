"""The input pipeline's preprocess-once cache (components/trainer/input_pipeline.py): the cached path feeds
the same examples as the streamed one in every pass, in memory or from files, and train() picks the cache by
the estimated size and leaves no cache file behind, also when training fails. Real TensorFlow on the
3,000-row taxi span; the tests that train are marked `training`."""
import collections
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import models.taxi
from components.core.datasets import record_dataset
from components.core import tasks
from components.trainer import callbacks, input_pipeline, train as train_module
from components.trainer.device import DeviceDescription, Gpu
from components.trainer.distribution import make_strategy
from components.trainer.input_pipeline import (DISK, MEMORY, InMemorySplit, PreprocessedCache, estimated_bytes,
                                               fill_cache, make_dataset, memory_budget_bytes, row_batches)
from components.trainer.train import ADAPT_SAMPLE_SIZE, TrainingJob, read_sample, train
from tests.components.training import settings as _settings
from tests.warm_python import run_warm

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SPEC = {**models.taxi.INPUTS, **models.taxi.LABEL_INPUTS}
BATCH = 64


@pytest.fixture(scope="module")
def preprocessing(files):
    keras.config.set_dtype_policy("float32")
    return models.taxi.build_preprocessing(read_sample(files["train_files"], SPEC, ADAPT_SAMPLE_SIZE))


def _dataset(files, preprocessing, **options):
    return make_dataset(files["train_files"], SPEC, BATCH, label_fn=models.taxi.make_label,
                        input_names=list(models.taxi.INPUTS), preprocess=preprocessing, seed=7, **options)


def _rows(dataset, count):
    """The first `count` examples of a dataset of (features, label) batches, each a hashable tuple."""
    rows = []
    for features, labels in dataset.as_numpy_iterator():
        names = sorted(features)
        columns = [features[name].reshape(len(labels), -1).tolist() for name in names]
        rows += [tuple(tuple(column[i]) for column in columns) + (tuple(np.reshape(labels[i], -1).tolist()),)
                 for i in range(len(labels))]
        if len(rows) >= count:
            return rows[:count]
    return rows


def _epochs(dataset, examples, epochs=3):
    rows = _rows(dataset, examples * epochs)
    return [rows[i * examples:(i + 1) * examples] for i in range(epochs)]


@pytest.mark.parametrize("where", [MEMORY, DISK])
@pytest.mark.slow
def test_the_cached_path_feeds_the_same_examples_as_the_streamed_one_in_every_pass(files, preprocessing, tmp_path,
                                                                                 where):
    cache_file = str(tmp_path / "train") if where == DISK else ""
    reference = _rows(_dataset(files, preprocessing), 10**9)  # one streamed pass in file order
    examples = len(reference)
    assert examples > 1000

    # No shuffle: every pass of the cache is the streamed pass, in the same order (batches run across passes).
    ordered = _dataset(files, preprocessing, repeat=True, cache=True, cache_file=cache_file)
    assert _epochs(ordered, examples) == [reference] * 3
    # Streamed, later passes are preprocessed in batches of other rows: the same up to float rounding (a value
    # at the tail of a batch can take a scalar code path instead of a vectorized one), where the cache repeats
    # the first pass's values exactly.
    for epoch in _epochs(_dataset(files, preprocessing, repeat=True), examples):
        np.testing.assert_allclose(np.array(epoch, dtype=float), np.array(reference, dtype=float), rtol=1e-5)
    if where == DISK:  # the files written by that pass are what the next datasets read
        assert tf.io.gfile.glob(cache_file + "*.index")

    # Shuffled: each pass holds every example once, in an order of its own.
    shuffled = _epochs(_dataset(files, preprocessing, repeat=True, shuffle_buffer=500, cache=True,
                                cache_file=cache_file), examples)
    for epoch in shuffled:
        assert collections.Counter(epoch) == collections.Counter(reference)
        assert epoch != reference
    assert shuffled[0] != shuffled[1]
    if where == MEMORY:  # fed in the very batches of row numbers row_batches picks, each batch its own rows
        picked = np.concatenate(list(row_batches(examples, BATCH, shuffle=True, repeat=True, seed=7)
                                     .take(3 * examples // BATCH).as_numpy_iterator()))
        assert sum(shuffled, [])[:len(picked)] == [reference[row] for row in picked]

    # Not repeated (the eval split): the cached batches are the streamed ones.
    once = _dataset(files, preprocessing, cache=True, cache_file=cache_file)
    assert _rows(once, 10**9) == _rows(once, 10**9) == reference


@pytest.mark.parametrize("kept, preprocessed_after", [(None, False), (MEMORY, False), (DISK, False), (MEMORY, True)])
def test_a_split_read_into_memory_gives_in_file_order_the_batches_its_cache_gives(files, preprocessing, tmp_path,
                                                                                  monkeypatch, kept,
                                                                                  preprocessed_after):
    """Validation on the training split read once for training: the same batches, folds included, as a cache
    of its own would give, on every pass; kept as the first pass cuts them (in memory or in a file) or not.
    Read raw and preprocessed afterwards (a few rows per call, as a large split is), the same values."""
    options = dict(folds=2, leave_out=("tips",))
    cached = list(_dataset(files, preprocessing, cache=True, **options).as_numpy_iterator())
    cache_file = {None: None, MEMORY: "", DISK: str(tmp_path / "folds")}[kept]
    if preprocessed_after:
        monkeypatch.setattr(input_pipeline, "PREPROCESS_ROWS", 1000)  # several calls, the last one a part
        split = InMemorySplit.read(_dataset(files, None, **options), preprocessing)
        assert int(split.columns[0].shape[0]) > 1000 and int(split.columns[0].shape[0]) % 1000
    else:
        split = InMemorySplit.read(_dataset(files, preprocessing, **options))
    in_memory = split.batches(BATCH, shuffle=False, repeat=False, seed=7, cache_file=cache_file)
    for _ in range(2):
        read = list(in_memory.as_numpy_iterator())
        assert len(read) == len(cached) and len(cached[0]) == 3  # (features, label, fold)
        for (features, label, fold), (features_cached, label_cached, fold_cached) in zip(read, cached):
            assert sorted(features) == sorted(features_cached)
            for name in features:
                np.testing.assert_array_equal(features[name], features_cached[name])
            np.testing.assert_array_equal(label, label_cached)
            np.testing.assert_array_equal(fold, fold_cached)
    assert any(name.endswith(".index") for name in os.listdir(tmp_path)) == (kept == DISK)


def test_the_cached_dataset_keeps_data_sharding_for_multi_worker_training(files, preprocessing):
    dataset = _dataset(files, preprocessing, repeat=True, shuffle_buffer=100, cache=True, shard_by_data=True)
    assert dataset.options().experimental_distribute.auto_shard_policy == tf.data.experimental.AutoShardPolicy.DATA
    assert dataset.options().deterministic is False


@pytest.mark.parametrize("cache", ["", MEMORY, DISK])
@pytest.mark.parametrize("repeat", [True, False])
def test_training_and_validation_datasets_run_without_tf_data_autotuning(files, preprocessing, tmp_path, cache,
                                                                        repeat):
    # With autotuning, ending an iteration (the end of a fit, of every validation pass) can wait for the
    # autotuning thread's next wake-up, as long again as the iteration itself.
    dataset = _dataset(files, preprocessing, repeat=repeat, shuffle_buffer=100 if repeat else 0, cache=bool(cache),
                       cache_file=str(tmp_path / "train") if cache == DISK else "")
    assert dataset.options().autotune.enabled is False
    assert next(iter(dataset))[1].shape[0] == BATCH


def test_records_read_from_files_keep_autotuning_off_through_batches_maps_filters_and_skips(files):
    records = record_dataset(files["train_files"], input_pipeline.record_compression(files["train_files"]))
    for dataset in (records.batch(BATCH).map(lambda batch: batch),
                    records.filter(lambda record: True), records.skip(1)):
        assert dataset.options().autotune.enabled is False
    assert next(iter(records.batch(BATCH))).shape[0] == BATCH


def test_one_device_without_a_gpu_hands_keras_the_trainers_dataset_itself(files, preprocessing):
    # Keras iterates what the strategy's experimental_distribute_dataset returns: OneDeviceStrategy would wrap
    # the dataset in a per-device one of its own, with autotuning on again.
    dataset = _dataset(files, preprocessing)
    distributed = make_strategy("one_device", DeviceDescription()).experimental_distribute_dataset(dataset)
    assert distributed is dataset and distributed.options().autotune.enabled is False
    one_gpu = make_strategy("one_device", DeviceDescription(gpus=(Gpu("GPU 0", (8, 0)),)))
    assert isinstance(one_gpu, tf.distribute.OneDeviceStrategy)
    assert one_gpu.extended.worker_devices[0].endswith("GPU:0")


def test_a_split_that_does_not_fit_the_budget_goes_to_disk_and_close_removes_every_cache_file(files, preprocessing,
                                                                                             tmp_path):
    first = next(iter(_dataset(files, preprocessing)))
    size = estimated_bytes(first, 1000)
    # taxi: 10 float32 and 7 int64 model-ready features and an int64 label per example
    assert 10 * 4 + 8 * 8 <= size / 1000 <= 2 * (10 * 4 + 8 * 8)
    with PreprocessedCache(budget_bytes=size + 1, scratch_parent=str(tmp_path)) as cache:
        assert cache.place("train", size) == MEMORY
        assert cache.place("eval", size) == DISK  # the training split claimed the memory first
        assert cache.cache_file("train") == "" and os.listdir(tmp_path) == []  # no folder until one is needed
        cache_file = cache.cache_file("eval")
        dataset = _dataset(files, preprocessing, cache=True, cache_file=cache_file)
        assert fill_cache(dataset) == -(-len(_rows(dataset, 10**9)) // BATCH)
        written = [path for _, _, names in os.walk(tmp_path) for path in names]
        assert any(name.endswith(".index") for name in written), written
    assert os.listdir(tmp_path) == []


def test_the_auto_budget_is_a_quarter_of_the_memory(monkeypatch):
    assert memory_budget_bytes(64) == 64 * 2**20
    monkeypatch.setattr(input_pipeline, "machine_memory_bytes", lambda: 8 * 2**30)
    assert memory_budget_bytes(0) == 2 * 2**30
    assert 0 < input_pipeline.machine_memory_bytes() <= os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class _CacheFiles(keras.callbacks.Callback):
    """Records the files in `folder` at the end of each interval, and raises after the first when `fail`."""

    def __init__(self, folder, fail=False):
        super().__init__()
        self.folder, self.fail, self.seen = folder, fail, []

    def on_epoch_end(self, epoch, logs=None):
        self.seen.append(sorted(name for _, _, names in os.walk(self.folder) for name in names))
        if self.fail:
            raise RuntimeError("training failed on purpose")


def _job(files, output, **overrides):
    settings = _settings(**{"epochs": 2, "xla": "off", "input_probe_steps": 0, "checkpoint_min_seconds": 0, **overrides})
    (output / "scratch").mkdir(parents=True)
    return TrainingJob(settings=settings, serving_model_dir=str(output / "serving"), run_dir=str(output / "run"),
                       checkpoint_dir=str(output / "checkpoints"), scratch_dir=str(output / "scratch"), **files)


def _dataset_calls(monkeypatch) -> list[dict]:
    """Every make_dataset call the Trainer makes from here on: its keyword arguments, and its file patterns as
    "files"."""
    calls, original = [], train_module.make_dataset

    def watched(file_patterns, *args, **kwargs):
        calls.append({"files": list(file_patterns), **kwargs})
        return original(file_patterns, *args, **kwargs)

    monkeypatch.setattr(train_module, "make_dataset", watched)
    return calls


def test_the_input_cache_is_placed_by_the_first_training_rows_preprocessed_without_reading_a_split_again(
        files, tmp_path, monkeypatch):
    """The size each split's cache is placed by comes from the first training rows (a training batch's worth)
    preprocessed: taken from the sample the preprocessing was fitted to, or, with no sample (a warm start's
    preprocessing), read here; the same bytes per example as the split's first batch streamed."""
    job = _job(files, tmp_path, folds=2)
    setup = train_module.set_up(job)
    streamed = next(iter(setup.dataset(job.train_files, False, batch_size=setup.plan.global_batch)))
    per_example = estimated_bytes(streamed, 1000)
    placed, reads = [], _dataset_calls(monkeypatch)
    monkeypatch.setattr(train_module, "estimated_bytes",
                        lambda batch, examples: placed.append(estimated_bytes(batch, 1000)) or 0)
    train_module.place_input_cache(job, setup)  # the sample's first rows: no records read
    assert (placed, reads) == ([per_example] * len(setup.splits), [])
    setup.sample, placed[:] = None, []
    train_module.place_input_cache(job, setup)  # no sample: one batch of raw rows read
    assert placed == [per_example] * len(setup.splits) and len(reads) == 1


@pytest.mark.training
def test_train_keeps_small_data_in_memory_and_says_so(files, tmp_path):
    job = _job(files, tmp_path)
    watch = _CacheFiles(job.scratch_dir)
    report = train(job, extra_callbacks=(watch,)).to_json()
    assert (report["input_cache"], report["cached_in_memory"]) == (MEMORY, True)
    assert watch.seen == [[], []] and os.listdir(job.scratch_dir) == []
    assert report["steps_run"] == report["total_steps"]
    assert report["final_metrics"]["val_auc"] > 0.8


@pytest.mark.training
@pytest.mark.parametrize("fail", [False, True])
def test_train_caches_data_too_big_for_memory_on_disk_and_leaves_no_file_behind(files, tmp_path, monkeypatch,
                                                                                fail):
    monkeypatch.setattr(train_module, "memory_budget_bytes", lambda cache_max_mb: 0)  # nothing fits
    job = _job(files, tmp_path)
    watch = _CacheFiles(job.scratch_dir, fail=fail)
    if fail:
        with pytest.raises(RuntimeError, match="on purpose"):
            train(job, extra_callbacks=(watch,))
    else:
        report = train(job, extra_callbacks=(watch,)).to_json()
        assert (report["input_cache"], report["cached_in_memory"]) == (DISK, False)
        assert report["steps_run"] == report["total_steps"]
        assert report["final_metrics"]["val_auc"] > 0.8
    # While training, both splits' caches were on disk (written before the first step); now nothing is.
    assert watch.seen, "no interval ended"
    for names in watch.seen:
        assert any(name.startswith("train") and name.endswith(".index") for name in names), names
        assert any(name.startswith("eval") and name.endswith(".index") for name in names), names
    assert os.listdir(job.scratch_dir) == []


def test_packing_restores_every_tensor_whatever_its_shape_and_dtype():
    from components.trainer.input_pipeline import _packing
    batch = ({"a": tf.constant([1.0, 2.0]), "b": tf.constant([[1, 2, 3], [4, 5, 6]], tf.int64),
              "c": tf.constant([[[0.5]], [[1.5]]]), "s": tf.constant(["x", "y"])}, tf.constant([[0], [1]], tf.int64))
    dataset = tf.data.Dataset.from_tensors(batch)
    pack, unpack = _packing(dataset.element_spec)
    packed = dataset.map(pack)
    assert len(packed.element_spec) == 3  # float32, int64, string
    restored = next(iter(packed.unbatch().batch(2).map(unpack)))
    tf.nest.map_structure(lambda got, want: np.testing.assert_array_equal(got.numpy(), want.numpy()), restored, batch)


def _labels_of(dataset) -> list:
    return [float(label) for _, labels in dataset.as_numpy_iterator() for label in np.reshape(labels, -1)]


def _record_ids(files, **options) -> list[bytes]:
    """The serialized records a dataset of the training files keeps (parsed: nothing but the raw bytes)."""
    spec = {"trip_start_timestamp": tf.io.FixedLenFeature([], tf.int64, default_value=0),
            "trip_seconds": tf.io.FixedLenFeature([], tf.int64, default_value=-1)}
    batches = make_dataset(files["train_files"], spec, 512, **options)
    return [(int(a), int(b)) for batch in batches.as_numpy_iterator()
            for a, b in zip(batch["trip_start_timestamp"], batch["trip_seconds"])]


def test_the_validation_holdout_and_the_rest_split_the_training_records_the_same_way_every_time(files):
    every = collections.Counter(_record_ids(files))
    held_out = collections.Counter(_record_ids(files, holdout_share=0.2, holdout=True))
    rest = collections.Counter(_record_ids(files, holdout_share=0.2, holdout=False))
    assert held_out + rest == every  # each record on one side
    assert 0.15 < sum(held_out.values()) / sum(every.values()) < 0.25
    assert collections.Counter(_record_ids(files, holdout_share=0.2, holdout=True)) == held_out
    assert input_pipeline.count_records(files["train_files"], 0.2) == sum(held_out.values())
    bigger = collections.Counter(_record_ids(files, holdout_share=0.3, holdout=True))
    assert not held_out - bigger  # a larger share holds the smaller one's records


def test_keep_best_puts_back_the_best_intervals_weights_and_stops_after_its_patience():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    keep = callbacks.KeepBest("val_mae", higher_is_better=False, patience=2)
    keep.set_model(model)
    weights_at = {}
    # best at interval 2; the tie at 3 has a higher validation loss (no better), the tie at 4 a lower one; at 5
    # the loss reaches a new low (the run goes on, interval 4 stays the best), then neither improves twice
    for epoch, (value, loss) in enumerate([(0.9, 1.0), (0.5, 0.8), (0.5, 0.9), (0.5, 0.6), (0.7, 0.5), (0.8, 0.5),
                                          (0.6, 0.55), (0.4, 0.1)]):
        model.set_weights([np.full((2, 1), epoch, np.float32), np.full((1,), epoch, np.float32)])
        weights_at[epoch] = model.get_weights()
        model.stop_training = False
        keep.on_epoch_end(epoch, {"val_mae": value, "val_loss": loss})
        if model.stop_training:
            break
    assert epoch == 6 and keep.stopped_early and (keep.best_interval, keep.best_value) == (4, 0.5)
    keep.on_train_end()
    np.testing.assert_array_equal(model.get_weights()[0], weights_at[3][0])


def test_keep_best_does_not_stop_while_the_validation_loss_still_falls():
    """A lucky early peak of a coarse metric (accuracy on a few hundred records) does not end the run while
    the model still improves on its validation loss; the peak stays kept until a later interval beats it."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    keep = callbacks.KeepBest("val_accuracy", higher_is_better=True, patience=3)
    keep.set_model(model)
    history = [(0.70, 0.70), (0.78, 0.65)] + [(0.75, 0.64 - 0.01 * i) for i in range(8)] + [(0.80, 0.55)]
    for epoch, (value, loss) in enumerate(history):
        model.stop_training = False
        keep.on_epoch_end(epoch, {"val_accuracy": value, "val_loss": loss})
        assert not model.stop_training, epoch
        if 1 <= epoch < len(history) - 1:
            assert keep.best_interval == 2
    assert (keep.best_interval, keep.best_value) == (len(history), 0.80)
    for epoch in range(len(history), len(history) + 3):  # then neither improves: stopped after 3
        model.stop_training = False
        keep.on_epoch_end(epoch, {"val_accuracy": 0.79, "val_loss": 0.56})
    assert model.stop_training and keep.stopped_early and keep.best_interval == len(history)


def _slope_model(data):
    """y = w * x with no bias, compiled with an MSE loss and MAE: the validation logs of any weights are exact."""
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, use_bias=False)])
    model.compile(loss="mse", metrics=["mae"])
    logs = lambda w: train_module.validation_logs(model, [np.full((1, 1), w, np.float32)], data)  # noqa: E731
    return model, logs


def test_keep_best_averages_the_best_intervals_weights_only_while_the_average_scores_better():
    x = np.linspace(1.0, 2.0, 64, dtype=np.float32)[:, None]
    data = tf.data.Dataset.from_tensor_slices((x, x)).batch(16)  # the truth: w = 1
    model, logs = _slope_model(data)
    keep = callbacks.KeepBest("val_mae", higher_is_better=False, average=3)
    keep.set_model(model)
    for epoch, w in enumerate([1.3, 0.8, 3.0, 4.0]):  # ranked: 0.8 (interval 2), 1.3 (1), 3.0 (3); 4.0 not kept
        keep.on_epoch_end(epoch, logs(w))
    keep.on_train_end()
    assert keep.best_interval == 2 and float(model.get_weights()[0][0, 0]) == pytest.approx(0.8)
    keep.average_kept(lambda weights: train_module.validation_logs(model, weights, data))
    # 0.8 and 1.3 average to 1.05, better than 0.8 alone; adding 3.0 (a mean of 1.7) would be worse
    assert keep.averaged_intervals == [2, 1]
    assert float(model.get_weights()[0][0, 0]) == pytest.approx(1.05)
    assert keep.best_value == pytest.approx(logs(1.05)["val_mae"]) == pytest.approx(keep.averaged_logs["val_mae"])
    assert keep.best_interval == 2  # still the best single interval

    alone = callbacks.KeepBest("val_mae", higher_is_better=False, average=2)
    alone.set_model(model)
    for epoch, w in enumerate([0.95, 3.0]):  # 0.95 and 3.0 average to 1.975: worse than 0.95 alone
        alone.on_epoch_end(epoch, logs(w))
    alone.on_train_end()
    alone.average_kept(lambda weights: train_module.validation_logs(model, weights, data))
    assert alone.averaged_intervals == [1] and alone.averaged_logs == {}
    assert float(model.get_weights()[0][0, 0]) == pytest.approx(0.95)
    assert alone.best_value == pytest.approx(logs(0.95)["val_mae"])


@pytest.mark.training
def test_training_with_a_validation_share_validates_on_held_out_training_records_and_never_reads_the_eval_split(
        files, tmp_path, monkeypatch):
    calls = _dataset_calls(monkeypatch)
    job = _job(files, tmp_path, epochs=8, validation_share=0.2, early_stopping_patience=2, schedule="cosine",
               weight_decay=0.001)
    report = train(job).to_json()
    fed = [call["files"] for call in calls if call.get("preprocess") is not None]  # the datasets that fed the model
    assert fed and all(patterns == files["train_files"] for patterns in fed)
    held_out = input_pipeline.count_records(files["train_files"], 0.2, ("tips",))  # the label's source left out
    assert report["validation_examples"] == held_out and 0 < held_out < report["labels"]["train"]["examples"]
    curve = report["history"]["val_auc"]
    assert len(curve) == report["intervals_run"] == len(report["history"]["loss"]) <= report["intervals"]
    assert report["best_interval"] == 1 + int(np.argmax(curve))
    assert report["final_metrics"]["val_auc"] == max(curve)
    if report["stopped_early"]:  # the last 2 intervals (the patience) brought neither a better AUC nor a lower loss
        losses = report["history"]["val_loss"]
        assert report["intervals_run"] - report["best_interval"] >= 2
        assert max(curve[-2:]) <= max(curve[:-2]) and min(losses[-2:]) >= min(losses[:-2])
    else:
        assert report["intervals_run"] == report["intervals"]


def test_the_time_budget_ends_training_before_an_interval_as_long_as_the_longest_would_pass_it():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    now = [0.0]
    budget = callbacks.StopAtTimeBudget(10.0, clock=lambda: now[0])
    budget.set_model(model)
    model.stop_training = False
    budget.on_train_begin()
    for epoch, seconds in enumerate([2.0, 3.0, 3.0, 1.0]):  # ends at 2, 5, 8: 8 + the longest (3) passes 10
        now[0] += seconds
        budget.on_epoch_end(epoch)
        if model.stop_training:
            break
    assert epoch == 2 and budget.stopped and budget.seconds_used == 8.0


def _budget_run(seconds: float, durations: list[float], epochs: int) -> tuple[int, "callbacks.StopAtTimeBudget"]:
    """StopAtTimeBudget(seconds) over intervals of `durations` in a fit of `epochs`: (intervals run, callback)."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    now = [0.0]
    budget = callbacks.StopAtTimeBudget(seconds, clock=lambda: now[0])
    budget.set_model(model)
    budget.set_params({"epochs": epochs})
    model.stop_training = False
    budget.on_train_begin()
    for epoch, duration in enumerate(durations[:epochs]):
        now[0] += duration
        budget.on_epoch_end(epoch)
        if model.stop_training:
            break
    return epoch + 1, budget


def test_the_time_budget_leaves_the_first_interval_s_compile_out_and_never_calls_the_plan_s_end_a_stop():
    # the first interval traced and compiled (4 s); the others take 1 s: the run ends at 9 s, when one more
    # interval (1 s, not 4) would pass the budget of 9.5 s
    run, budget = _budget_run(9.5, [4.0] + [1.0] * 7, epochs=8)
    assert run == 6 and budget.stopped and budget.seconds_used == 9.0
    # a plan of 3 intervals that ends at 5.5 s, less than its longest interval short of the budget: finished,
    # not stopped
    run, budget = _budget_run(6.0, [3.0, 1.0, 1.5], epochs=3)
    assert run == 3 and not budget.stopped and budget.seconds_used == 5.5


@pytest.mark.training
def test_with_folds_the_validation_batches_go_to_disk_when_only_the_training_split_fits_in_memory(files, tmp_path,
                                                                                                   monkeypatch):
    """Bagged over folds, validation keeps its batches as a copy of the training split read into memory; when
    the budget holds the training split but not that copy, the copy is written to the disk cache (once, before
    the first step), still cut from the one read, and removed when training ends."""
    monkeypatch.setattr(train_module, "estimated_bytes", lambda batch, examples: 1000)
    monkeypatch.setattr(train_module, "memory_budget_bytes", lambda cache_max_mb: 1500)
    calls = _dataset_calls(monkeypatch)
    job = _job(files, tmp_path, folds=2)
    watch = _CacheFiles(job.scratch_dir)
    report = train(job, extra_callbacks=(watch,))
    assert report.cached_in_memory and [call.get("folds") for call in calls].count(2) == 1
    assert report.validation_examples == report.labels["train"].examples and report.final_metrics["val_auc"] > 0.8
    for names in watch.seen:
        assert [name for name in names if name.endswith(".index")] == ["folds.index"], names
    assert os.listdir(job.scratch_dir) == []


@pytest.mark.training
@pytest.mark.parametrize("precision", ["float32", "mixed_float16"])
def test_training_with_folds_validates_every_training_record_out_of_fold_and_serves_the_members_mean(files, tmp_path,
                                                                                                    precision,
                                                                                                    monkeypatch):
    """Bagged over folds, the best intervals' weights averaged (under a mixed precision policy too); a module
    that builds one network (models.taxi) gets one copy per fold, side by side in the packed model. The
    training split is parsed and preprocessed once, for training and for validating out of fold; validation
    scores it in larger batches than training's."""
    from components.core import contract
    from components.core.packing import MembersOutput
    from components.core.records import model_ready_dir
    from components.core.task_layers import load_keras_model

    calls = _dataset_calls(monkeypatch)
    cut = []  # (batch size, repeated) of every dataset cut from the training split read into memory
    cut_batches = input_pipeline.InMemorySplit.batches

    def watched_batches(split, batch_size, *args, **kwargs):
        cut.append((batch_size, kwargs["repeat"]))
        return cut_batches(split, batch_size, *args, **kwargs)

    monkeypatch.setattr(input_pipeline.InMemorySplit, "batches", watched_batches)
    job = _job(files, tmp_path, epochs=4, folds=2, early_stopping_patience=2, average_intervals=3, precision=precision)
    report = train(job)
    with_folds = [call for call in calls if call.get("folds")]  # the training split's reads (with the records' folds)
    assert len(with_folds) == 1 and report.cached_in_memory
    assert sorted(set(cut)) == [(report.plan["global_batch"], True), (train_module.VALIDATION_BATCH, False)]
    assert report.folds == 2 and report.validation_examples == report.labels["train"].examples
    assert len(report.history["val_auc"]) == report.intervals_run and report.best_interval >= 1
    assert "out of fold on all" in report.schedule_line() and "(2 folds)" in report.schedule_line()
    # the best interval first, then those whose weights joined its average: the average scored better out of fold
    best_alone = report.history["val_auc"][report.best_interval - 1]
    averaged = report.averaged_intervals
    assert averaged[0] == report.best_interval and len(set(averaged)) == len(averaged)
    assert all(1 <= interval <= report.intervals_run for interval in averaged)
    if len(averaged) > 1:
        assert report.validation_value > best_alone and "served averaged with interval" in report.schedule_line()
    else:
        assert report.validation_value == best_alone and "served alone" in report.schedule_line()
    folder = model_ready_dir(job.serving_model_dir)
    model = load_keras_model(os.path.join(folder, contract.MODEL_READY_FILE))
    assert [layer.copies for layer in model.layers if isinstance(layer, MembersOutput)] == [2]
    # a process of its own (ModelExport's container) loads it with the model module's imports alone
    loaded = run_warm([sys.executable, "-c", "import sys; import models.taxi; "
                       "from components.core.task_layers import load_keras_model; "
                       "print(load_keras_model(sys.argv[1]).output.shape)",
                       os.path.join(folder, contract.MODEL_READY_FILE)], cwd=PROJECT_ROOT, timeout=300)
    assert loaded.stdout.strip().splitlines()[-1:] == ["(None, 1)"], loaded.stderr[-2000:]
    preprocessing = load_keras_model(os.path.join(folder, contract.PREPROCESSING_FILE))
    eval_files = input_pipeline.list_files(files["eval_files"])
    records = next(iter(tf.data.TFRecordDataset(eval_files, input_pipeline.record_compression(eval_files)).batch(64)))
    ready = preprocessing(tf.io.parse_example(records, models.taxi.INPUTS))
    copies = np.stack([layer(ready).numpy() for layer in model.layers if isinstance(layer, keras.Model)])
    assert len(copies) == 2
    assert copies.std(axis=0).mean() > 1e-4  # two models, not one
    served = tf.saved_model.load(job.serving_model_dir).signatures["serving_default"](examples=records)
    np.testing.assert_allclose(served[tasks.task_named("binary").prediction_key].numpy().reshape(-1),
                               copies.mean(axis=0).reshape(-1), rtol=1e-5, atol=1e-6)


@pytest.mark.training
def test_a_time_budget_cuts_the_plan_to_the_intervals_that_fit_and_ends_training_at_it(files, tmp_path):
    # not timed ahead (no probe): the budget ends training after the interval that reaches it
    report = train(_job(files, tmp_path / "hard", epochs=50, time_budget_seconds=0.5))
    assert report.stopped_at_budget and report.intervals_run < report.plan["intervals"]
    assert report.intervals_before_budget == 0  # the plan as it was
    assert "time budget of 0.5 s" in report.schedule_line()
    # timed on in-memory batches: the plan keeps the intervals that fit (the cosine ends with the last)
    report = train(_job(files, tmp_path / "planned", epochs=500, time_budget_seconds=3.0, input_probe_steps=20,
                        schedule="cosine"))
    planned = report.intervals_before_budget
    assert planned > report.plan["intervals"] >= report.intervals_run
    assert f"cut from {planned} to fit the time budget" in report.schedule_line()


@pytest.mark.parametrize("rows, batch", [(1000, 256), (1024, 256), (10, 4), (3, 8)])
def test_row_batches_hold_every_row_once_per_pass_in_full_batches_that_run_across_passes(rows, batch):
    passes = 5
    batches = list(row_batches(rows, batch, shuffle=True, repeat=True, seed=3)
                   .take(-(-passes * rows // batch)).as_numpy_iterator())
    assert all(len(b) == batch for b in batches)
    stream = np.concatenate(batches)
    orders = [stream[i * rows:(i + 1) * rows] for i in range(passes)]
    for order in orders:
        assert sorted(order.tolist()) == list(range(rows))
    if rows >= 10:  # each pass in an order of its own
        assert len({tuple(order.tolist()) for order in orders}) == passes
    again = np.concatenate(list(row_batches(rows, batch, shuffle=True, repeat=True, seed=3)
                                .take(-(-passes * rows // batch)).as_numpy_iterator()))
    assert again.tolist() == stream.tolist()  # the same seed, the same batches: on every worker
    # One pass in order: every row, the last batch partial.
    once = list(row_batches(rows, batch, shuffle=False, repeat=False, seed=3).as_numpy_iterator())
    assert np.concatenate(once).tolist() == list(range(rows)) and all(len(b) == batch for b in once[:-1])
