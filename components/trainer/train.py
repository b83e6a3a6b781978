"""The GPU-aware training loop, independent of TFX: device -> strategy -> precision -> XLA -> fit -> export.

`train(job)` takes file patterns, output directories and the settings (the pipeline's TrainConfig) and
returns the training report, which the chief also writes as JSON. The model module (models.interface.ModelModule)
supplies only its task, inputs and label, build_preprocessing(sample) and build_model(preprocessing); the
loss and metrics follow from the task (components/tasks.py) unless the module brings its own loss.
How the precision and XLA are probed is in probing.py, checkpoint handling in checkpoints.py.
"""
from __future__ import annotations

import dataclasses
import os
import tempfile
import time

import keras
import numpy as np
from absl import logging

from components import artifact_files, contract
from components.settings import TaskConfig, TrainConfig
from components.trainer import callbacks as training_callbacks
from components.trainer.checkpoints import checkpointed_interval, repair_checkpoint
from components.trainer.device import choose_strategy, config_override, describe_devices
from components.trainer.distribution import (configure_gpus, is_chief, make_strategy, supported_steps_per_execution,
                                             worker_task)
from components.trainer.export import export_serving_model, float32_copy
from components.tasks import summarize_labels
from components.trainer.export import model_facts, write_model_facts
from components.trainer.input_pipeline import fits_in_memory, make_dataset
from components.trainer.labels import read_labels
from components.trainer.plan import training_plan
from components.trainer.probing import build_for_device, in_memory_batches, input_wait
from components.trainer.warm_start import apply_warm_start, load_warm_start
from models.interface import load_model_module, task_of

ADAPT_SAMPLE_SIZE = 20_000  # rows used to fit the preprocessing layers (vocabularies, normalization)


@dataclasses.dataclass
class TrainingJob:
    settings: TrainConfig  # the pipeline's `train` section
    train_files: list[str]
    eval_files: list[str]
    serving_model_dir: str  # the SavedModel goes here (chief only)
    run_dir: str  # TensorBoard logs and the training report
    checkpoint_dir: str  # stable across restarts of the same job: a killed job resumes from it
    base_model: str | None = None  # serving directory of the model to warm-start from (settings.warm_start)
    task: TaskConfig | None = None  # the config's `task` section (schema-driven model modules need it)
    schema_path: str | None = None  # the curated schema (schema-driven model modules read it)


