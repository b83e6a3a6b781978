"""The GPU-aware training loop, independent of TFX: device -> strategy -> precision -> XLA -> fit -> export.

`train(job)` takes file patterns, output directories and the settings dict (the keys of the pipeline's
TrainConfig) and returns the training report it also writes as JSON. The model module supplies only
INPUTS, LABEL_INPUTS, LABEL_KEY, make_label, build_preprocessing(sample) and build_model(preprocessing).
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import io
import json
import math
import os
import re
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging
from tfx.dsl.io import fileio

from components import artifact_files
from components.trainer import callbacks as training_callbacks
from components.trainer.device import (Decision, DeviceDescription, choose_precision, choose_strategy,
                                       config_override, describe_devices, xla_candidates)
from components.trainer.distribution import configure_gpus, is_chief, make_strategy, worker_task
from components.trainer.export import export_serving_model, float32_copy
from components.trainer.input_pipeline import count_records, fits_in_memory, make_dataset
from components.trainer.warm_start import apply_warm_start, load_warm_start

PROBE_BATCHES = 20  # distinct in-memory batches the XLA and input-wait timings cycle through
ADAPT_SAMPLE_SIZE = 20_000  # rows used to fit the preprocessing layers (vocabularies, normalization)
REPORT_FILE = "training_report.json"
BACKUP_METADATA = "training_metadata.json"  # written by keras.callbacks.BackupAndRestore...
BACKUP_WEIGHTS = "latest.weights.h5"  # ...with these weights; "<name>.bkp" holds the previous checkpoint


@dataclasses.dataclass
class TrainingJob:
    settings: dict  # the pipeline's TrainConfig as a dict
    train_files: list[str]
    eval_files: list[str]
    serving_model_dir: str  # the SavedModel goes here (chief only)
    run_dir: str  # TensorBoard logs and the training report
    checkpoint_dir: str  # stable across restarts of the same job: a killed job resumes from it
    base_model: str | None = None  # serving directory of the model to warm-start from (settings["warm_start"])


def checkpoint_dir_for(checkpoint_root: str, train_files: list[str], settings: dict) -> str:
    """Output: a checkpoint directory under `checkpoint_root` that only a restart of the same job (same
    data, same settings) finds again."""
    key = hashlib.sha256(json.dumps([sorted(train_files), settings], sort_keys=True, default=str).encode())
    return os.path.join(checkpoint_root, key.hexdigest()[:16])


class WarmupThenConstant(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate rising linearly from 0 to `peak_learning_rate` over `warmup_steps` optimizer steps,
    then constant."""

    def __init__(self, peak_learning_rate: float, warmup_steps: int):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps

    def __call__(self, step):
        if not self.warmup_steps:
            return keras.ops.convert_to_tensor(self.peak_learning_rate, "float32")
        progress = keras.ops.minimum((keras.ops.cast(step, "float32") + 1.0) / self.warmup_steps, 1.0)
        return self.peak_learning_rate * progress

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps}


def training_plan(train_examples: int, settings: dict, replicas: int) -> dict:
    """Input: training-set size, settings, replicas in sync. Output: batch sizes, learning rate and steps.

    Global batch = per-replica batch x replicas; the learning rate scales linearly with the examples per
    optimizer update (global batch x gradient-accumulation steps) relative to one replica's batch.
    Training runs in intervals of `checkpoint_every_steps` (default: one pass over the data), each a Keras
    epoch that ends with a checkpoint; `total_steps` covers `epochs` passes over the data.
    """
    global_batch = settings["batch_size"] * replicas
    accumulation = max(1, settings["gradient_accumulation_steps"])
    steps_per_pass = max(1, math.ceil(train_examples / global_batch))
    execution = settings["steps_per_execution"]
    interval = settings["checkpoint_every_steps"] or steps_per_pass
    interval = max(execution, math.ceil(interval / execution) * execution)
    intervals = max(1, math.ceil(settings["epochs"] * steps_per_pass / interval))
    return {"global_batch": global_batch, "gradient_accumulation_steps": accumulation,
            "learning_rate": settings["learning_rate"] * replicas * accumulation,
            "steps_per_interval": interval, "intervals": intervals, "total_steps": interval * intervals}


