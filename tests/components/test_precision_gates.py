"""The precision evaluator's gate rules and paired intervals on per-example predictions, without TFX: every
task, a worse model told apart from sampling noise, a model that learned nothing never blessed."""
import dataclasses

import numpy as np
import pytest

from components.core import tasks
from components.core import paired
from components.core.contract import CANDIDATE, FP32_BASELINE, PRODUCTION, TRIVIAL
from components.precision_evaluator.gates import EvalPredictions, decide, render_markdown
from pipeline.config import load_config

BINARY, MULTICLASS, REGRESSION = (tasks.task_named(name) for name in tasks.TASK_NAMES)


def _settings(**overrides):
    return load_config(check_references=False, evaluate={"absolute_bar": None, **overrides}).evaluate


def _binary(examples=4000, seed=0):
    """Labels and a latent signal: a model's score is the signal plus its own noise (more noise: worse)."""
    rng = np.random.default_rng(seed)
    signal = rng.normal(size=examples)
    labels = (signal + rng.normal(scale=0.8, size=examples) > 0.3).astype(np.float32)
    shared = rng.normal(size=examples)  # noise every model of this data shares: their errors correlate

    def model(noise, own_seed):
        own = np.random.default_rng(own_seed).normal(size=examples)
        return 1 / (1 + np.exp(-(signal + 0.5 * shared + noise * own)))
    return labels, model


def _data(labels, trivial, **predictions):
    return EvalPredictions(labels, {**predictions, TRIVIAL: trivial})


def _binary_data(candidate_noise, baseline_noise=None, production_noise=None, examples=4000):
    labels, model = _binary(examples)
    predictions = {CANDIDATE: model(candidate_noise, 1)}
    if baseline_noise is not None:
        predictions[FP32_BASELINE] = model(baseline_noise, 2)
    if production_noise is not None:
        predictions[PRODUCTION] = model(production_noise, 3)
    return _data(labels, np.full(examples, labels.mean()), **predictions)


def _failed(decision):
    return {(c.gate, c.model, c.metric) for c in decision.checks if not c.passed}


def test_delong_interval_matches_a_paired_bootstrap():
    labels, model = _binary(1500)
    a, b = model(0.6, 1), model(0.9, 2)
    difference = paired.compare(BINARY, tasks.AUC, labels, a, b, 0.95)
    assert difference.value == pytest.approx(tasks.auc(labels, a)) and difference.improvement > 0
    rng = np.random.default_rng(5)
    samples = []
    for _ in range(400):
        index = rng.integers(0, len(labels), len(labels))
        samples.append(tasks.auc(labels[index], a[index]) - tasks.auc(labels[index], b[index]))
    assert np.std(samples) == pytest.approx(difference.half_width / paired.z_value(0.95), rel=0.15)


def test_mean_metric_interval_is_the_paired_difference():
    labels = np.array([0, 1, 2, 1, 0, 2, 2, 1] * 50)
    right = np.eye(3)[labels]
    wrong_sometimes = right.copy()
    wrong_sometimes[::8] = np.eye(3)[(labels[::8] + 1) % 3]  # 1 in 8 wrong
    difference = paired.compare(MULTICLASS, tasks.ACCURACY, labels, wrong_sometimes, right, 0.95)
    assert difference.value == pytest.approx(7 / 8) and difference.reference == 1.0
    assert difference.improvement == pytest.approx(-1 / 8) and difference.low < -1 / 8 < difference.high < 0


def test_a_candidate_as_good_as_its_references_within_the_noise_is_blessed():
    data = _binary_data(candidate_noise=0.80, baseline_noise=0.78, production_noise=0.79)
    decision = decide(BINARY, data, _settings())
    assert decision.blessed and decision.chosen_model == CANDIDATE and not _failed(decision)
    gates = [(c.gate, c.metric) for c in decision.checks]
    assert gates == [("beats_trivial", "auc"), ("fp32_parity", "auc"), ("vs_production", "auc")]  # the primary only
    for check in decision.checks:
        assert check.interval[0] <= check.improvement <= check.interval[1] and check.examples == 4000


