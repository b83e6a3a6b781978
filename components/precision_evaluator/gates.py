"""The precision evaluator's gates as pure functions: metrics in, decision and report out (no TFX, no TF).

Models are named CANDIDATE (the fast one), FP32_BASELINE (same Trainer, float32, no XLA) and PRODUCTION (the
latest blessed model, when there is one). Metrics are {slice name: {model name: {metric: value}}}, with the
whole eval split under OVERALL.
"""
from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, field

if typing.TYPE_CHECKING:  # annotations only: the rules stay free of the config's imports
    from components.settings import EvaluateConfig

CANDIDATE, FP32_BASELINE, PRODUCTION = "candidate", "fp32_baseline", "production"
OVERALL = "overall"
AUC, ACCURACY = "auc", "binary_accuracy"


@dataclass
class GateCheck:
    gate: str  # min_auc | fp32_parity | vs_production
    model: str
    metric: str
    value: float | None  # None: TFMA could not compute it (for example one class only); the check fails
    reference: float | None  # the bar, or the other model's value
    delta: float | None  # value - reference
    tolerance: float  # how far below the reference the value may be
    passed: bool


@dataclass
class Decision:
    blessed: bool
    chosen_model: str | None  # CANDIDATE, FP32_BASELINE or None
    summary: str
    checks: list[GateCheck] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _check(gate: str, model: str, metric: str, value: float | None, reference: float | None,
           tolerance: float) -> GateCheck:
    if value is None or reference is None:
        return GateCheck(gate, model, metric, value, reference, None, tolerance, passed=False)
    delta = value - reference
    return GateCheck(gate, model, metric, value, reference, delta, tolerance, passed=delta >= -tolerance - 1e-12)


def checks_for(model: str, metrics: dict, settings: EvaluateConfig) -> list[GateCheck]:
    """The gates one model must pass: the absolute AUC bar, parity with the FP32 baseline (candidate only)
    and no drop against the production model beyond tolerance (when one exists)."""
    overall = metrics[OVERALL]
    mine = overall[model]
    checks = [_check("min_auc", model, AUC, mine[AUC], settings.min_auc, 0.0)]
    if model == CANDIDATE:
        checks += [_check("fp32_parity", model, AUC, mine[AUC], overall[FP32_BASELINE][AUC],
                          settings.max_auc_drop_vs_fp32),
                   _check("fp32_parity", model, ACCURACY, mine[ACCURACY], overall[FP32_BASELINE][ACCURACY],
                          settings.max_accuracy_drop_vs_fp32)]
    if PRODUCTION in overall:
        checks += [_check("vs_production", model, AUC, mine[AUC], overall[PRODUCTION][AUC],
                          settings.max_auc_drop_vs_production),
                   _check("vs_production", model, ACCURACY, mine[ACCURACY], overall[PRODUCTION][ACCURACY],
                          settings.max_accuracy_drop_vs_production)]
    return checks


def decide(metrics: dict, settings: EvaluateConfig) -> Decision:
    """Input: metrics per slice and model; the `evaluate` config section. Output: the Decision.

    The candidate is blessed when it passes every gate. When it fails FP32 parity, the FP32 baseline is
    blessed instead if `fallback_to_fp32` is on and the baseline passes its own gates.
    """
    candidate = checks_for(CANDIDATE, metrics, settings)
    if all(check.passed for check in candidate):
        return Decision(True, CANDIDATE, "candidate blessed: every gate passed", candidate)
    failed = sorted({check.gate for check in candidate if not check.passed})
    summary = f"candidate not blessed: failed {', '.join(failed)}"
    if "fp32_parity" not in failed:
        return Decision(False, None, summary, candidate)
    baseline = checks_for(FP32_BASELINE, metrics, settings)
    if not settings.fallback_to_fp32:
        return Decision(False, None, summary + "; fallback to the FP32 baseline is off", candidate + baseline)
    if all(check.passed for check in baseline):
        return Decision(True, FP32_BASELINE, summary + "; FP32 baseline blessed instead (fallback)", candidate + baseline)
    baseline_failed = sorted({check.gate for check in baseline if not check.passed})
    return Decision(False, None, summary + f"; FP32 baseline failed {', '.join(baseline_failed)} too",
                    candidate + baseline)


def render_markdown(decision: Decision, metrics: dict) -> str:
    """The decision as Markdown: the verdict, one row per gate check, then metrics per slice and model."""
    lines = ["# Precision evaluation", "", f"**{'BLESSED' if decision.blessed else 'NOT BLESSED'}**: "
             f"{decision.summary}.", "", "| gate | model | metric | value | reference | delta | tolerance | result |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in decision.checks:
        delta = "n/a" if c.delta is None else f"{c.delta:+.4f}"
        lines.append(f"| {c.gate} | {c.model} | {c.metric} | {format_number(c.value)} | {format_number(c.reference)} | {delta} "
                     f"| {c.tolerance:.4f} | {'pass' if c.passed else '**FAIL**'} |")
    names = sorted({name for per_model in metrics.values() for values in per_model.values() for name in values})
    lines += ["", "## Metrics per slice", "", "| slice | model | " + " | ".join(names) + " |",
              "| --- | --- | " + " | ".join("---" for _ in names) + " |"]
    for slice_name, per_model in metrics.items():
        for model, values in per_model.items():
            cells = [format_number(values[name]) if name in values else "" for name in names]
            lines.append(f"| {slice_name} | {model} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def format_number(value: float | None) -> str:
    """4 decimals, counts as integers, undefined metrics (None) as n/a."""
    if value is None:
        return "n/a"
    return f"{int(value):,}" if float(value).is_integer() and abs(value) > 1 else f"{value:.4f}"