def train(job: TrainingJob, extra_callbacks: tuple = ()) -> dict:
    """Trains and exports one model; returns the training report (also written to run_dir)."""
    settings = job.settings
    started = time.monotonic()
    device = describe_devices()
    configure_gpus(settings["gpu_memory_growth"], settings["gpu_memory_limit_mb"])
    strategy_choice = choose_strategy(device, config_override(settings["strategy"]))
    strategy = make_strategy(strategy_choice.value, device)
    replicas = strategy.num_replicas_in_sync
    logging.info("Training on %s: strategy %s (%s), %d replica(s)", device, strategy_choice.value,
                 strategy_choice.reason, replicas)

    model_module = importlib.import_module(settings["model"])
    keras.utils.set_random_seed(settings["seed"])
    keras.config.set_dtype_policy("float32")
    warm = load_warm_start(model_module, job.base_model, settings.get("warm_start", True))
    sample_rows = None  # rows in the adapt sample: all training records when fewer than ADAPT_SAMPLE_SIZE
    preprocessing = warm.preprocessing
    if preprocessing is None:
        sample = read_sample(job.train_files, model_module.INPUTS, ADAPT_SAMPLE_SIZE)
        sample_rows = len(next(iter(sample.values())))
        preprocessing = model_module.build_preprocessing(sample)

    small = sample_rows is not None and sample_rows < ADAPT_SAMPLE_SIZE  # the sample read every record
    train_examples = sample_rows if small else count_records(job.train_files)
    if replicas > 1 and settings["steps_per_execution"] > 1:
        # Keras 3 fails to run several steps per call under a multi-replica strategy (keras#19246).
        logging.info("steps_per_execution 1 instead of %d: %d replicas", settings["steps_per_execution"], replicas)
        settings = {**settings, "steps_per_execution": 1}
    plan = training_plan(train_examples, settings, replicas)
    cache = fits_in_memory(job.train_files + job.eval_files, settings["cache_max_mb"])
    multi_worker = strategy_choice.value == "multi_worker_mirrored"

    def dataset(files, training, batch_size=plan["global_batch"], cache=cache):
        return make_dataset(files, {**model_module.INPUTS, **model_module.LABEL_INPUTS}, batch_size,
                            label_fn=model_module.make_label, input_names=list(model_module.INPUTS),
                            preprocess=preprocessing, shuffle_buffer=settings["shuffle_buffer"] if training else 0,
                            repeat=training, cache=cache, seed=settings["seed"], shard_by_data=multi_worker)

    def probe_batch():  # a few examples to check that XLA compiles when no timing does it
        return next(iter(dataset(job.train_files, False, batch_size=8 * replicas, cache=False)))

    memory_batches = _in_memory_batches(dataset(job.train_files, True, cache=False), settings)
    with strategy.scope():
        model, precision, xla, memory_rate = _build_for_device(
            model_module, preprocessing, device, settings, plan, probe_batch, memory_batches, multi_worker)
        apply_warm_start(model, warm)  # a checkpoint of this job, when there is one, still wins (resume)
    logging.info("Precision %s (%s); XLA %s (%s)", precision.value, precision.reason, xla.value, xla.reason)

    worker = "%s-%d" % worker_task()
    checkpoint_dir = job.checkpoint_dir
    if multi_worker:  # each worker keeps its own copy of the (identical) training state
        checkpoint_dir = os.path.join(checkpoint_dir, worker)
    repair_checkpoint(checkpoint_dir)
    resumed_from_step = _checkpointed_interval(checkpoint_dir) * plan["steps_per_interval"]
    meter = training_callbacks.ThroughputMeter(plan["global_batch"])
    loss_scale = training_callbacks.LossScaleRecorder()
    checkpoints = training_callbacks.SpacedBackupAndRestore(checkpoint_dir, settings["checkpoint_min_seconds"])
    callbacks = [checkpoints, training_callbacks.StopOnDivergence(plan["steps_per_interval"]), meter, loss_scale,
                 keras.callbacks.TensorBoard(os.path.join(job.run_dir, "logs"), profile_batch=_profile_window(settings)),
                 *extra_callbacks]
    with strategy.scope():
        if resumed_from_step:
            logging.info("Resuming from the checkpoint at step %d in %s", resumed_from_step, checkpoint_dir)
        logging.info("Training %d steps (%d intervals of %d) on %d examples, global batch %d", plan["total_steps"],
                     plan["intervals"], plan["steps_per_interval"], train_examples, plan["global_batch"])
        fit_started = time.monotonic()
        history = model.fit(dataset(job.train_files, True), steps_per_epoch=plan["steps_per_interval"],
                            epochs=plan["intervals"], validation_data=dataset(job.eval_files, False),
                            validation_freq=[plan["intervals"]], callbacks=callbacks, verbose=0)
    fit_seconds = time.monotonic() - fit_started

    final_metrics = {name: float(values[-1]) for name, values in history.history.items()}
    report = {
        "model": settings["model"],
        "device": dataclasses.asdict(device),
        "strategy": strategy_choice.value, "strategy_reason": strategy_choice.reason, "replicas": replicas,
        "worker": worker, "precision": precision.value, "precision_reason": precision.reason,
        "xla": xla.value == "on", "xla_reason": xla.reason,
        "train_examples": train_examples, "cached_in_memory": cache, **plan,
        "steps_per_execution": settings["steps_per_execution"],
        "warm_start": warm.to_json(), "resumed_from_step": resumed_from_step, "steps_run": meter.steps,
        "checkpoints_written": checkpoints.checkpoints_written,
        "examples_per_second": meter.examples_per_second, "step_seconds": meter.step_seconds,
        "in_memory_examples_per_second": memory_rate,
        "input_wait_fraction": _input_wait(meter.examples_per_second, memory_rate),
        "loss_scale_history": loss_scale.history,
        "fit_seconds": fit_seconds, "total_seconds": time.monotonic() - started,
        "final_metrics": final_metrics,
        "history": {name: [float(v) for v in values] for name, values in history.history.items()},
    }
    logging.info("Trained %s: %.0f examples/s, input wait %.1f%%, final %s", settings["model"],
                 report["examples_per_second"], 100 * (report["input_wait_fraction"] or 0), final_metrics)
    if is_chief():
        export_serving_model(model_module, preprocessing, float32_copy(model_module, preprocessing, model),
                             job.serving_model_dir)
    artifact_files.write_json(os.path.join(job.run_dir, REPORT_FILE), report)
    return report


