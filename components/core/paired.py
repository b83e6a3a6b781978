"""Paired comparisons of two models scored on the same eval examples: how much better one is than the other
on a metric, with a confidence interval, so that a gate can tell a worse model from sampling noise.

Both models see the same examples, so their errors are correlated and the difference varies far less than
either metric alone: the interval is that of the paired difference. For a metric that is an average over
examples (accuracy, log loss, MAE, MSE) it is the normal interval of the mean per-example difference; for
AUC it is DeLong's (DeLong, DeLong and Clarke-Pearson 1988, in the fast form of Sun and Xu 2014), from each
example's structural components. No resampling: exact, and linear in the examples (AUC: n log n).
Pure numpy and scipy; no TFX.
"""
from __future__ import annotations

import dataclasses
import statistics

import numpy as np

from components.core.tasks import AUC, Metric, Task


@dataclasses.dataclass(frozen=True)
class Difference:
    """How much better model A is than model B (negative: worse), in the metric's units."""
    value: float  # A's metric
    reference: float  # B's metric
    improvement: float  # metric.improvement(value, reference)
    low: float  # the interval of `improvement` at the requested confidence
    high: float
    examples: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2


def z_value(confidence: float) -> float:
    """The two-sided normal quantile for a confidence level (0.95 -> 1.96)."""
    return statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


def compare(task: Task, metric: Metric, labels: np.ndarray, predictions: np.ndarray, reference: np.ndarray,
            confidence: float) -> Difference:
    """Input: the eval labels, model A's and model B's predictions on the same examples (the task's
    prediction_key output), a confidence level. Output: A's improvement over B with its paired interval."""
    labels = np.asarray(labels).reshape(-1)
    examples = len(labels)
    z = z_value(confidence)
    if metric is AUC:
        value, reference_value, variance = _delong_difference(labels, np.asarray(predictions).reshape(-1),
                                                              np.asarray(reference).reshape(-1))
    else:
        mine = task.per_example(metric, labels, predictions)
        theirs = task.per_example(metric, labels, reference)
        value, reference_value = float(mine.mean()), float(theirs.mean())
        difference = mine - theirs
        variance = float(difference.var(ddof=1)) / examples if examples > 1 else float("inf")
    sign = 1.0 if metric.higher_is_better else -1.0
    improvement = sign * (value - reference_value)
    spread = z * float(np.sqrt(variance))
    return Difference(value, reference_value, improvement, improvement - spread, improvement + spread, examples)


def _midranks(values: np.ndarray) -> np.ndarray:
    from scipy.stats import rankdata
    return rankdata(values)  # ties share their mean rank


def _delong_difference(labels: np.ndarray, scores_a: np.ndarray, scores_b: np.ndarray) -> tuple[float, float, float]:
    """Output: (AUC of A, AUC of B, variance of AUC A - AUC B) by DeLong's method. With one class absent the
    AUCs are 0.5 and the variance infinite: nothing can be told apart."""
    positive = np.asarray(labels) > 0.5
    m, n = int(positive.sum()), int((~positive).sum())
    if not m or not n:
        return 0.5, 0.5, float("inf")
    components = []
    for scores in (scores_a, scores_b):
        scores = np.asarray(scores, np.float64)
        all_ranks = _midranks(np.concatenate([scores[positive], scores[~positive]]))
        positive_ranks, negative_ranks = _midranks(scores[positive]), _midranks(scores[~positive])
        auc = (all_ranks[:m].sum() - m * (m + 1) / 2) / (m * n)
        v10 = (all_ranks[:m] - positive_ranks) / n  # per positive: the share of negatives it outranks
        v01 = 1.0 - (all_ranks[m:] - negative_ranks) / m  # per negative: the share of positives that outrank it
        components.append((float(auc), v10, v01))
    (auc_a, v10_a, v01_a), (auc_b, v10_b, v01_b) = components
    variance = (_variance(v10_a - v10_b) / m) + (_variance(v01_a - v01_b) / n)
    return auc_a, auc_b, variance


def _variance(values: np.ndarray) -> float:
    return float(np.var(values, ddof=1)) if len(values) > 1 else float("inf")