def test_a_candidate_the_data_show_worse_than_production_is_refused_and_the_report_says_by_how_much():
    data = _binary_data(candidate_noise=2.5, baseline_noise=2.5, production_noise=0.6)
    decision = decide(BINARY, data, _settings())
    assert not decision.blessed
    assert ("vs_production", CANDIDATE, "auc") in _failed(decision)
    check = next(c for c in decision.checks if c.gate == "vs_production")
    assert check.interval[1] < -check.tolerance
    line = check.describe()
    assert line.startswith("vs_production: candidate auc ") and "worse by" in line and "interval [" in line
    assert "4,000 examples (FAIL)" in line


def test_parity_failure_falls_back_to_the_fp32_baseline_which_passes_its_own_gates():
    data = _binary_data(candidate_noise=2.5, baseline_noise=0.7, production_noise=0.75)
    decision = decide(BINARY, data, _settings())
    assert decision.blessed and decision.chosen_model == FP32_BASELINE
    assert ("fp32_parity", CANDIDATE, "auc") in _failed(decision)
    assert "FP32 baseline blessed instead" in decision.summary
    assert {(c.gate, c.model) for c in decision.checks if c.model == FP32_BASELINE} == {
        ("beats_trivial", FP32_BASELINE), ("vs_production", FP32_BASELINE)}
    off = decide(BINARY, data, _settings(fallback_to_fp32=False))
    assert not off.blessed and "fallback to the FP32 baseline is off" in off.summary


def test_a_candidate_trained_in_float32_is_its_own_baseline_and_parity_does_not_apply():
    data = _binary_data(candidate_noise=0.8)
    decision = decide(BINARY, data, _settings(), parity_not_applicable="candidate trained in float32 without XLA")
    parity = [c for c in decision.checks if c.gate == "fp32_parity"]
    assert decision.blessed and len(parity) == 1 and parity[0].passed and parity[0].value is None
    assert parity[0].note == "n/a: candidate trained in float32 without XLA"
    assert "n/a: candidate trained in float32" in parity[0].describe()


def test_other_metrics_are_gated_only_when_the_config_names_them():
    data = _binary_data(candidate_noise=0.8, baseline_noise=0.8)
    named = decide(BINARY, data, _settings(gate_metrics=["binary_accuracy"]))
    assert [(c.gate, c.metric) for c in named.checks if c.gate == "fp32_parity"] == [
        ("fp32_parity", "auc"), ("fp32_parity", "binary_accuracy")]
    with pytest.raises(tasks.TaskError, match="'mean_absolute_error' is not a metric of a binary task"):
        decide(BINARY, data, _settings(gate_metrics=["mean_absolute_error"]))


def test_the_absolute_bar_is_on_the_point_estimate_in_the_metrics_direction():
    float32 = "candidate trained in float32 without XLA"
    data = _binary_data(candidate_noise=0.8)
    auc = tasks.auc(data.labels, data.predictions[CANDIDATE])
    assert not decide(BINARY, data, _settings(absolute_bar=auc + 0.01), float32).blessed
    assert decide(BINARY, data, _settings(absolute_bar=auc - 0.01), float32).blessed
    labels = np.linspace(0, 10, 500)
    regression = _data(labels, np.full(500, labels.mean()), **{CANDIDATE: labels + 0.5})  # MAE 0.5
    assert decide(REGRESSION, regression, _settings(absolute_bar=0.6), float32).blessed  # MAE at most 0.6
    assert not decide(REGRESSION, regression, _settings(absolute_bar=0.4), float32).blessed