def _compile(model: keras.Model, plan: dict, settings: dict, precision: str, xla: bool) -> None:
    """Adam with warmup and the scaled learning rate (wrapped for dynamic loss scaling under mixed_float16),
    binary cross-entropy, AUC and accuracy; XLA and steps per execution as decided."""
    accumulation = plan["gradient_accumulation_steps"]
    optimizer = keras.optimizers.Adam(WarmupThenConstant(plan["learning_rate"], settings["warmup_steps"]),
                                      gradient_accumulation_steps=accumulation if accumulation > 1 else None)
    if precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    model.compile(optimizer=optimizer, loss=keras.losses.BinaryCrossentropy(),
                  metrics=[keras.metrics.AUC(name="auc"), keras.metrics.BinaryAccuracy(name="binary_accuracy")],
                  jit_compile=xla, steps_per_execution=settings["steps_per_execution"])


def _work_around_keras_multi_worker_fit(model: keras.Model) -> None:
    """Keras 3's fit fails under MultiWorkerMirroredStrategy (tensorflow#72388) in two places; the model
    here is already built, so both can be sidestepped without changing what is trained:
    - fit reduces a sample batch across workers to build the model, and tf.distribute cannot reduce a dict
      of features there: without its own strategy the model skips that and takes the strategy from the
      enclosing scope;
    - each step reduces the scalar metrics along axis 0 across workers: inside a replica they are
      returned with shape [1], which that reduction turns back into scalars.
    """
    model._distribute_strategy = None
    plain_results = model.get_metrics_result

    def metrics_result():
        results = plain_results()
        if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
            return {name: tf.reshape(value, [1]) for name, value in results.items()}
        return results

    model.get_metrics_result = metrics_result


