"""Builds and compiles the model for this device, probing what the device decisions cannot know ahead:
whether the model compiles under XLA, and whether XLA (with the precision it brings) is faster here.

The probes train for real on a few in-memory batches and then restore every variable, so the model that
`fit` trains starts from the configured seed as if no probe had run. The same in-memory timing gives the
input-wait figure of the training report.
"""
from __future__ import annotations

import contextlib
import re
import time

import keras
import tensorflow as tf
from absl import logging

from components.settings import TrainConfig
from components.trainer.callbacks import ThroughputMeter
from components.trainer.device import (Choice, DeviceDescription, choose_precision, config_override, cpu_without_xla,
                                      xla_candidates)
from components.trainer.distribution import work_around_keras_multi_worker_fit
from components.trainer.export import build_model
from components.trainer.plan import TrainingPlan, learning_rate_schedule
from components.core.model_module import ModelModule, check_output_width, task_of

PROBE_BATCHES = 20  # distinct in-memory batches the XLA and input-wait timings cycle through
# ...for train.input_probe_steps steps, or fewer when they take longer than this (the weights are restored
# after it: training's own steps start where they would without it)
PROBE_SECONDS = 2.0


def build_for_device(model_module: ModelModule, preprocessing: keras.Model, device: DeviceDescription,
                     settings: TrainConfig, plan: TrainingPlan, probe_batch, memory_batches: tf.data.Dataset,
                     multi_worker: bool) -> tuple[keras.Model, Choice, Choice, float]:
    """Builds and compiles the model for this device; call inside the strategy's scope.

    With `xla: auto` on an accelerator (on a CPU auto leaves XLA off: device.cpu_without_xla), two candidates are
    built from the same initial weights and timed on the same in-memory batches: XLA with the policy the
    device gets with XLA, and no XLA with the policy it gets without. The XLA one is kept unless the other
    is at least 10% faster. The one without XLA is timed first: when the whole training would take less than
    `xla_min_training_seconds` of compute at its rate, XLA cannot repay its compile (seconds of tracing
    and compiling) and is not tried. A candidate whose first training step
    does not compile under XLA is dropped (with `xla: on`, training goes on without XLA). `probe_batch()`
    gives a few examples to check that XLA compiles when no timing does it.
    Output: (compiled model, precision Choice, XLA Choice, in-memory examples/s or 0.0 when not timed).
    """
    candidates = _xla_order(device, settings)
    built, failure, too_short = _probe_candidates(model_module, preprocessing, device, settings, plan, probe_batch,
                                                  memory_batches, multi_worker, candidates)
    by_xla = {xla: (model, precision, xla, rate) for model, precision, xla, rate in built}
    model, precision, xla, rate = built[0]
    if failure:
        reason = f"XLA failed for this model on this strategy: {failure}"
    elif len(built) == 2:
        (_, with_policy, _, with_rate), (_, without_policy, _, without_rate) = by_xla["on"], by_xla["off"]
        reason = (f"measured on in-memory batches: {with_rate:,.0f} examples/s with XLA ({with_policy.value}), "
                  f"{without_rate:,.0f} without ({without_policy.value})")
        model, precision, xla, rate = by_xla["off"] if without_rate > 1.1 * with_rate else by_xla["on"]
    elif too_short:
        reason = too_short
    elif settings.xla == "auto":
        reason = cpu_without_xla(device)
    else:
        reason = "set in the config"
    return model, precision, Choice(xla, reason), rate


def _xla_order(device: DeviceDescription, settings: TrainConfig) -> list[str]:
    """The XLA settings to build, in order: without XLA first when both are timed (its rate says whether XLA
    can pay back), and without it after XLA when XLA was asked for (should the model not compile)."""
    candidates = xla_candidates(device, settings.xla)
    if settings.xla == "auto" and settings.input_probe_steps and candidates == ["on", "off"]:
        return ["off", "on"]
    if candidates == ["on"]:
        return ["on", "off"]
    return candidates


