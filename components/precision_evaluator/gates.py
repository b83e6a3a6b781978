"""The precision evaluator's gates as pure functions: per-example predictions in, decision and report out
(no TFX, no TF).

Models are named CANDIDATE (the fast one), FP32_BASELINE (same Trainer, float32, no XLA) and PRODUCTION (the
latest blessed model, when there is one); TRIVIAL is what a model that learned nothing predicts. Every gate
decides on the task's primary metric (components/core/tasks.py: binary AUC, multiclass accuracy, regression MAE),
in its direction; fp32_parity and vs_production also on any other metric the config names in
`evaluate.gate_metrics`:

- absolute_bar: the metric meets `evaluate.absolute_bar` (when set), on the point estimate;
- beats_trivial: the model is better than the trivial predictor beyond noise (the whole confidence interval
  of the paired difference lies on the better side). A model that learned nothing is never blessed.
- fp32_parity (candidate only): the candidate is not worse than its FP32 baseline by more than
  `max_drop_vs_fp32`, as far as the data can show: it fails only when the whole interval lies beyond the
  tolerance. When the candidate trained in plain float32 without XLA it is its own baseline: n/a.
- vs_production: the same, against the production model, with `max_drop_vs_production`.

Tolerances are in the metric's units (AUC, accuracy), or a fraction of the reference's value for regression.
Metrics tables are {slice name: {model name: {metric: value}}}, with the whole eval split under OVERALL.
"""
from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field

import numpy as np

from components.core.contract import CANDIDATE, FP32_BASELINE, OVERALL, PRODUCTION, TRIVIAL  # noqa: F401
from components.core.records import GateCheck, format_number
from components.core.tasks import Metric, Task
from components.core.paired import compare

if typing.TYPE_CHECKING:  # annotations only: the rules stay free of the config's imports
    from components.settings import EvaluateConfig

BAR = "bar"  # the reference model of an absolute_bar check
ABSOLUTE_BAR, BEATS_TRIVIAL, FP32_PARITY, VS_PRODUCTION = "absolute_bar", "beats_trivial", "fp32_parity", "vs_production"


@dataclass
class Decision:
    blessed: bool
    chosen_model: str | None  # CANDIDATE, FP32_BASELINE or None
    summary: str
    checks: list[GateCheck] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class EvalPredictions:
    """The eval split's labels and each model's predictions on it, example for example (the prediction_key
    output: [N] or [N, K]), with the trivial predictor's among them under TRIVIAL."""
    labels: np.ndarray
    predictions: dict[str, np.ndarray]

    @property
    def examples(self) -> int:
        return len(self.labels)


def gated_metrics(task: Task, settings: EvaluateConfig) -> list[Metric]:
    """The task's primary metric, then each metric `evaluate.gate_metrics` names (TaskError for one the task
    does not have)."""
    metrics = [task.primary]
    for name in settings.gate_metrics:
        metric = task.metric(name)
        if metric not in metrics:
            metrics.append(metric)
    return metrics


def _comparison(gate: str, model: str, reference_model: str, metric: Metric, task: Task, data: EvalPredictions,
                tolerance: float, settings: EvaluateConfig) -> GateCheck:
    difference = compare(task, metric, data.labels, data.predictions[model], data.predictions[reference_model],
                         settings.confidence)
    if gate == BEATS_TRIVIAL:
        allowed, passed = 0.0, difference.low > 0
    else:
        allowed = task.tolerance(tolerance, difference.reference)
        passed = not difference.high < -allowed  # refused only when the data show it worse beyond the tolerance
    note = ""
    if gate != BEATS_TRIVIAL and difference.half_width > allowed:
        note = (f"the eval split ({difference.examples:,} examples) cannot resolve a drop of {allowed:.4g}: "
                f"the interval's half-width is {difference.half_width:.4g}")
    return GateCheck(gate, model, metric.name, difference.value, difference.reference, reference_model,
                     difference.improvement, [difference.low, difference.high], allowed, difference.examples,
                     bool(passed), note)


def _bar(model: str, metric: Metric, value: float, bar: float, examples: int) -> GateCheck:
    improvement = metric.improvement(value, bar)
    return GateCheck(ABSOLUTE_BAR, model, metric.name, value, bar, BAR, improvement, None, 0.0, examples,
                     improvement >= -1e-12)