def _build_for_device(model_module, preprocessing, device: DeviceDescription, settings: dict, plan: dict,
                      probe_batch, memory_batches, multi_worker: bool):
    """Builds and compiles the model for this device; call inside the strategy's scope.

    With `xla: auto` on a device that may gain from XLA (an accelerator or a bf16 CPU), two candidates are
    built from the same initial weights and timed on the same in-memory batches: XLA with the policy the
    device gets with XLA, and no XLA with the policy it gets without. The XLA one is kept unless the other
    is at least 10% faster. A candidate whose first training step does not compile under XLA is dropped.
    Output: (compiled model, precision Decision, XLA Decision, in-memory examples/s or 0.0 when not timed).
    """
    wanted = settings["xla"]
    candidates = xla_candidates(device, wanted)
    measure = bool(settings["input_probe_steps"])
    built, failure = [], ""
    for xla in candidates:
        precision = choose_precision(device, xla=xla == "on", override=config_override(settings["precision"]))
        model = _build_and_compile(model_module, preprocessing, settings, plan, precision.value, xla == "on",
                                   multi_worker)
        try:  # the timing compiles the model first: with XLA that is also the check that it compiles at all
            if measure:
                rate = _in_memory_throughput(model, memory_batches, plan["global_batch"],
                                             settings["steps_per_execution"], settings["input_probe_steps"])
            else:
                rate = 0.0
                if xla == "on":
                    with _variables_restored(model):
                        model.train_on_batch(*probe_batch())
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.NotFoundError) as error:
            if xla != "on":
                raise
            failure = _xla_failure(str(error))
            logging.warning("XLA failed for %s, training without it: %s", settings["model"], failure)
            if candidates[-1] == "on":  # XLA was asked for: fall back to no XLA
                candidates.append("off")
            continue
        built.append((model, precision, xla, rate))
        if not measure:
            break
    model, precision, xla, rate = built[0]
    if failure:
        reason = f"XLA failed for this model on this strategy: {failure}"
    elif len(built) == 2:
        (_, with_policy, _, with_rate), (_, without_policy, _, without_rate) = built
        reason = (f"measured on in-memory batches: {with_rate:,.0f} examples/s with XLA ({with_policy.value}), "
                  f"{without_rate:,.0f} without ({without_policy.value})")
        if without_rate > 1.1 * with_rate:
            model, precision, xla, rate = built[1]
    elif wanted == "auto":
        reason = "plain CPU: nothing for XLA to gain"
    else:
        reason = "set in the config"
    return model, precision, Decision(xla, reason), rate


def _build_and_compile(model_module, preprocessing, settings: dict, plan: dict, policy: str, xla: bool,
                       multi_worker: bool) -> keras.Model:
    """Builds the model under `policy` from the configured seed (float32 output guaranteed), compiled."""
    keras.utils.set_random_seed(settings["seed"])
    keras.config.set_dtype_policy(policy)
    try:
        model = model_module.build_model(preprocessing)
        if model.output.dtype != "float32":  # the loss must see float32 outputs
            model = keras.Model(model.input, keras.layers.Activation("linear", dtype="float32")(model.output))
    finally:
        keras.config.set_dtype_policy("float32")
    if multi_worker:
        _work_around_keras_multi_worker_fit(model)
    _compile(model, plan, settings, policy, xla)
    return model


def _xla_failure(message: str) -> str:
    """Output: the gist of an XLA compile error: the op without an XLA kernel, else the first line."""
    missing = re.search(r"No registered '(\w+)' OpKernel for (\w+)", message)
    if missing:
        return f"no {missing.group(2)} kernel for the op {missing.group(1)}"
    return re.sub(r"^\{\{[^}]*\}\}\s*", "", message.strip()).splitlines()[0][:200]


@contextlib.contextmanager
def _variables_restored(model: keras.Model):
    """Every model and optimizer variable gets its value back when the block ends (probes train for real)."""
    model.optimizer.build(model.trainable_variables)
    variables = model.variables + model.optimizer.variables
    saved = [variable.numpy() for variable in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, saved):
            variable.assign(value)


