"""The GPU-aware training loop, independent of TFX: device -> strategy -> precision -> XLA -> fit -> export.

`train(job)` takes file patterns, output directories and the settings (the pipeline's TrainConfig) and
returns the training report, which the chief also writes as JSON. The model module (components.core.model_module.ModelModule)
supplies only its task, inputs and label, build_preprocessing(sample) and build_model(preprocessing); the
loss and metrics follow from the task (components/core/tasks.py) unless the module brings its own loss.
How the precision and XLA are probed is in probing.py, checkpoint handling in checkpoints.py.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import os
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from components.core import artifact_files, contract
from components.core.model_module import ModelModule, load_model_module, task_of
from components.core.records import TrainingReport, read_model_facts, write_model_facts
from components.core.tasks import LabelSummary, PredictionTarget
from components.settings import FOLDS_MIN_RECORDS, TaskConfig, TrainConfig
from components.trainer import callbacks as training_callbacks
from components.trainer.checkpoints import checkpointed_interval, repair_checkpoint
from components.trainer.device import Choice, DeviceDescription, choose_strategy, config_override, describe_devices
from components.trainer.distribution import (configure_gpus, is_chief, make_strategy, supported_steps_per_execution,
                                             worker_task)
from components.trainer.export import export_serving_model, float32_served
from components.trainer.input_pipeline import (DISK, MEMORY, InMemorySplit, PreprocessedCache, count_records,
                                               estimated_bytes, fill_cache, make_dataset, memory_budget_bytes)
from components.trainer.labels import read_labels
from components.trainer.plan import TrainingPlan, cosine_steps, schedule_of, training_plan, within_budget
from components.trainer.probing import build_for_device, in_memory_batches, input_wait
from components.trainer.warm_start import WarmStart, apply_warm_start, load_warm_start

ADAPT_SAMPLE_SIZE = 20_000  # rows used to fit the preprocessing layers (vocabularies, normalization)
MIN_SHARE_SECONDS = 1.0  # a searched candidate left less of the time budget than this is not trained
VALIDATION_BATCH = 1024  # examples per replica in a validation batch (TrainingSetup.validation_batch)


@dataclasses.dataclass
class TrainingJob:
    settings: TrainConfig  # the pipeline's `train` section
    train_files: list[str]
    eval_files: list[str]
    serving_model_dir: str  # the SavedModel goes here (chief only)
    run_dir: str  # TensorBoard logs and the training report
    checkpoint_dir: str  # stable across restarts of the same job: a killed job resumes from it
    base_model: str | None = None  # serving directory of the model to warm-start from (settings.warm_start)
    task_config: TaskConfig | None = None  # the config's `task` section (schema-driven model modules need it)
    schema_path: str | None = None  # the curated schema (schema-driven model modules read it)
    # a local folder where the preprocessed input is cached when it does not fit in memory, in a folder of
    # its own deleted when training ends ("": the system's temporary folder, $TMPDIR)
    scratch_dir: str = ""
    # the model module's candidate to train, alone ("": its default, or with settings.search each in turn);
    # the FP32 baseline trains the candidate's chosen one
    candidate: str = ""


@dataclasses.dataclass
class TrainingSetup:
    """What set_up decided before any model is built: the device and strategy, the model module and its
    preprocessing, the labels of each split, the plan, and how the input is fed."""
    settings: TrainConfig  # the job's, with steps_per_execution as the strategy supports it
    device: DeviceDescription
    strategy_choice: Choice
    strategy: object  # tf.distribute.Strategy
    model_module: ModelModule
    warm: WarmStart
    preprocessing: keras.Model
    labels: dict[str, LabelSummary]
    plan: TrainingPlan
    # where each split's preprocessed tensors are cached (memory or disk); train() closes it, which deletes
    # the disk cache's files
    input_cache: PreprocessedCache
    multi_worker: bool
    intervals_before_budget: int = 0  # the plan's intervals before the time budget cut them (0: not cut)
    # training records that validate every interval: held out (settings.validation_share), or all of them,
    # each scored out of fold (settings.folds)
    validation_examples: int = 0
    # the features the folds' and the holdout's hashes leave out: the label's sources (PredictionTarget.label_sources)
    leave_out: tuple[str, ...] = ()
    sample: dict | None = None  # the training rows the preprocessing was fitted to (None: the warm start's)
    plan_examples: dict[str, int] = dataclasses.field(default_factory=dict)  # records per split fit reads
    variant: str = ""  # the model module's candidate built ("": a module without candidates)
    folds_note: str = ""  # why train.folds was not applied (a training split too small to deal into folds)
    # the training split's tensors, read into memory once for training and, with folds, for validating; fit_model
    # lets go of them when it ends, and a setup made from this one (dataclasses.replace) reads its own
    training_split: InMemorySplit | None = dataclasses.field(default=None, init=False, repr=False)

    @property
    def folds(self) -> int:
        """The folds the model is bagged over (1: one model)."""
        return max(1, self.settings.folds)

    @property
    def splits(self) -> tuple[str, ...]:
        """The splits fit reads: the training split's fitted part, and what validates every interval (its
        holdout with validation_share, the whole split out of fold with folds), or else the eval split, scored
        once at the end."""
        if self.folds > 1:
            return ("train", "folds")
        return ("train", "validation") if self.settings.validation_share else ("train", "eval")

    @property
    def validation_batch(self) -> int:
        """The global batch a validation pass scores at: at least VALIDATION_BATCH examples per replica (a pass
        runs forward only, and a few large products take less time than many small ones), or training's, when
        larger."""
        return max(self.plan.global_batch, VALIDATION_BATCH * self.strategy.num_replicas_in_sync)

    @functools.cached_property
    def preprocess(self):
        """The preprocessing as one TensorFlow function of a batch of raw features, traced once for every
        dataset that reads them (a table's preprocessing is a large graph: tracing it takes seconds)."""
        spec = {name: tf.TensorSpec([None], feature.dtype) for name, feature in self.model_module.INPUTS.items()}
        return tf.function(self.preprocessing, input_signature=[spec])

    def reads_training_split(self, split: str) -> bool:
        """Whether `split` is batches cut from the training split read into memory once (training_split):
        "train" when placed in memory, and "folds" beside it (the same records, in file order). Not with
        validation_share, whose "train" leaves the holdout's records out."""
        return (split in ("train", "folds") and self.input_cache.places.get("train") == MEMORY
                and not self.settings.validation_share)

    @property
    def cache(self) -> bool:
        """The training split's preprocessed tensors are kept in memory (else in the disk cache)."""
        return self.input_cache.places.get("train") == MEMORY

    def dataset(self, files: list[str], training: bool, batch_size: int | None = None, split: str | None = None):
        """Batches of (model-ready features, labels) from `files`; repeated and shuffled for training. With
        `split` (placed in input_cache) the records are parsed and preprocessed once and the split's cache
        feeds every later pass; without it they are streamed (parsed and preprocessed on every pass). With
        validation_share, split "train" leaves the training records of the validation holdout out and
        "validation" keeps them alone. With folds, split "train" and "folds" (the whole training split, to
        validate on) carry each record's fold, and when "train" is in memory both are cut from one read of it
        (reads_training_split). Batches hold `batch_size` examples, by default training's global batch, or
        validation_batch for the split that validates (splits[1]): every reader of a split cuts it alike."""
        module, settings = self.model_module, self.settings
        batch = batch_size or (self.validation_batch if split == self.splits[1] else self.plan.global_batch)
        share = settings.validation_share

        def batches(cache: bool, shuffle: bool, repeat: bool, folds: bool,
                    preprocess=self.preprocess) -> tf.data.Dataset:
            return make_dataset(files, {**module.INPUTS, **module.LABEL_INPUTS}, batch,
                                label_fn=module.make_label, input_names=list(module.INPUTS), preprocess=preprocess,
                                shuffle_buffer=settings.shuffle_buffer if shuffle else 0, repeat=repeat, cache=cache,
                                cache_file=self.input_cache.cache_file(split) if cache else "", seed=settings.seed,
                                shard_by_data=self.multi_worker,
                                holdout_share=share if split in ("train", "validation") else 0.0,
                                holdout=split == "validation", folds=self.folds if folds else 0,
                                leave_out=self.leave_out)

        if split is not None and self.reads_training_split(split):
            if self.training_split is None:  # parsed once in file order, then preprocessed by the traced function
                self.training_split = InMemorySplit.read(batches(False, False, False, folds=True, preprocess=None),
                                                         self.preprocess)
            return self.training_split.batches(batch, training and bool(settings.shuffle_buffer),
                                               repeat=training, seed=settings.seed, shard_by_data=self.multi_worker,
                                               cache_file=None if training else self.input_cache.cache_file(split))
        return batches(split is not None, training, training, folds=split in ("train", "folds"))


@dataclasses.dataclass
class FitResult:
    """What fit_model measured."""
    model: keras.Model
    precision: Choice
    xla: Choice
    in_memory_rate: float
    host_rate: float  # examples/s the input pipeline alone delivers (0.0: not measured)
    resumed_from_step: int
    meter: training_callbacks.ThroughputMeter
    loss_scale: training_callbacks.LossScaleRecorder
    checkpoints: training_callbacks.SpacedBackupAndRestore
    best: training_callbacks.KeepBest | None  # with validation_share or folds: the best interval, restored
    budget: training_callbacks.StopAtTimeBudget | None  # with time_budget_seconds
    history: dict[str, list[float]]
    fit_seconds: float
    build_seconds: float = 0.0  # building, compiling and probing the model for the device (warm start included)
    choose_seconds: float = 0.0  # after fitting: validation passes that choose the intervals averaged
    # a searched candidate whose share of the time budget would have cut its plan trained alone, with the
    # whole budget
    alone: bool = False

    @property
    def intervals_run(self) -> int:
        """The intervals this fit ran (a resumed job: those after its checkpoint)."""
        return len(next(iter(self.history.values()), []))


@dataclasses.dataclass
class Search:
    """What train.search tried: each candidate's setup and fit, in the order trained, and why it stopped
    short of the module's every candidate ("" when it did not)."""
    tried: list[tuple[str, TrainingSetup, FitResult]]
    budget: float = 0.0  # the whole time budget the candidates shared (0: none)
    note: str = ""

    def chosen(self) -> tuple[str, TrainingSetup, FitResult]:
        """The candidate best on validation (the first of equals, so the default wins a tie)."""
        task = task_of(self.tried[0][1].model_module)
        sign = 1 if task.primary.higher_is_better else -1
        def score(index: int) -> tuple[float, int]:
            value = self.tried[index][2].best.best_value
            return (-math.inf if value is None else sign * value, -index)
        return self.tried[max(range(len(self.tried)), key=score)]

    def to_json(self) -> list[dict]:
        return [{"name": name, "validation": fitted.best.best_value, "best_interval": fitted.best.best_interval,
                 "intervals_run": fitted.intervals_run, "fit_seconds": fitted.fit_seconds,
                 "time_budget_seconds": setup.settings.time_budget_seconds,
                 "resumed_from_step": fitted.resumed_from_step}
                for name, setup, fitted in self.tried]


def train(job: TrainingJob, extra_callbacks: tuple = ()) -> TrainingReport:
    """Trains and exports one model; returns the training report (also written to run_dir by the chief)."""
    started = time.monotonic()
    setup = set_up(job)
    prepared = time.monotonic() - started
    names, note = candidates_to_search(job, setup)
    if len(names) < 2:
        with setup.input_cache:  # the disk cache's files go when training ends, or fails
            fitted = fit_model(job, setup, extra_callbacks)
        return report_and_export(job, setup, fitted, started, prepared, search_note=note)
    search = search_candidates(job, setup, names, extra_callbacks)
    _, chosen_setup, fitted = search.chosen()
    return report_and_export(job, chosen_setup, fitted, started, prepared, search=search)


def base_variant(base_model: str | None, model_module: ModelModule) -> str:
    """The candidate the base model (a warm start's) was built as, when the model module has it; else ""."""
    if not base_model:
        return ""
    try:
        variant = read_model_facts(base_model).variant
    except (OSError, ValueError):  # an unreadable base: the warm start says why, and trains from scratch
        return ""
    return variant if variant in getattr(model_module, "CANDIDATES", ()) else ""


def candidates_to_search(job: TrainingJob, setup: TrainingSetup) -> tuple[tuple[str, ...], str]:
    """Input: the job and its setup. Output: the model module's candidates settings.search trains in turn
    (fewer than two: no search) and why none are searched ("" when they are, or search is off)."""
    names = tuple(getattr(setup.model_module, "CANDIDATES", ()))
    if not setup.settings.search or job.candidate:
        return (), ""
    if len(names) < 2:
        return (), f"not searched: {setup.settings.model} declares no candidates to choose among"
    if setup.warm.preprocessing is not None:
        return (), "not searched: the warm start continues the served model's variant" + (
            f", {setup.variant}" if setup.variant else "")
    if not setup.validation_examples:
        return (), "not searched: no validation (train.folds or train.validation_share) to choose by"
    return names, ""


def search_candidates(job: TrainingJob, setup: TrainingSetup, names: tuple[str, ...],
                      extra_callbacks: tuple = ()) -> Search:
    """Trains each candidate in turn (the one set_up built is used as built), each from the same seed
    with the time budget left shared among those still to train, and each with a checkpoint folder of its own
    (a killed search resumes the candidate it was in; those before it train again). When the first one's
    share would cut its plan it trains alone with the whole budget and the search ends there; it also ends
    when no time is left, or when a later candidate diverges (the ones before it still compete). Without a
    time budget every candidate trains its whole plan."""
    budget, spent = setup.settings.time_budget_seconds, 0.0
    search = Search([], budget)
    for index, name in enumerate(names):
        share = (budget - spent) / (len(names) - index) if budget else 0.0
        if budget and share < MIN_SHARE_SECONDS:
            search.note = f"{', '.join(names[index:])} not tried: the {budget:g} s time budget was spent"
            break
        # set_up built one variant (a skipped warm start's base's, or the default): the others are built here
        candidate = setup if name == setup.variant else with_candidate(job, setup, name)
        candidate.settings = dataclasses.replace(candidate.settings, time_budget_seconds=share)
        folder = f"candidate-{index}"  # its own checkpoints and TensorBoard logs
        candidate_job = dataclasses.replace(job, checkpoint_dir=os.path.join(job.checkpoint_dir, folder),
                                            run_dir=os.path.join(job.run_dir, folder))
        logging.info("Search: candidate %d of %d, %s%s", index + 1, len(names), name,
                     f", {share:.0f} s of the time budget" if budget else "")
        try:
            with candidate.input_cache:
                fitted = fit_model(candidate_job, candidate, extra_callbacks,
                                   whole_budget=budget if index == 0 else 0.0)
        except training_callbacks.TrainingDivergedError as error:
            if not search.tried:
                raise
            logging.warning("Search: %s diverged, left out (%s)", name, error)
            search.note = f"{name} left out: {error}"
            break
        search.tried.append((name, candidate, fitted))
        spent += fitted.fit_seconds
        if fitted.alone:
            search.note = (f"{name} alone: its share of the {budget:g} s time budget would have cut its plan, "
                           "so it had the whole budget")
            break
    return search


def with_candidate(job: TrainingJob, setup: TrainingSetup, name: str) -> TrainingSetup:
    """set_up's decisions for another candidate of the model module: the candidate's preprocessing fitted to
    the same sample from the same seed, the plan as planned, and an input cache of its own."""
    module = setup.model_module.candidate(name)
    keras.utils.set_random_seed(setup.settings.seed)
    candidate = dataclasses.replace(setup, model_module=module, preprocessing=module.build_preprocessing(setup.sample),
                                    variant=name,
                                    plan=training_plan(setup.plan_examples["train"], setup.settings,
                                                       setup.strategy.num_replicas_in_sync),
                                    input_cache=PreprocessedCache(memory_budget_bytes(setup.settings.cache_max_mb),
                                                                  job.scratch_dir),
                                    intervals_before_budget=0)
    place_input_cache(job, candidate)
    return candidate


def set_up(job: TrainingJob) -> TrainingSetup:
    """The device, the strategy, the model module and its preprocessing (the warm start's, or fitted to a
    sample), every label read once (bad labels stop here), the plan and where each split's preprocessed
    tensors are cached (memory while they fit cache_max_mb, else disk)."""
    settings = job.settings
    device = describe_devices()
    configure_gpus(settings.gpu_memory_growth, settings.gpu_memory_limit_mb)
    strategy_choice = choose_strategy(device, config_override(settings.strategy))
    strategy = make_strategy(strategy_choice.value, device)
    replicas = strategy.num_replicas_in_sync
    logging.info("Training on %s: strategy %s (%s), %d replica(s)", device, strategy_choice.value,
                 strategy_choice.reason, replicas)
    model_module = load_model_module(settings.model, job.task_config, job.schema_path)
    variant = job.candidate or (base_variant(job.base_model, model_module) if settings.warm_start else "")
    if variant:
        model_module = model_module.candidate(variant)
    keras.utils.set_random_seed(settings.seed)
    keras.config.set_dtype_policy("float32")
    task, classes = task_of(model_module), tuple(model_module.CLASSES)
    labels = {split: task.summarize_labels(read_labels(files, model_module, task, split), classes)
              for split, files in (("train", job.train_files), ("eval", job.eval_files))}
    settings, folds_note = one_model_when_few(settings, labels["train"].examples)
    warm = load_warm_start(model_module, job.base_model, settings.warm_start, settings.folds)
    preprocessing, sample = warm.preprocessing, None
    if preprocessing is None:
        sample = read_sample(job.train_files, {**model_module.INPUTS, **model_module.LABEL_INPUTS}, ADAPT_SAMPLE_SIZE)
        preprocessing = model_module.build_preprocessing(sample)
    settings = dataclasses.replace(
        settings, steps_per_execution=supported_steps_per_execution(settings.steps_per_execution, replicas))
    multi_worker = strategy_choice.value == "multi_worker_mirrored"
    if multi_worker and settings.time_budget_seconds:  # each worker's clock would end training at its own epoch
        logging.warning("train.time_budget_seconds %g is not applied with several workers (they must agree on "
                        "the epoch that ends training): the plan's epochs bound it", settings.time_budget_seconds)
        settings = dataclasses.replace(settings, time_budget_seconds=0.0)
    leave_out = PredictionTarget.of(model_module).label_sources
    held_out = count_records(job.train_files, settings.validation_share, leave_out) if settings.validation_share else 0
    if settings.validation_share and not 0 < held_out < labels["train"].examples:
        raise ValueError(f"train.validation_share {settings.validation_share:g} holds out {held_out} of the "
                         f"{labels['train'].examples} training records: too few to validate on, or to train on")
    examples = {"train": labels["train"].examples - held_out, "validation": held_out, "eval": labels["eval"].examples,
                "folds": labels["train"].examples}
    validating = held_out or (examples["folds"] if settings.folds > 1 else 0)
    setup = TrainingSetup(settings, device, strategy_choice, strategy, model_module, warm, preprocessing, labels,
                          training_plan(examples["train"], settings, replicas),
                          PreprocessedCache(memory_budget_bytes(settings.cache_max_mb), job.scratch_dir),
                          multi_worker, validation_examples=validating, leave_out=leave_out, sample=sample,
                          plan_examples=examples,
                          variant=variant or next(iter(getattr(model_module, "CANDIDATES", ())), ""),
                          folds_note=folds_note)
    place_input_cache(job, setup)
    return setup


def one_model_when_few(settings: TrainConfig, training_records: int) -> tuple[TrainConfig, str]:
    """Input: the train settings and the training split's records. Output: the settings, with train.folds off
    when the split is too small to deal into them (fewer than FOLDS_MIN_RECORDS, or two per fold), and a note
    saying so ("" when the folds apply)."""
    if settings.folds <= 1 or training_records >= max(FOLDS_MIN_RECORDS, 2 * settings.folds):
        return settings, ""
    note = (f"train.folds {settings.folds} not applied: the training split holds {training_records} record(s), "
            f"fewer than {max(FOLDS_MIN_RECORDS, 2 * settings.folds)}: one model trained on all of them")
    logging.warning(note)
    return dataclasses.replace(settings, folds=0), note


def place_input_cache(job: TrainingJob, setup: TrainingSetup) -> None:
    """Places each split's preprocessed tensors in memory or on disk, their size estimated from the first
    training rows preprocessed (the sample's, or read here when a warm start fitted none): the training split
    has the first claim on memory."""
    module, rows = setup.model_module, min(setup.plan.global_batch, 1024)
    sample = setup.sample
    if sample is None:
        sample = read_sample(job.train_files, {**module.INPUTS, **module.LABEL_INPUTS}, rows)
    head = {name: tf.convert_to_tensor(values[:rows]) for name, values in sample.items()}
    first = (setup.preprocess({name: head[name] for name in module.INPUTS}), module.make_label(head))
    for split in setup.splits:  # "folds" beside "train" in memory: its batches as validation cuts them, a copy
        setup.input_cache.place(split, estimated_bytes(first, setup.plan_examples[split]))


def fit_model(job: TrainingJob, setup: TrainingSetup, extra_callbacks: tuple = (),
              whole_budget: float = 0.0) -> FitResult:
    """Builds the model for the device (precision and XLA probed), warm-starts it, cuts the plan to the time
    budget, resumes from this job's checkpoint when there is one, and fits it with the best-interval (when
    validating), time-budget, checkpoint, divergence, throughput and loss-scale callbacks. With
    `whole_budget` (a searched candidate's), a plan that its share of the budget would cut trains alone with
    the whole budget instead (FitResult.alone)."""
    settings, plan, replicas = setup.settings, setup.plan, setup.strategy.num_replicas_in_sync

    def probe_batch():  # a few examples to check that XLA compiles when no timing does it
        return next(iter(setup.dataset(job.train_files, False, batch_size=8 * replicas)))

    files_of = {"train": job.train_files, "validation": job.train_files, "folds": job.train_files,
                "eval": job.eval_files}
    for split in setup.splits:
        if setup.input_cache.places[split] == DISK:  # written once here, only read from then on
            fill_cache(setup.dataset(files_of[split], False, split=split))
    train_data = setup.dataset(job.train_files, True, split="train")  # in memory: read and preprocessed here
    # the model is timed on batches of the very form training feeds it (same shapes), held in memory
    memory_batches = in_memory_batches(train_data, settings)
    build_started = time.monotonic()
    with setup.strategy.scope():
        model, precision, xla, memory_rate = build_for_device(
            setup.model_module, setup.preprocessing, setup.device, settings, plan, probe_batch, memory_batches,
            setup.multi_worker)
        apply_warm_start(model, setup.warm)  # a checkpoint of this job, when there is one, still wins (resume)
    logging.info("Precision %s (%s); XLA %s (%s)", precision.value, precision.reason, xla.value, xla.reason)
    budgeted = within_budget(plan, settings, memory_rate, setup.validation_examples)
    alone = bool(whole_budget) and budgeted != plan
    if alone:  # the share would cut this candidate: it trains alone, as it would without a search
        settings = setup.settings = dataclasses.replace(settings, time_budget_seconds=whole_budget)
        budgeted = within_budget(plan, settings, memory_rate, setup.validation_examples)
    if budgeted != plan:  # fewer intervals fit the time budget: the cosine then ends with the last of them
        schedule = schedule_of(model.optimizer)
        if schedule is not None:
            schedule.shorten(cosine_steps(budgeted, settings))
        logging.info("%d of the %d planned intervals fit the time budget of %g s at %.0f examples/s", budgeted.intervals,
                     plan.intervals, settings.time_budget_seconds, memory_rate)
        setup.intervals_before_budget, setup.plan, plan = plan.intervals, budgeted, budgeted
    host_rate = host_throughput(train_data, plan.global_batch, settings.input_probe_steps)
    build_seconds = time.monotonic() - build_started

    checkpoint_dir = job.checkpoint_dir
    if setup.multi_worker:  # each worker keeps its own copy of the (identical) training state
        checkpoint_dir = os.path.join(checkpoint_dir, "%s-%d" % worker_task())
    repair_checkpoint(checkpoint_dir)
    resumed_from_step = checkpointed_interval(checkpoint_dir) * plan.steps_per_interval
    meter = training_callbacks.ThroughputMeter(plan.global_batch)
    loss_scale = training_callbacks.LossScaleRecorder()
    # Workers must resume from the same interval, and each one's clock would space its checkpoints its own
    # way: with several workers every interval ends with a checkpoint.
    spacing = 0.0 if setup.multi_worker else settings.checkpoint_min_seconds
    checkpoints = training_callbacks.SpacedBackupAndRestore(checkpoint_dir, spacing)
    task = task_of(setup.model_module)
    best = None
    if setup.validation_examples:  # validated every interval; the best interval's weights are kept
        best = training_callbacks.KeepBest(f"val_{task.validation_metric}", task.primary.higher_is_better,
                                           settings.early_stopping_patience, average=settings.average_intervals)
    budget = (training_callbacks.StopAtTimeBudget(settings.time_budget_seconds) if settings.time_budget_seconds
              else None)
    # KeepBest and the budget first: the interval that ends training early is still checkpointed after it
    callbacks = [*([best] if best else []), *([budget] if budget else []), checkpoints,
                 training_callbacks.StopOnDivergence(plan.steps_per_interval),
                 meter, loss_scale,
                 *([training_callbacks.ProgressLine(plan.intervals, best)]
                   if is_chief() else []),
                 keras.callbacks.TensorBoard(_log_dir(job.run_dir, is_chief()), profile_batch=_profile_window(settings)),
                 *extra_callbacks]
    validation_split = setup.splits[1]
    validation_data = setup.dataset(files_of[validation_split], False, split=validation_split)
    with setup.strategy.scope():
        if resumed_from_step:
            logging.info("Resuming from the checkpoint at step %d in %s", resumed_from_step, checkpoint_dir)
        logging.info("Training %d steps (%d intervals of %d) on %d examples, global batch %d%s", plan.total_steps,
                     plan.intervals, plan.steps_per_interval, setup.labels["train"].examples - held_out_of(setup),
                     plan.global_batch, f", validating on {validation_phrase(setup)}" if best else "")
        fit_started = time.monotonic()
        history = model.fit(train_data,
                            steps_per_epoch=plan.steps_per_interval, epochs=plan.intervals,
                            validation_data=validation_data,
                            validation_freq=1 if best else [plan.intervals], callbacks=callbacks, verbose=0)
        fit_seconds, choose_started = time.monotonic() - fit_started, time.monotonic()
        if best and settings.average_intervals > 1:
            best.average_kept(lambda weights: validation_logs(model, weights, validation_data))
            logging.info("Served the average of intervals %s: %s %.4f on validation",
                         ", ".join(map(str, best.averaged_intervals)), best.monitor, best.best_value)
    setup.training_split = None  # the next candidate's preprocessing is not this one's
    return FitResult(model, precision, xla, memory_rate, host_rate, resumed_from_step, meter, loss_scale, checkpoints,
                     best, budget, {name: [float(v) for v in values] for name, values in history.history.items()},
                     fit_seconds, build_seconds, time.monotonic() - choose_started, alone)


def validation_logs(model: keras.Model, weights: list, validation_data: tf.data.Dataset) -> dict[str, float]:
    """The model with `weights` scored on the validation data, keyed as fit's validation logs ("val_loss", ...)."""
    model.set_weights(weights)
    scores = model.evaluate(validation_data, verbose=0, return_dict=True)
    return {f"val_{name}": float(value) for name, value in scores.items()}


def held_out_of(setup: TrainingSetup) -> int:
    """Training records no copy of the model trains on (validation_share's holdout; none with folds)."""
    return 0 if setup.folds > 1 else setup.validation_examples


def validation_phrase(setup: TrainingSetup) -> str:
    """What validates every interval, e.g. "1,024 held-out training records" or "all 6,000 training records,
    out of fold (4 folds)"."""
    if setup.folds > 1:
        return f"all {setup.validation_examples:,} training records, out of fold ({setup.folds} folds)"
    return f"{setup.validation_examples:,} held-out training records"


def report_and_export(job: TrainingJob, setup: TrainingSetup, fitted: FitResult, started: float, prepared: float,
                      search: Search | None = None, search_note: str = "") -> TrainingReport:
    """Input: the job, the setup and fit of the model served, when training started (time.monotonic()) and the
    seconds set_up took. The training report (with a search: the chosen candidate's training, and what every
    candidate scored, its phases' seconds summed over the candidates); the chief also exports the float32 serving
    model, its facts and the report."""
    module, meter = setup.model_module, fitted.meter
    fits = [tried for _, _, tried in search.tried] if search else [fitted]
    phases = {"preparing": prepared, "building": sum(fit.build_seconds for fit in fits),
              "fitting": sum(fit.fit_seconds for fit in fits), "choosing": sum(fit.choose_seconds for fit in fits)}
    report = TrainingReport(
        model=setup.settings.model, task_name=task_of(module).name, label=module.LABEL_KEY,
        classes=list(module.CLASSES), labels=setup.labels, device=dataclasses.asdict(setup.device),
        strategy=setup.strategy_choice.value, strategy_reason=setup.strategy_choice.reason,
        replicas=setup.strategy.num_replicas_in_sync, worker="%s-%d" % worker_task(),
        precision=fitted.precision.value, precision_reason=fitted.precision.reason, xla=fitted.xla.value == "on",
        xla_reason=fitted.xla.reason, train_examples=setup.labels["train"].examples, cached_in_memory=setup.cache,
        input_cache=setup.input_cache.places["train"],
        plan=dataclasses.asdict(setup.plan), steps_per_execution=setup.settings.steps_per_execution,
        warm_start=setup.warm.to_json(), resumed_from_step=fitted.resumed_from_step, steps_run=meter.steps,
        checkpoints_written=fitted.checkpoints.checkpoints_written, examples_per_second=meter.examples_per_second,
        step_seconds=meter.step_seconds, interval_seconds=meter.interval_seconds, in_memory_examples_per_second=fitted.in_memory_rate,
        input_wait_fraction=input_wait(meter.examples_per_second, fitted.in_memory_rate),
        host_examples_per_second=fitted.host_rate,
        loss_scale_history=fitted.loss_scale.history, fit_seconds=phases["fitting"], phase_seconds=phases,
        final_metrics=_final_metrics(fitted), history=fitted.history,
        model_description=getattr(module, "DESCRIPTION", ""), validation_examples=setup.validation_examples,
        folds=setup.folds, intervals_run=fitted.intervals_run,
        best_interval=fitted.best.best_interval if fitted.best else 0,
        averaged_intervals=list(fitted.best.averaged_intervals) if fitted.best else [],
        stopped_early=bool(fitted.best and fitted.best.stopped_early),
        time_budget_seconds=search.budget if search else setup.settings.time_budget_seconds,
        candidate=setup.variant,
        candidates=search.to_json() if search else [], search_note=(search.note if search else search_note),
        intervals_before_budget=setup.intervals_before_budget,
        stopped_at_budget=bool(fitted.budget and fitted.budget.stopped), folds_note=setup.folds_note)
    logging.info("Trained %s: %.0f examples/s, input wait %.1f%%, %s, final %s", report.model,
                 report.examples_per_second, 100 * (report.input_wait_fraction or 0), report.schedule_line(),
                 report.final_metrics)
    exporting = time.monotonic()
    if is_chief():  # every worker holds the same model; the chief alone writes what the run leaves behind
        export_serving_model(module, setup.preprocessing,
                             float32_served(module, setup.preprocessing, fitted.model, setup.folds), job.serving_model_dir)
        write_model_facts(job.serving_model_dir, report.facts())
    report.phase_seconds["exporting"] = time.monotonic() - exporting
    report.total_seconds = time.monotonic() - started
    if is_chief():
        artifact_files.write_json(os.path.join(job.run_dir, contract.TRAINING_REPORT_FILE), report.to_json())
    return report


def _final_metrics(fitted: FitResult) -> dict[str, float]:
    """Each metric's value at the interval whose weights were kept: the best one on validation, else the last;
    the validation metrics of the average when intervals were averaged."""
    kept = fitted.best.best_interval - 1 if fitted.best and fitted.best.best_interval else -1
    metrics = {name: values[kept] if len(values) > kept else values[-1] for name, values in fitted.history.items()}
    return {**metrics, **(fitted.best.averaged_logs if fitted.best else {})}


HOST_TIMING_STEPS = 1000  # at least this many batches time the host ceiling (a few tenths of a second)


def host_throughput(train_data: tf.data.Dataset, global_batch: int, steps: int) -> float:
    """Examples/s the training input pipeline alone delivers in its steady state (no model), pulled inside
    TensorFlow as training's steps pull it: max(`steps`, HOST_TIMING_STEPS) batches timed after `steps`
    batches of warm-up (0 steps: not measured, 0.0). Its ratio to the model's rate on in-memory batches says
    how many times faster a device could be before this host would starve it."""
    if not steps:
        return 0.0
    batches = iter(train_data)
    _pull(batches, tf.constant(steps, tf.int64))
    timed = max(steps, HOST_TIMING_STEPS)
    start = time.perf_counter()
    _pull(batches, tf.constant(timed, tf.int64))
    return timed * global_batch / (time.perf_counter() - start)


@tf.function
def _pull(batches, count):
    """Takes `count` batches from the iterator `batches` inside TensorFlow (traced once per input signature)."""
    for _ in tf.range(count):
        next(batches)


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
