"""Keras callbacks the trainer adds to every fit: spaced checkpoints, throughput, loss-scale history,
divergence stop, the best interval kept, the time budget, a progress line on long fits."""
from __future__ import annotations

import math
import statistics
import time

import keras
import numpy as np
from absl import logging

from components.core.contract import PROGRESS


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite; the message names the step."""


class ThroughputMeter(keras.callbacks.Callback):
    """Times each checkpoint interval from its first to its last executed batch (validation excluded).

    After fit: `steps` run in this process, `examples_per_second` and `step_seconds` (medians over
    intervals, the first one skipped when there are several because it may include tracing), and
    `interval_seconds`, each interval's whole seconds (its validation and the callbacks before this one
    included).
    """

    def __init__(self, global_batch: int):
        super().__init__()
        self.global_batch = global_batch
        self.steps = 0
        self.interval_seconds: list[float] = []
        self._rates: list[float] = []
        self._step_seconds: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()
        self._batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self._batches = batch + 1  # Keras reports the last step index of each execution
        self._end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.interval_seconds.append(round(time.perf_counter() - self._start, 3))
        if not self._batches:
            return
        self.steps += self._batches
        seconds = self._end - self._start
        self._rates.append(self._batches * self.global_batch / seconds)
        self._step_seconds.append(seconds / self._batches)

    def _steady(self, values):
        return values[1:] if len(values) > 2 else values

    @property
    def examples_per_second(self) -> float:
        return statistics.median(self._steady(self._rates)) if self._rates else 0.0

    @property
    def step_seconds(self) -> float:
        return statistics.median(self._steady(self._step_seconds)) if self._step_seconds else 0.0


class StopAtTimeBudget(keras.callbacks.Callback):
    """Ends training at the end of the interval after which one more (as long as the longest so far after the
    first, which also traces and compiles; validation included) would pass `seconds` since training began. The
    last planned interval ends training anyway, so it is never called a stop. After fit: `stopped` (True when it
    ended training before the plan did), `seconds_used`. A job resumed from a checkpoint gets the whole budget
    again."""

    def __init__(self, seconds: float, clock=time.monotonic):
        super().__init__()
        self.seconds, self.clock = seconds, clock
        self.stopped, self.seconds_used = False, 0.0
        self._durations: list[float] = []

    def on_train_begin(self, logs=None):
        self._began = self._last = self.clock()

    def on_epoch_end(self, epoch, logs=None):
        now = self.clock()
        self._durations.append(now - self._last)
        self._last, self.seconds_used = now, now - self._began
        longest = max(self._durations[1:] or self._durations)
        if epoch + 1 >= (self.params or {}).get("epochs", float("inf")) or getattr(self.model, "stop_training", False):
            return
        if self.seconds_used + longest > self.seconds:
            self.model.stop_training, self.stopped = True, True


class LossScaleRecorder(keras.callbacks.Callback):
    """Records the dynamic loss scale (mixed_float16) at the end of each interval: `history`, a list."""

    def __init__(self):
        super().__init__()
        self.history: list[float] = []

    def on_epoch_end(self, epoch, logs=None):
        scale = getattr(self.model.optimizer, "dynamic_scale", None)
        if scale is not None:
            self.history.append(float(keras.ops.convert_to_numpy(scale)))


class StopOnDivergence(keras.callbacks.Callback):
    """Raises TrainingDivergedError naming the step when the training loss is NaN or infinite.

    With mixed_float16 the loss-scale optimizer already skips steps whose gradients overflow; a
    non-finite loss means the model itself diverged, which no loss scaling recovers.
    """

    def __init__(self, steps_per_interval: int):
        super().__init__()
        self.steps_per_interval = steps_per_interval
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is not None and not math.isfinite(float(loss)):
            step = self._epoch * self.steps_per_interval + batch + 1
            raise TrainingDivergedError(
                f"training loss became {float(loss)} at step {step}: the model diverged (loss scaling cannot "
                f"recover this); lower train.learning_rate or check the data for extreme values")


class SpacedBackupAndRestore(keras.callbacks.BackupAndRestore):
    """Keras' BackupAndRestore (a checkpoint at the end of an interval, the previous one kept as `.bkp`,
    restored when a restarted job begins) that writes a checkpoint only when `min_seconds` have passed
    since training began or since the last one: a kill then loses at most `min_seconds` plus one interval
    of training. Short intervals are why: writing the weights and optimizer state can take longer than an
    interval of training on small data. 0 = a checkpoint at the end of every interval."""

    def __init__(self, backup_dir: str, min_seconds: float):
        super().__init__(backup_dir, save_freq="epoch", double_checkpoint=True)
        self.min_seconds = min_seconds
        self.checkpoints_written = 0

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        self._last_written = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        if time.monotonic() - self._last_written >= self.min_seconds:
            super().on_epoch_end(epoch, logs)
            self._last_written = time.monotonic()
            self.checkpoints_written += 1


class KeepBest(keras.callbacks.Callback):
    """Watches a validation metric at the end of every interval: keeps a copy of the weights of the best
    interval so far, stops training after `patience` intervals in which neither the metric nor the validation
    loss (`loss_key`) reached a new best (0: never early), and puts the best weights back when training ends.
    The loss keeps a run going while the model still improves on it: a coarse metric (accuracy on a few
    hundred records) can peak early by luck and then plateau. Of two intervals with the same metric (accuracy
    on a small validation set often ties) the one with the lower validation loss is the better.
    With `average` > 1 it keeps the weights of the `average` best intervals, which `average_kept` can then
    average. After fit: `best_interval` (1-based; 0: none measured), `best_value`, `stopped_early`. A job
    resumed from a checkpoint starts watching afresh."""

    def __init__(self, monitor: str, higher_is_better: bool, patience: int = 0, loss_key: str = "val_loss",
                 average: int = 1):
        super().__init__()
        self.monitor, self.higher_is_better, self.patience = monitor, higher_is_better, patience
        self.loss_key, self.average = loss_key, max(1, average)
        self.best_interval, self.best_value, self.stopped_early = 0, None, False
        self.averaged_intervals: list[int] = []  # after average_kept: the intervals whose weights were averaged
        self.averaged_logs: dict[str, float] = {}  # after average_kept: the average's validation logs
        self._best_loss = math.inf  # the validation loss of the best interval
        self._lowest_loss = math.inf  # the lowest validation loss of any interval
        self._kept: list[tuple[float, float, int, list]] = []  # (value, loss, interval, weights), best first
        self._waited = 0

    def _beats(self, value: float, loss: float, other_value: float | None, other_loss: float) -> bool:
        """(value, loss) is better than (other_value, other_loss): a better metric, or the same with a lower loss."""
        if other_value is None:
            return True
        if value == other_value:
            return loss < other_loss
        return value > other_value if self.higher_is_better else value < other_value

    def on_epoch_end(self, epoch, logs=None):
        value, loss = self._read(logs or {})
        if value is None:
            return
        improved = loss < self._lowest_loss
        self._lowest_loss = min(self._lowest_loss, loss)
        self._keep(value, loss, epoch + 1)
        if self._beats(value, loss, self.best_value, self._best_loss):
            self.best_interval, self.best_value, self._best_loss, self._waited = epoch + 1, value, loss, 0
            return
        self._waited = 0 if improved else self._waited + 1
        if self.patience and self._waited >= self.patience:
            self.model.stop_training, self.stopped_early = True, True

    def _read(self, logs: dict) -> tuple[float | None, float]:
        """The monitored value (None: not measured or not finite) and the validation loss (inf when not finite)."""
        value = logs.get(self.monitor)
        if value is None or not math.isfinite(float(value)):
            return None, math.inf
        loss = float(logs.get(self.loss_key, math.inf))
        return float(value), loss if math.isfinite(loss) else math.inf

    def _keep(self, value: float, loss: float, interval: int) -> None:
        """Keeps this interval's weights when it ranks among the `average` best so far."""
        place = next((i for i, (v, l, _, _) in enumerate(self._kept) if self._beats(value, loss, v, l)),
                     len(self._kept))
        if place < self.average:
            self._kept.insert(place, (value, loss, interval, self.model.get_weights()))
            del self._kept[self.average:]

    def on_train_end(self, logs=None):
        if self._kept:
            self.model.set_weights(self._kept[0][3])

    def average_kept(self, score) -> None:
        """Averages the kept intervals' weights greedily, best first: each next interval joins the average only
        when the average with it scores better on validation than without it. `score` takes a list of weights
        and returns their validation logs, keyed as fit's are. Leaves the model with the average (the best
        interval alone when nothing joined it); `averaged_intervals`, `averaged_logs` and `best_value` then
        describe it."""
        if not self._kept:
            return
        value, loss, interval, served = self._kept[0]
        total = [np.asarray(w, np.float64) for w in served]
        self.averaged_intervals = [interval]
        for _, _, other_interval, other in self._kept[1:]:
            joined = [t + w for t, w in zip(total, other)]
            trial = _mean(joined, len(self.averaged_intervals) + 1, served)
            logs = score(trial)
            other_value, other_loss = self._read(logs)
            if other_value is not None and self._beats(other_value, other_loss, value, loss):
                total, served, value, loss = joined, trial, other_value, other_loss
                self.averaged_intervals.append(other_interval)
                self.averaged_logs = {name: float(v) for name, v in logs.items()}
        self.best_value = value
        self.model.set_weights(served)