def _probe_candidates(model_module: ModelModule, preprocessing: keras.Model, device: DeviceDescription,
                      settings: TrainConfig, plan: TrainingPlan, probe_batch, memory_batches: tf.data.Dataset,
                      multi_worker: bool, candidates: list[str]) -> tuple[list, str, str]:
    """Builds, compiles and times each XLA candidate in turn (see build_for_device). Output: the built
    (model, precision, xla, rate) tuples, why XLA failed ("" when it did not) and why XLA was not tried
    ("" when it was, or need not be)."""
    measure = bool(settings.input_probe_steps)
    compare = settings.xla == "auto" and measure  # every candidate is timed and the faster kept
    built, failure, too_short = [], "", ""
    for xla in candidates:
        precision = choose_precision(device, xla=xla == "on", override=config_override(settings.precision))
        model = _build_and_compile(model_module, preprocessing, settings, plan, precision.value, xla == "on",
                                   multi_worker)
        try:  # the timing compiles the model first: with XLA that is also the check that it compiles at all
            if measure:
                rate = _in_memory_throughput(model, memory_batches, plan.global_batch,
                                             settings.steps_per_execution, settings.input_probe_steps, multi_worker)
            else:
                rate = 0.0
                if xla == "on":
                    with _variables_restored(model):
                        model.train_on_batch(*probe_batch())
        except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError, tf.errors.NotFoundError) as error:
            if xla != "on":
                raise
            failure = _xla_failure(str(error))
            logging.warning("XLA failed for %s, training without it: %s", settings.model, failure)
            continue
        built.append((model, precision, xla, rate))
        if not compare:
            break
        training_seconds = plan.total_steps * plan.global_batch / rate
        if xla == "off" and "on" in candidates and training_seconds < settings.xla_min_training_seconds:
            too_short = (f"training is about {training_seconds:.0f} s of compute ({rate:,.0f} examples/s without "
                         f"XLA): too short for an XLA compile to pay back (xla_min_training_seconds "
                         f"{settings.xla_min_training_seconds:g})")
            break
    return built, failure, too_short


def _build_and_compile(model_module: ModelModule, preprocessing: keras.Model, settings: TrainConfig,
                       plan: TrainingPlan, policy: str, xla: bool, multi_worker: bool) -> keras.Model:
    """Builds the packed model under `policy` from the configured seed, compiled."""
    keras.utils.set_random_seed(settings.seed)
    keras.config.set_dtype_policy(policy)
    try:
        model = build_model(model_module, preprocessing, settings.folds)  # its outputs float32, as the loss needs
        check_output_width(model_module, model)
    finally:
        keras.config.set_dtype_policy("float32")
    if multi_worker:
        work_around_keras_multi_worker_fit(model)
    _compile(model, model_module, plan, settings, policy, xla)
    # The optimizer's slots made now: made inside the first training step instead, they have TensorFlow trace
    # that step twice (once creating them, once more without).
    model.optimizer.build(model.trainable_variables)
    return model


def _compile(model: keras.Model, model_module: ModelModule, plan: TrainingPlan, settings: TrainConfig,
             precision: str, xla: bool) -> None:
    """Adam (AdamW with weight_decay) on the configured schedule of the scaled learning rate (wrapped for
    dynamic loss scaling under mixed_float16), the task's loss (or the module's make_loss()) and Keras metrics;
    XLA and steps per execution as decided."""
    accumulation = plan.gradient_accumulation_steps
    options = {"learning_rate": learning_rate_schedule(plan, settings),
               "gradient_accumulation_steps": accumulation if accumulation > 1 else None}
    if settings.weight_decay:
        optimizer = keras.optimizers.AdamW(weight_decay=settings.weight_decay, **options)
        optimizer.exclude_from_weight_decay(var_names=["bias"])
    else:
        optimizer = keras.optimizers.Adam(**options)
    if precision == "mixed_float16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
    task = task_of(model_module)
    loss = model_module.make_loss() if hasattr(model_module, "make_loss") else task.loss()
    model.compile(optimizer=optimizer, loss=loss, metrics=task.keras_metrics(),
                  jit_compile=xla, steps_per_execution=settings.steps_per_execution)


