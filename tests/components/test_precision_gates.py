"""The precision evaluator's gate rules on metric tables (what TFMA hands them), without TFX."""
import pytest

from components.precision_evaluator.gates import CANDIDATE, FP32_BASELINE, OVERALL, PRODUCTION, decide, render_markdown
from pipeline.config import load_config


def _settings(**overrides):
    return load_config(evaluate={"min_auc": 0.8, **overrides}).evaluate


def _metrics(candidate, baseline, production=None):
    overall = {CANDIDATE: {"auc": candidate[0], "binary_accuracy": candidate[1]},
               FP32_BASELINE: {"auc": baseline[0], "binary_accuracy": baseline[1]}}
    if production:
        overall[PRODUCTION] = {"auc": production[0], "binary_accuracy": production[1]}
    return {OVERALL: overall}


def _failed(decision):
    return {(c.gate, c.model, c.metric) for c in decision.checks if not c.passed}


def test_candidate_within_tolerance_of_the_fp32_baseline_is_blessed():
    decision = decide(_metrics((0.948, 0.890), (0.951, 0.893)), _settings())
    assert decision.blessed and decision.chosen_model == CANDIDATE and not _failed(decision)
    parity = [c for c in decision.checks if c.gate == "fp32_parity"]
    assert [(c.metric, round(c.delta, 4)) for c in parity] == [("auc", -0.003), ("binary_accuracy", -0.003)]
    assert not any(c.gate == "vs_production" for c in decision.checks)  # nothing blessed before


@pytest.mark.parametrize("candidate, failed_metric", [((0.940, 0.893), "auc"), ((0.951, 0.885), "binary_accuracy")])
def test_parity_failure_falls_back_to_the_fp32_baseline(candidate, failed_metric):
    decision = decide(_metrics(candidate, (0.951, 0.893), production=(0.950, 0.892)), _settings())
    assert decision.blessed and decision.chosen_model == FP32_BASELINE
    assert _failed(decision) == {("fp32_parity", CANDIDATE, failed_metric)}
    assert "FP32 baseline blessed instead" in decision.summary
    # The baseline had to pass its own gates: the bar and the production comparison.
    assert {(c.gate, c.model) for c in decision.checks if c.model == FP32_BASELINE} == {
        ("min_auc", FP32_BASELINE), ("vs_production", FP32_BASELINE)}


def test_fallback_switched_off_blesses_nothing():
    decision = decide(_metrics((0.940, 0.893), (0.951, 0.893)), _settings(fallback_to_fp32=False))
    assert not decision.blessed and decision.chosen_model is None
    assert "fallback to the FP32 baseline is off" in decision.summary


def test_worse_than_production_blesses_nothing_even_with_a_fallback():
    decision = decide(_metrics((0.90, 0.85), (0.92, 0.86), production=(0.95, 0.89)), _settings())
    assert not decision.blessed
    assert ("vs_production", CANDIDATE, "auc") in _failed(decision)
    assert ("vs_production", FP32_BASELINE, "auc") in _failed(decision)
    assert "FP32 baseline failed vs_production too" in decision.summary


def test_below_the_absolute_bar_without_parity_failure_does_not_fall_back():
    decision = decide(_metrics((0.75, 0.80), (0.751, 0.80)), _settings())
    assert not decision.blessed and _failed(decision) == {("min_auc", CANDIDATE, "auc")}
    assert all(c.model == CANDIDATE for c in decision.checks)


def test_tolerances_come_from_the_config():
    metrics = _metrics((0.945, 0.893), (0.951, 0.893))
    assert not decide(metrics, _settings(fallback_to_fp32=False)).blessed  # 0.006 below, default tolerance 0.005
    assert decide(metrics, _settings(max_auc_drop_vs_fp32=0.01)).chosen_model == CANDIDATE


def test_an_undefined_metric_fails_its_gate_and_the_report_says_so():
    decision = decide(_metrics((None, 0.9), (0.95, 0.9)), _settings(fallback_to_fp32=False))
    assert not decision.blessed and ("min_auc", CANDIDATE, "auc") in _failed(decision)
    markdown = render_markdown(decision, _metrics((None, 0.9), (0.95, 0.9)))
    assert "**NOT BLESSED**" in markdown and "| min_auc | candidate | auc | n/a |" in markdown