@pytest.mark.parametrize("task", [BINARY, MULTICLASS, REGRESSION], ids=lambda task: task.name)
def test_a_model_that_predicts_a_constant_is_refused_by_the_trivial_predictor_gate(task):
    """Whatever bar the config sets (none here) and whichever constant it learned, a model that learned nothing
    is never blessed: the trivial predictor is the best constant on the eval labels themselves. A constant
    fitted on other labels (the training split's) can sit nearer the eval split's best one than theirs."""
    rng = np.random.default_rng(3)
    if task is MULTICLASS:
        labels, classes = rng.choice(3, 900, p=[0.3, 0.38, 0.32]), ("a", "b", "c")
        constants = [np.eye(3)[k] for k in range(3)] + [np.array([0.2, 0.5, 0.3]), np.array([0.34, 0.33, 0.33])]
    elif task is BINARY:
        labels, classes = (rng.random(900) < 0.3).astype(np.float32), ("no", "yes")
        constants = [0.0, 0.29, 0.42, 1.0]
    else:
        labels, classes = rng.gamma(2.0, 5.0, 900), ()
        median = float(np.median(labels))
        constants = [median, median + 1e-3, median - 1e-3, float(labels.mean()), *np.quantile(labels, [0.4, 0.6])]
    trivial = task.trivial_predictions(labels, classes)
    assert trivial.shape[0] == 900 and np.all(trivial == trivial[0])
    for value in constants:
        constant = np.tile(value, (900, 1)) if task is MULTICLASS else np.full(900, value)
        decision = decide(task, _data(labels, trivial, **{CANDIDATE: constant}), _settings(),
                          parity_not_applicable="candidate trained in float32 without XLA")
        assert not decision.blessed and ("beats_trivial", CANDIDATE, task.primary.name) in _failed(decision), value
    # A model with signal still passes.
    if task is REGRESSION:
        informed = labels + rng.normal(scale=1.0, size=900)
    else:
        informed = np.eye(3)[labels] * 0.6 + 0.1 if task is MULTICLASS else labels * 0.5 + rng.random(900) * 0.6
    assert decide(task, _data(labels, trivial, **{CANDIDATE: informed}), _settings(),
                  parity_not_applicable="candidate trained in float32 without XLA").blessed


def test_regression_tolerances_are_a_fraction_of_the_references_mae():
    rng = np.random.default_rng(4)
    labels = rng.gamma(2.0, 5.0, 3000)
    production = labels + rng.normal(scale=2.0, size=3000)
    slightly_worse = production + rng.normal(scale=0.3, size=3000)
    data = _data(labels, np.full(3000, labels.mean()), **{CANDIDATE: slightly_worse, PRODUCTION: production})
    decision = decide(REGRESSION, data, _settings(max_drop_vs_production=0.05),
                      parity_not_applicable="candidate trained in float32 without XLA")
    check = next(c for c in decision.checks if c.gate == "vs_production")
    assert check.tolerance == pytest.approx(0.05 * check.reference) and check.metric == "mean_absolute_error"
    assert check.value > check.reference and check.passed  # worse, but not beyond 5% of production's MAE
    strict = decide(REGRESSION, data, _settings(max_drop_vs_production=0.0),
                    parity_not_applicable="candidate trained in float32 without XLA")
    assert ("vs_production", CANDIDATE, "mean_absolute_error") in _failed(strict)


def test_a_small_eval_split_says_it_cannot_resolve_the_tolerance():
    data = _binary_data(candidate_noise=0.8, baseline_noise=0.8, examples=300)
    decision = decide(BINARY, data, _settings())
    parity = next(c for c in decision.checks if c.gate == "fp32_parity")
    assert parity.note.startswith("the eval split (300 examples) cannot resolve a drop of 0.005")
    markdown = render_markdown(decision, {"overall": {"candidate": {"auc": parity.value}}}, 0.95)
    assert "cannot resolve a drop" in markdown and "| fp32_parity | candidate | auc |" in markdown


def test_an_unknown_confidence_or_gate_metric_is_a_config_error():
    from pipeline.config import ConfigError
    with pytest.raises(ConfigError, match="evaluate.confidence"):
        load_config(check_references=False, evaluate={"confidence": 1.5})
    with pytest.raises(ConfigError, match="evaluate.gate_metrics: 'rmse' is not a metric a binary task can be gated on"):
        load_config(evaluate={"gate_metrics": ["rmse"]})
    assert dataclasses.asdict(load_config(evaluate={"absolute_bar": None}).evaluate)["absolute_bar"] is None