def _in_memory_batches(train_data: tf.data.Dataset, settings: dict) -> tf.data.Dataset:
    """The first training batches (up to PROBE_BATCHES, at least one execution's worth), read once into
    memory and repeated: the timing measures compute, which does not depend on which batches it sees."""
    steps = max(settings["steps_per_execution"], min(settings["input_probe_steps"], PROBE_BATCHES))
    batches = train_data.take(steps).cache()
    if settings["input_probe_steps"]:
        for _ in batches:  # fill the cache now, not while timing
            pass
    return batches.repeat()


def _in_memory_throughput(model: keras.Model, batches: tf.data.Dataset, global_batch: int, execution: int,
                          steps: int) -> float:
    """Trains about `steps` steps on batches already in memory (compiling first), then restores every
    variable. Output: examples/s with no input cost."""
    steps = max(execution, steps // execution * execution)
    with _variables_restored(model):
        model.fit(batches, steps_per_epoch=execution, epochs=1, verbose=0)  # trace and compile
        start = time.perf_counter()
        model.fit(batches, steps_per_epoch=steps, epochs=1, verbose=0)
        seconds = time.perf_counter() - start
    return steps * global_batch / seconds


def _input_wait(real_rate: float, memory_rate: float) -> float | None:
    """Share of step time spent waiting for input: 1 - (throughput on real input / on in-memory batches)."""
    if not real_rate or not memory_rate:
        return None
    return max(0.0, 1.0 - real_rate / memory_rate)


def repair_checkpoint(checkpoint_dir: str) -> str:
    """Makes a checkpoint that a kill interrupted mid-write loadable again. Output: what was done.

    Keras writes the weights, then the metadata (the interval reached), each after copying the previous
    pair to `.bkp`. A pair with unreadable weights or unreadable metadata is replaced by the previous
    pair; with no readable previous pair the checkpoint is dropped and training starts from step 0
    (Keras, and the resume step read from the metadata, would otherwise fail on every restart).
    """
    weights = os.path.join(checkpoint_dir, BACKUP_WEIGHTS)
    metadata = os.path.join(checkpoint_dir, BACKUP_METADATA)
    if not fileio.exists(weights) and not fileio.exists(metadata):
        return "intact"
    if _readable_checkpoint(weights, metadata):
        return "intact"
    if _readable_checkpoint(weights + ".bkp", metadata + ".bkp"):
        fileio.copy(weights + ".bkp", weights, overwrite=True)
        fileio.copy(metadata + ".bkp", metadata, overwrite=True)
        logging.warning("The checkpoint in %s was cut off by a kill; resuming from the previous checkpoint",
                        checkpoint_dir)
        return "restored previous"
    fileio.rmtree(checkpoint_dir)
    logging.warning("The only checkpoint in %s was cut off by a kill; training starts from step 0", checkpoint_dir)
    return "dropped"


def _readable_checkpoint(weights: str, metadata: str) -> bool:
    """True when the weights open as HDF5 and the metadata parses with an interval number."""
    import h5py
    try:
        with h5py.File(io.BytesIO(artifact_files.read_bytes(weights)), "r"):
            pass
        return isinstance(artifact_files.read_json(metadata).get("epoch", 0), int)
    except (OSError, ValueError, AttributeError, tf.errors.OpError):
        return False


def _checkpointed_interval(checkpoint_dir: str) -> int:
    """The number of intervals the checkpoint holds (0 without one); call after repair_checkpoint."""
    path = os.path.join(checkpoint_dir, BACKUP_METADATA)
    return int(artifact_files.read_json(path).get("epoch", 0)) if fileio.exists(path) else 0


def _profile_window(settings: dict):
    if not settings["profile_steps"]:
        return 0
    return (settings["profile_from_step"], settings["profile_from_step"] + settings["profile_steps"] - 1)


def read_sample(file_patterns: list[str], inputs: dict, size: int) -> dict[str, np.ndarray]:
    """Input: training files and the model's input spec. Output: up to `size` rows, name -> 1-D array."""
    batches = make_dataset(file_patterns, inputs, batch_size=1024).take(-(-size // 1024))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in inputs}
    for batch in batches.as_numpy_iterator():
        for name, values in batch.items():
            parts[name].append(values)
    return {name: np.concatenate(values)[:size] for name, values in parts.items()}
