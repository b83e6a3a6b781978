"""What ModelExport scores the TFLite ladder on, and how sure each variant's comparison is (NumPy and SciPy only).

The sample: at most `export.scoring_examples` eval records, evenly spread over the split. The records are
taken in the split's order (its files sorted by name, each file's records in order, as they are read) and
record floor(j x total / examples) is scored for j = 0 .. examples - 1: a systematic sample, the same records
on every run over the same split, covering every file and every part of each. Each variant and the
SavedModel's reference metrics are computed on these same records.

The comparison is paired (every variant and the SavedModel score the same examples), so its noise is that of
the per-example differences, small next to that of either score. Each variant's drop on the task's primary
metric gets a normal-approximation interval at `export.confidence`: over the per-example differences for a
metric that is an average over examples (accuracy, MAE; Task.per_example), and DeLong's paired variance for
AUC (the per-example structural components of each AUC, Sun and Xu's fast form). The mean |output
difference| gets one the same way, over the per-example differences.
"""
from __future__ import annotations

import math

import numpy as np
from scipy import stats

from components.core import tasks

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


def z_value(confidence: float) -> float:
    """The standard normal quantile of a two-sided interval at `confidence` (1.96 at 0.95)."""
    return float(stats.norm.ppf(0.5 + confidence / 2))


def mean_interval(values: np.ndarray, confidence: float) -> list[float]:
    """The normal-approximation interval of the mean of `values` (one per example) at `confidence`: mean -/+
    z x the standard error (a single value: [mean, mean])."""
    values = np.asarray(values, np.float64).reshape(-1)
    mean = float(values.mean()) if values.size else 0.0
    if values.size < 2:
        return [mean, mean]
    half = z_value(confidence) * float(values.std(ddof=1)) / math.sqrt(values.size)
    return [mean - half, mean + half]


def _auc_components(positive: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """DeLong's structural components of one model's AUC: per positive, the share of negatives it is scored
    above (ties half); per negative, the share of positives scored above it (ties half). Either mean is the
    AUC (tasks.auc)."""
    pos, neg = scores[positive], scores[~positive]
    ranks = stats.rankdata(np.concatenate([pos, neg]))
    above_negatives = (ranks[:len(pos)] - stats.rankdata(pos)) / len(neg)
    below_positives = 1.0 - (ranks[len(pos):] - stats.rankdata(neg)) / len(pos)
    return above_negatives, below_positives


def drop_interval(task: tasks.Task, labels: np.ndarray, predictions: np.ndarray, reference: np.ndarray,
                  confidence: float) -> list[float]:
    """Input: the task, the labels of the scored examples, a variant's predictions and the SavedModel's on
    them (the prediction_key output), the confidence. Output: [low, high], the paired interval of the
    variant's drop on the primary metric (how much worse than the SavedModel, the metric's units: ExportReport
    variants' "drop", whose value is the interval's centre)."""
    primary = task.primary
    labels = np.asarray(labels).reshape(-1)
    if primary is not tasks.AUC:
        drops = -primary.improvement(task.per_example(primary, labels, predictions),
                                     task.per_example(primary, labels, reference))
        return mean_interval(drops, confidence)
    positive = labels > 0.5
    if positive.sum() < 2 or (~positive).sum() < 2:  # AUC is 0.5 (or one pair) whatever the scores: no spread
        drop = -primary.improvement(tasks.auc(labels, predictions), tasks.auc(labels, reference))
        return [drop, drop]
    variant = _auc_components(positive, np.asarray(predictions, np.float64).reshape(-1))
    saved = _auc_components(positive, np.asarray(reference, np.float64).reshape(-1))
    by_positive, by_negative = (-primary.improvement(v, s) for v, s in zip(variant, saved))
    drop = float(by_positive.mean())
    half = z_value(confidence) * math.sqrt(by_positive.var(ddof=1) / by_positive.size
                                           + by_negative.var(ddof=1) / by_negative.size)
    return [drop - half, drop + half]