def train(job: TrainingJob, extra_callbacks: tuple = ()) -> dict:
    """Trains and exports one model; returns the training report (also written to run_dir)."""
    settings = job.settings
    started = time.monotonic()
    device = describe_devices()
    configure_gpus(settings.gpu_memory_growth, settings.gpu_memory_limit_mb)
    strategy_choice = choose_strategy(device, config_override(settings.strategy))
    strategy = make_strategy(strategy_choice.value, device)
    replicas = strategy.num_replicas_in_sync
    logging.info("Training on %s: strategy %s (%s), %d replica(s)", device, strategy_choice.value,
                 strategy_choice.reason, replicas)

    model_module = load_model_module(settings.model, job.task, job.schema_path)
    keras.utils.set_random_seed(settings.seed)
    keras.config.set_dtype_policy("float32")
    warm = load_warm_start(model_module, job.base_model, settings.warm_start)
    preprocessing = warm.preprocessing
    if preprocessing is None:
        sample = read_sample(job.train_files, {**model_module.INPUTS, **model_module.LABEL_INPUTS}, ADAPT_SAMPLE_SIZE)
        preprocessing = model_module.build_preprocessing(sample)

    task = task_of(model_module)
    labels = {split: read_labels(files, model_module, task, split)  # one pass each: counts, and bad labels stop here
              for split, files in (("train", job.train_files), ("eval", job.eval_files))}
    label_summaries = {split: summarize_labels(task, values, tuple(model_module.CLASSES))
                       for split, values in labels.items()}
    train_examples = label_summaries["train"].examples
    settings = dataclasses.replace(
        settings, steps_per_execution=supported_steps_per_execution(settings.steps_per_execution, replicas))
    plan = training_plan(train_examples, settings, replicas)
    cache = fits_in_memory(job.train_files + job.eval_files, settings.cache_max_mb)
    multi_worker = strategy_choice.value == "multi_worker_mirrored"

    def dataset(files, training, batch_size=plan.global_batch, cache=cache):
        return make_dataset(files, {**model_module.INPUTS, **model_module.LABEL_INPUTS}, batch_size,
                            label_fn=model_module.make_label, input_names=list(model_module.INPUTS),
                            preprocess=preprocessing, shuffle_buffer=settings.shuffle_buffer if training else 0,
                            repeat=training, cache=cache, seed=settings.seed, shard_by_data=multi_worker)

    def probe_batch():  # a few examples to check that XLA compiles when no timing does it
        return next(iter(dataset(job.train_files, False, batch_size=8 * replicas, cache=False)))

    memory_batches = in_memory_batches(dataset(job.train_files, True, cache=False), settings)
    with strategy.scope():
        model, precision, xla, memory_rate = build_for_device(
            model_module, preprocessing, device, settings, plan, probe_batch, memory_batches, multi_worker)
        apply_warm_start(model, warm)  # a checkpoint of this job, when there is one, still wins (resume)
    logging.info("Precision %s (%s); XLA %s (%s)", precision.value, precision.reason, xla.value, xla.reason)

    worker = "%s-%d" % worker_task()
    checkpoint_dir = job.checkpoint_dir
    if multi_worker:  # each worker keeps its own copy of the (identical) training state
        checkpoint_dir = os.path.join(checkpoint_dir, worker)
    repair_checkpoint(checkpoint_dir)
    resumed_from_step = checkpointed_interval(checkpoint_dir) * plan.steps_per_interval
    meter = training_callbacks.ThroughputMeter(plan.global_batch)
    loss_scale = training_callbacks.LossScaleRecorder()
    # Workers must resume from the same interval, and each one's clock would space its checkpoints its own
    # way: with several workers every interval ends with a checkpoint.
    spacing = 0.0 if multi_worker else settings.checkpoint_min_seconds
    checkpoints = training_callbacks.SpacedBackupAndRestore(checkpoint_dir, spacing)
    chief = is_chief()
    callbacks = [checkpoints, training_callbacks.StopOnDivergence(plan.steps_per_interval), meter, loss_scale,
                 keras.callbacks.TensorBoard(_log_dir(job.run_dir, chief), profile_batch=_profile_window(settings)),
                 *extra_callbacks]
    with strategy.scope():
        if resumed_from_step:
            logging.info("Resuming from the checkpoint at step %d in %s", resumed_from_step, checkpoint_dir)
        logging.info("Training %d steps (%d intervals of %d) on %d examples, global batch %d", plan.total_steps,
                     plan.intervals, plan.steps_per_interval, train_examples, plan.global_batch)
        fit_started = time.monotonic()
        history = model.fit(dataset(job.train_files, True), steps_per_epoch=plan.steps_per_interval,
                            epochs=plan.intervals, validation_data=dataset(job.eval_files, False),
                            validation_freq=[plan.intervals], callbacks=callbacks, verbose=0)
    fit_seconds = time.monotonic() - fit_started

    final_metrics = {name: float(values[-1]) for name, values in history.history.items()}
    report = {
        "model": settings.model, "task": task.name, "label": model_module.LABEL_KEY,
        "classes": list(model_module.CLASSES),
        "labels": {split: summary.to_json() for split, summary in label_summaries.items()},
        "device": dataclasses.asdict(device),
        "strategy": strategy_choice.value, "strategy_reason": strategy_choice.reason, "replicas": replicas,
        "worker": worker, "precision": precision.value, "precision_reason": precision.reason,
        "xla": xla.value == "on", "xla_reason": xla.reason,
        "train_examples": train_examples, "cached_in_memory": cache, **dataclasses.asdict(plan),
        "steps_per_execution": settings.steps_per_execution,
        "warm_start": warm.to_json(), "resumed_from_step": resumed_from_step, "steps_run": meter.steps,
        "checkpoints_written": checkpoints.checkpoints_written,
        "examples_per_second": meter.examples_per_second, "step_seconds": meter.step_seconds,
        "in_memory_examples_per_second": memory_rate,
        "input_wait_fraction": input_wait(meter.examples_per_second, memory_rate),
        "loss_scale_history": loss_scale.history,
        "fit_seconds": fit_seconds, "total_seconds": time.monotonic() - started,
        "final_metrics": final_metrics,
        "history": {name: [float(v) for v in values] for name, values in history.history.items()},
    }
    logging.info("Trained %s: %.0f examples/s, input wait %.1f%%, final %s", settings.model,
                 report["examples_per_second"], 100 * (report["input_wait_fraction"] or 0), final_metrics)
    if chief:  # every worker holds the same model; the chief alone writes what the run leaves behind
        export_serving_model(model_module, preprocessing, float32_copy(model_module, preprocessing, model),
                             job.serving_model_dir)
        write_model_facts(job.serving_model_dir, model_facts(report))
        artifact_files.write_json(os.path.join(job.run_dir, contract.TRAINING_REPORT_FILE), report)
    return report


def _log_dir(run_dir: str, chief: bool) -> str:
    """Where TensorBoard writes: the run's logs/ for the chief; a local scratch folder for other workers,
    which run the same callbacks but must not write into the run's folder beside the chief."""
    return os.path.join(run_dir, "logs") if chief else tempfile.mkdtemp(prefix="tensorboard-worker-")


def _profile_window(settings: TrainConfig) -> int | tuple[int, int]:
    """TensorBoard's profile_batch: 0 (no trace) or the first and last step of the traced window."""
    if not settings.profile_steps:
        return 0
    return (settings.profile_from_step, settings.profile_from_step + settings.profile_steps - 1)


def read_sample(file_patterns: list[str], inputs: dict, size: int) -> dict[str, np.ndarray]:
    """Input: training files and the model's input spec. Output: up to `size` rows, name -> 1-D array."""
    batches = make_dataset(file_patterns, inputs, batch_size=1024).take(-(-size // 1024))
    parts: dict[str, list[np.ndarray]] = {name: [] for name in inputs}
    for batch in batches.as_numpy_iterator():
        for name, values in batch.items():
            parts[name].append(values)
    return {name: np.concatenate(values)[:size] for name, values in parts.items()}