def checks_for(model: str, task: Task, data: EvalPredictions, settings: EvaluateConfig,
               parity_not_applicable: str = "") -> list[GateCheck]:
    """The gates one model must pass (module docstring). `parity_not_applicable`: why the candidate has no
    FP32 parity check ("" when it has one)."""
    trivial = _comparison(BEATS_TRIVIAL, model, TRIVIAL, task.primary, task, data, 0.0, settings)
    checks = [trivial]
    if settings.absolute_bar is not None:
        checks.insert(0, _bar(model, task.primary, trivial.value, settings.absolute_bar, data.examples))
    for metric in gated_metrics(task, settings):
        if model == CANDIDATE:
            if parity_not_applicable:
                checks.append(GateCheck(FP32_PARITY, model, metric.name, None, None, FP32_BASELINE, None, None,
                                        settings.max_drop_vs_fp32, data.examples, True,
                                        f"n/a: {parity_not_applicable}"))
            else:
                checks.append(_comparison(FP32_PARITY, model, FP32_BASELINE, metric, task, data,
                                          settings.max_drop_vs_fp32, settings))
        if PRODUCTION in data.predictions:
            checks.append(_comparison(VS_PRODUCTION, model, PRODUCTION, metric, task, data,
                                      settings.max_drop_vs_production, settings))
    return checks


def decide(task: Task, data: EvalPredictions, settings: EvaluateConfig, parity_not_applicable: str = "") -> Decision:
    """Input: the task, the eval predictions of every model (candidate, FP32 baseline unless
    `parity_not_applicable` says why there is none to compare with, production when there is one, trivial),
    the `evaluate` config section. Output: the Decision.

    The candidate is blessed when it passes every gate. When it fails FP32 parity, the FP32 baseline is
    blessed instead if `fallback_to_fp32` is on and the baseline passes its own gates.
    """
    candidate = checks_for(CANDIDATE, task, data, settings, parity_not_applicable)
    if all(check.passed for check in candidate):
        return Decision(True, CANDIDATE, "candidate blessed: every gate passed", candidate)
    failed = sorted({check.gate for check in candidate if not check.passed})
    summary = f"candidate not blessed: failed {', '.join(failed)}"
    if FP32_PARITY not in failed:
        return Decision(False, None, summary, candidate)
    if not settings.fallback_to_fp32:
        return Decision(False, None, summary + "; fallback to the FP32 baseline is off", candidate)
    baseline = checks_for(FP32_BASELINE, task, data, settings)
    if all(check.passed for check in baseline):
        return Decision(True, FP32_BASELINE, summary + "; FP32 baseline blessed instead (fallback)", candidate + baseline)
    baseline_failed = sorted({check.gate for check in baseline if not check.passed})
    return Decision(False, None, summary + f"; FP32 baseline failed {', '.join(baseline_failed)} too",
                    candidate + baseline)


def render_markdown(decision: Decision, metrics: dict, confidence: float) -> str:
    """The decision as Markdown: the verdict, one row per gate check, then metrics per slice and model."""
    lines = ["# Precision evaluation", "", f"**{'BLESSED' if decision.blessed else 'NOT BLESSED'}**: "
             f"{decision.summary}.", "",
             f"Improvement: how much better than the reference (negative: worse), with its {confidence:.0%} "
             "confidence interval from the paired per-example predictions.", "",
             "| gate | model | metric | value | reference | improvement | interval | tolerance | examples | result | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in decision.checks:
        improvement = "n/a" if c.improvement is None else f"{c.improvement:+.4f}"
        interval = "" if c.interval is None else f"[{c.interval[0]:+.4f}, {c.interval[1]:+.4f}]"
        reference = f"{c.reference_model} {format_number(c.reference)}" if c.reference is not None else c.reference_model
        lines.append(f"| {c.gate} | {c.model} | {c.metric} | {format_number(c.value)} | {reference} | {improvement} "
                     f"| {interval} | {c.tolerance:.4g} | {c.examples:,} | {'pass' if c.passed else '**FAIL**'} "
                     f"| {c.note} |")
    names = sorted({name for per_model in metrics.values() for values in per_model.values() for name in values})
    lines += ["", "## Metrics per slice", "", "| slice | model | " + " | ".join(names) + " |",
              "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for slice_name, per_model in metrics.items():
        for model, values in per_model.items():
            cells = [format_number(values[name]) if name in values else "" for name in names]
            lines.append(f"| {slice_name} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