def _mean(total: list[np.ndarray], count: int, like: list[np.ndarray]) -> list[np.ndarray]:
    """The element-wise mean of `count` weight lists whose sum is `total`, in the dtypes of `like` (integer
    weights, such as a step counter, are the same in every copy: `like`'s are kept)."""
    return [(t / count).astype(w.dtype) if np.issubdtype(w.dtype, np.floating) else w
            for t, w in zip(total, like)]


class ProgressLine(keras.callbacks.Callback):
    """Logs one line at the end of an interval at least `every` seconds after the fit began or after the last
    such line: `Progress: interval i of n, <metric> <value> (best <value> at interval b), s s fitting`, the metric
    the KeepBest `best` watches (none without it). A fit shorter than `every` logs nothing."""

    def __init__(self, intervals: int, best: KeepBest | None = None, every: float = 30.0):
        super().__init__()
        self.intervals, self.best, self.every = intervals, best, every

    def on_train_begin(self, logs=None):
        self._began = self._last = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        now = time.monotonic()
        if now - self._last < self.every:
            return
        self._last = now
        monitor = self.best.monitor if self.best else None
        value = (logs or {}).get(monitor) if monitor else None
        score = f", {monitor.removeprefix('val_')} {float(value):.4f}" if value is not None else ""
        if score and self.best.best_value is not None:
            score += f" (best {self.best.best_value:.4f} at interval {self.best.best_interval})"
        logging.info("%sinterval %d of %d%s, %.0f s fitting", PROGRESS, epoch + 1, self.intervals, score,
                     now - self._began)
