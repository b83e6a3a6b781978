"""What ModelExport scores the TFLite ladder on, and how sure each variant's comparison is (NumPy and SciPy only).

The sample: at most `export.scoring_examples` eval records, evenly spread over the split. The records are
taken in the split's order (its files sorted by name, each file's records in order, as they are read) and
record floor(j x total / examples) is scored for j = 0 .. examples - 1: a systematic sample, the same records
on every run over the same split, covering every file and every part of each. Each variant and the
SavedModel's reference metrics are computed on these same records.

The comparison is paired (every variant and the SavedModel score the same examples), so its noise is that of
the per-example differences, small next to that of either score. Each variant's drop on the task's primary
metric gets the interval the gates use (components/core/paired.py: the normal interval of the mean
per-example difference, DeLong's for AUC) at `export.confidence`. The mean |output difference| gets the
normal interval of its mean.
"""
from __future__ import annotations

import math

import numpy as np

from components.core import paired, tasks

SAMPLE_DESCRIPTION = "evenly spread over the split in file order"  # what the export report says of the sample


def sample_positions(total: int, examples: int) -> np.ndarray:
    """Input: the eval split's record count and the sample size (`export.scoring_examples`; 0: all). Output: the
    0-based positions of the records scored, ascending, int64: every record when `examples` is 0 or at least
    `total`, else exactly `examples` of them, record floor(j x total / examples) for j = 0 .. examples - 1 (the
    first record always, then one every total / examples)."""
    if total < 0 or examples < 0:
        raise ValueError(f"total and examples must not be negative, got {total} and {examples}")
    if examples == 0 or examples >= total:
        return np.arange(total, dtype=np.int64)
    return np.arange(examples, dtype=np.int64) * total // examples


def mean_interval(values: np.ndarray, confidence: float) -> list[float]:
    """The normal-approximation interval of the mean of `values` (one per example) at `confidence`: mean -/+
    z x the standard error (a single value: [mean, mean])."""
    values = np.asarray(values, np.float64).reshape(-1)
    mean = float(values.mean()) if values.size else 0.0
    if values.size < 2:
        return [mean, mean]
    half = paired.z_value(confidence) * float(values.std(ddof=1)) / math.sqrt(values.size)
    return [mean - half, mean + half]


def drop_interval(task: tasks.Task, labels: np.ndarray, predictions: np.ndarray, reference: np.ndarray,
                  confidence: float) -> list[float]:
    """Input: the task, the labels of the scored examples, a variant's predictions and the SavedModel's on
    them (the prediction_key output), the confidence. Output: [low, high], the paired interval of the
    variant's drop on the primary metric (how much worse than the SavedModel, the metric's units: ExportReport
    variants' "drop", whose value is the interval's centre)."""
    primary = task.primary
    labels = np.asarray(labels).reshape(-1)
    positive = labels > 0.5
    too_few = positive.sum() < 2 or (~positive).sum() < 2 if primary is tasks.AUC else len(labels) < 2
    difference = paired.compare(task, primary, labels, predictions, reference, confidence)
    if too_few:  # one example, or an AUC of 0.5 (or of one pair) whatever the scores: no spread
        return [-difference.improvement, -difference.improvement]
    return [-difference.high, -difference.low]  # the drop is the improvement's negative
