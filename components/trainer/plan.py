"""The numbers of one training, from the settings and the replicas: batch sizes, learning rate and its
warmup schedule, steps and checkpoint intervals."""
from __future__ import annotations

import dataclasses
import math

import keras

from components.settings import TrainConfig


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
    """What training_plan decided; the training report holds its fields (dataclasses.asdict), in this order."""
    global_batch: int
    gradient_accumulation_steps: int
    learning_rate: float
    steps_per_interval: int
    intervals: int
    total_steps: int


def training_plan(train_examples: int, settings: TrainConfig, replicas: int) -> TrainingPlan:
    """Input: training-set size, settings, replicas in sync. Output: batch sizes, learning rate and steps.

    Global batch = per-replica batch x replicas; the learning rate scales linearly with the examples per
    optimizer update (global batch x gradient-accumulation steps) relative to one replica's batch.
    Training runs in intervals of `checkpoint_every_steps` (default: one pass over the data), each a Keras
    epoch that ends with a checkpoint; `total_steps` covers `epochs` passes over the data.
    """
    global_batch = settings.batch_size * replicas
    accumulation = max(1, settings.gradient_accumulation_steps)
    steps_per_pass = max(1, math.ceil(train_examples / global_batch))
    execution = settings.steps_per_execution
    interval = settings.checkpoint_every_steps or steps_per_pass
    interval = max(execution, math.ceil(interval / execution) * execution)
    intervals = max(1, math.ceil(settings.epochs * steps_per_pass / interval))
    return TrainingPlan(global_batch=global_batch, gradient_accumulation_steps=accumulation,
                        learning_rate=settings.learning_rate * replicas * accumulation,
                        steps_per_interval=interval, intervals=intervals, total_steps=interval * intervals)


# A validation pass costs about this share of a training pass over as many examples (forward only)
VALIDATION_COST = 0.35


def within_budget(plan: TrainingPlan, settings: TrainConfig, examples_per_second: float,
                  validation_examples: int) -> TrainingPlan:
    """Input: the plan, the settings, the model's training rate (examples/s on in-memory batches; 0.0: not
    measured) and the records validated every interval. Output: the plan with as many intervals as fit
    settings.time_budget_seconds at that rate (at least one); the plan as it is without a budget or a rate, or
    when it fits."""
    if not settings.time_budget_seconds or not examples_per_second:
        return plan
    seconds = (plan.steps_per_interval * plan.global_batch + VALIDATION_COST * validation_examples) / examples_per_second
    intervals = max(1, int(settings.time_budget_seconds // seconds))
    if intervals >= plan.intervals:
        return plan
    return dataclasses.replace(plan, intervals=intervals, total_steps=intervals * plan.steps_per_interval)


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate rising linearly from 0 to `peak_learning_rate` over `warmup_steps` optimizer steps, then
    constant, or with `cosine_steps` > 0 falling along half a cosine wave to 0 at step warmup_steps +
    cosine_steps (and 0 after it). The cosine's length is a variable: `shorten` sets it after the training
    step is traced (when the time budget cuts the plan)."""

    def __init__(self, peak_learning_rate: float, warmup_steps: int, cosine_steps: int = 0):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self._cosine = keras.Variable(float(cosine_steps), dtype="float32", trainable=False, name="cosine_steps")
        self.cosine = bool(cosine_steps)

    @property
    def cosine_steps(self) -> int:
        return int(keras.ops.convert_to_numpy(self._cosine))

    def shorten(self, cosine_steps: int) -> None:
        """The cosine reaches 0 at step warmup_steps + cosine_steps from now on (a constant schedule stays)."""
        if self.cosine:
            self._cosine.assign(float(max(1, cosine_steps)))

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        rate = keras.ops.convert_to_tensor(self.peak_learning_rate, "float32")
        if self.warmup_steps:
            rate = rate * keras.ops.minimum((step + 1.0) / self.warmup_steps, 1.0)
        if self.cosine:
            progress = keras.ops.clip((step - self.warmup_steps) / self._cosine, 0.0, 1.0)
            rate = rate * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        return rate

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps,
                "cosine_steps": self.cosine_steps}


def cosine_steps(plan: TrainingPlan, settings: TrainConfig) -> int:
    """The cosine's length in optimizer steps: from the warmup's end to the plan's last update (0: constant)."""
    updates = plan.total_steps // plan.gradient_accumulation_steps
    return max(1, updates - settings.warmup_steps) if settings.schedule == "cosine" else 0


def learning_rate_schedule(plan: TrainingPlan, settings: TrainConfig) -> WarmupSchedule:
    """The schedule `settings` ask for over the plan's optimizer steps (total steps / accumulation)."""
    return WarmupSchedule(plan.learning_rate, settings.warmup_steps, cosine_steps(plan, settings))


def schedule_of(optimizer) -> WarmupSchedule | None:
    """The WarmupSchedule an optimizer (or the one a LossScaleOptimizer wraps) follows, None for another."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = getattr(inner, "_learning_rate", None)
    return schedule if isinstance(schedule, WarmupSchedule) else None
