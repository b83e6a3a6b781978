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


class WarmupSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Learning rate rising linearly from 0 to `peak_learning_rate` over `warmup_steps` optimizer steps, then
    constant, or with `cosine_steps` > 0 falling along half a cosine wave to 0 at step warmup_steps +
    cosine_steps (and 0 after it)."""

    def __init__(self, peak_learning_rate: float, warmup_steps: int, cosine_steps: int = 0):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.cosine_steps = cosine_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        rate = keras.ops.convert_to_tensor(self.peak_learning_rate, "float32")
        if self.warmup_steps:
            rate = rate * keras.ops.minimum((step + 1.0) / self.warmup_steps, 1.0)
        if self.cosine_steps:
            progress = keras.ops.clip((step - self.warmup_steps) / self.cosine_steps, 0.0, 1.0)
            rate = rate * 0.5 * (1.0 + keras.ops.cos(math.pi * progress))
        return rate

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate, "warmup_steps": self.warmup_steps,
                "cosine_steps": self.cosine_steps}


def learning_rate_schedule(plan: TrainingPlan, settings: TrainConfig) -> WarmupSchedule:
    """The schedule `settings` ask for over the plan's optimizer steps (total steps / accumulation)."""
    updates = plan.total_steps // plan.gradient_accumulation_steps
    cosine = max(1, updates - settings.warmup_steps) if settings.schedule == "cosine" else 0
    return WarmupSchedule(plan.learning_rate, settings.warmup_steps, cosine)