def _xla_failure(message: str) -> str:
    """Output: the gist of an XLA compile error: the op without an XLA kernel, else the first line."""
    missing = re.search(r"No registered '(\w+)' OpKernel for (\w+)", message)
    if missing:
        return f"no {missing.group(2)} kernel for the op {missing.group(1)}"
    return re.sub(r"^\{\{[^}]*\}\}\s*", "", message.strip()).splitlines()[0][:200]


@contextlib.contextmanager
def _variables_restored(model: keras.Model):
    """Every model and optimizer variable gets its value back when the block ends (probes train for real)."""
    variables = model.variables + model.optimizer.variables
    saved = [variable.numpy() for variable in variables]
    try:
        yield
    finally:
        for variable, value in zip(variables, saved):
            variable.assign(value)


def in_memory_batches(train_data: tf.data.Dataset, settings: TrainConfig) -> tf.data.Dataset:
    """The first training batches (up to PROBE_BATCHES, at least one execution's worth), read once into
    memory and repeated: the timing measures compute, which does not depend on which batches it sees."""
    steps = max(settings.steps_per_execution, min(settings.input_probe_steps, PROBE_BATCHES))
    batches = train_data.take(steps).cache()
    if settings.input_probe_steps:
        for _ in batches:  # fill the cache now, not while timing
            pass
    return batches.repeat()


def _in_memory_throughput(model: keras.Model, batches: tf.data.Dataset, global_batch: int, execution: int,
                          steps: int, multi_worker: bool = False) -> float:
    """Trains about `steps` steps on batches already in memory (compiling first; fewer after PROBE_SECONDS,
    except with several workers: their gradients are all-reduced every step, so each must run as many as
    the others whatever its clock says), then restores every variable. Output: examples/s with no input
    cost, timed as training's own rate is (ThroughputMeter)."""
    steps = max(execution, steps // execution * execution)
    meter = ThroughputMeter(global_batch)
    with _variables_restored(model):
        model.fit(batches, steps_per_epoch=execution, epochs=1, verbose=0)  # trace and compile
        stop = [] if multi_worker else [_StopAfter(PROBE_SECONDS)]
        model.fit(batches, steps_per_epoch=steps, epochs=1, verbose=0, callbacks=[meter, *stop])
    return meter.examples_per_second


class _StopAfter(keras.callbacks.Callback):
    """Ends fit after the execution that passes `seconds` (a timing long enough to be steady, and no longer)."""

    def __init__(self, seconds: float):
        super().__init__()
        self.seconds = seconds

    def on_train_begin(self, logs=None):
        self._began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if time.perf_counter() - self._began > self.seconds:
            self.model.stop_training = True


def input_wait(real_rate: float, memory_rate: float) -> float | None:
    """Share of step time spent waiting for input: 1 - (throughput on real input / on in-memory batches)."""
    if not real_rate or not memory_rate:
        return None
    return max(0.0, 1.0 - real_rate / memory_rate)


def training_step_ops(model: keras.Model, batch) -> int:
    """Input: a compiled model and one batch of the form fit takes it ((features, labels) or with sample
    weights). Output: the TensorFlow ops one training step runs (its graph's, the functions it calls
    included): on a GPU each launches a kernel, so fewer, larger ops keep a device busy."""
    step = tf.function(model.train_step).get_concrete_function(
        tf.nest.map_structure(lambda value: tf.TensorSpec.from_tensor(tf.convert_to_tensor(value)), batch))
    definition = step.graph.as_graph_def()
    return len(definition.node) + sum(len(function.node_def) for function in definition.library.function)
