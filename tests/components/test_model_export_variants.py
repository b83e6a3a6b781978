"""Which TFLite variants are accepted, rejected and recommended, which eval records they are scored on and
how sure each comparison is (pure rules, no TensorFlow)."""
import numpy as np

from components.core.records import ExportReport
from components.model_export.scoring import drop_interval, mean_interval, sample_positions
from components.model_export.variants import OUTPUT_TOLERANCE, judge_variants, recommended_variant
from components.core.tasks import BINARY, MULTICLASS, REGRESSION, auc, task_named

AUC_OF = {"auc": 0.95}


def _result(auc, size, diff=0.0):
    return {"auc": auc, "size_bytes": size, "mean_abs_diff": diff}


def _judge(results, reference=None, max_drop=0.01, task=BINARY, sampled=False):
    return judge_variants(results, task_named(task), reference or AUC_OF, max_drop, sampled=sampled)


def test_smallest_accepted_variant_is_recommended():
    judged = _judge({"float32": _result(0.95, 1000), "float16": _result(0.95, 500),
                     "dynamic_int8": _result(0.948, 300), "full_int8": _result(0.93, 250)})
    assert [v for v, r in judged.items() if not r["accepted"]] == ["full_int8"]  # 0.02 below the SavedModel
    assert "AUC 0.9300 is 0.0200 worse than the SavedModel's 0.9500" in judged["full_int8"]["reasons"][0]
    assert recommended_variant(judged) == "dynamic_int8"
    assert sum(r["recommended"] for r in judged.values()) == 1


def test_outputs_beyond_a_variants_tolerance_reject_it():
    judged = _judge({"float16": _result(0.95, 500, diff=2 * OUTPUT_TOLERANCE["float16"])})
    assert not judged["float16"]["accepted"] and "outputs differ" in judged["float16"]["reasons"][0]
    assert recommended_variant(judged) is None


def test_a_variant_with_a_flex_op_or_quantized_preprocessing_is_rejected_whatever_its_auc():
    flex = {"non_builtin_ops": ["custom:FlexStringToHashBucketFast"]}
    quantized = {"quantized_preprocessing_ops": ["LOG -> raw_preprocessing/fare_log/Log1p"]}
    clean = {"non_builtin_ops": [], "quantized_preprocessing_ops": []}
    judged = _judge({"float32": {**_result(0.95, 1000), **flex},
                     "full_int8": {**_result(0.95, 250, diff=0.004), **quantized},
                     "float16": {**_result(0.95, 500), **clean}})
    assert "outside TFLite's builtins: custom:FlexStringToHashBucketFast" in judged["float32"]["reasons"][0]
    assert "preprocessing quantized: LOG" in judged["full_int8"]["reasons"][0]
    assert recommended_variant(judged) == "float16"


def test_regression_variants_are_judged_on_mae_lower_is_better_with_a_relative_tolerance():
    """MAE 2.00 for the SavedModel, 1% allowed: 2.015 passes, 2.03 (1.5% worse) is rejected, and a variant
    with a lower MAE than the SavedModel is never rejected for it."""
    def mae(value, size):
        return {"mean_absolute_error": value, "size_bytes": size, "mean_abs_diff": 0.0}

    judged = _judge({"float32": mae(2.0, 1000), "float16": mae(2.015, 500), "dynamic_int8": mae(1.9, 300),
                     "full_int8": mae(2.03, 250)}, reference={"mean_absolute_error": 2.0}, task=REGRESSION)
    assert [v for v, r in judged.items() if not r["accepted"]] == ["full_int8"]
    assert judged["full_int8"]["allowed_drop"] == 0.02 and round(judged["full_int8"]["drop"], 4) == 0.03
    assert "MAE 2.0300 is 0.0300 worse" in judged["full_int8"]["reasons"][0]
    assert judged["dynamic_int8"]["drop"] < 0 and recommended_variant(judged) == "dynamic_int8"


def test_multiclass_variants_are_judged_on_accuracy():
    def accuracy(value, size):
        return {"sparse_categorical_accuracy": value, "size_bytes": size, "mean_abs_diff": 0.0}

    judged = _judge({"float32": accuracy(0.90, 1000), "full_int8": accuracy(0.88, 250)},
                    reference={"sparse_categorical_accuracy": 0.90}, task=MULTICLASS)
    assert not judged["full_int8"]["accepted"] and "accuracy 0.8800 is 0.0200 worse" in judged["full_int8"]["reasons"][0]
    assert recommended_variant(judged) == "float32"


def test_a_variant_whose_interval_holds_the_tolerance_keeps_its_verdict_with_a_note():
    judged = _judge({"float16": {**_result(0.942, 500), "drop_interval": [0.006, 0.010]},
                     "dynamic_int8": {**_result(0.948, 300), "drop_interval": [0.001, 0.003]},
                     "full_int8": {**_result(0.935, 250), "drop_interval": [0.008, 0.022]}}, sampled=True)
    assert judged["float16"]["accepted"] and judged["float16"]["notes"] == []  # the interval reaches 0.010 only
    assert judged["dynamic_int8"]["notes"] == [] and recommended_variant(judged) == "dynamic_int8"
    assert not judged["full_int8"]["accepted"]  # the measured drop decides, as on the whole split
    assert "[0.0080, 0.0220] holds the tolerance 0.01" in judged["full_int8"]["notes"][0]
    assert "export.scoring_examples" in judged["full_int8"]["notes"][0]
    tolerance = OUTPUT_TOLERANCE["full_int8"]
    judged = _judge({"full_int8": {**_result(0.95, 250, diff=0.9 * tolerance),
                                   "mean_abs_diff_interval": [0.8 * tolerance, 1.1 * tolerance]}})
    assert judged["full_int8"]["accepted"] and "mean output difference" in judged["full_int8"]["notes"][0]
    assert "scoring_examples" not in judged["full_int8"]["notes"][0]  # scored on the whole split: nothing to add


# ------------------------------------------------------------------------------------------ the scoring sample

def test_the_scoring_sample_is_bounded_deterministic_and_spread_over_the_split():
    positions = sample_positions(1_500_000, 20_000)
    assert len(positions) == len(set(positions.tolist())) == 20_000  # exactly the bound, no record twice
    assert np.array_equal(positions, sample_positions(1_500_000, 20_000))  # the same records on every run
    assert np.all(np.diff(positions) > 0) and positions[0] == 0 and positions[-1] < 1_500_000
    assert set(np.diff(positions).tolist()) == {75}  # one every 1,500,000 / 20,000 records
    # Every tenth of the split holds a tenth of the sample, whatever the ratio.
    positions = sample_positions(1_234_567, 20_000)
    assert len(positions) == 20_000 and set(np.diff(positions).tolist()) <= {61, 62}
    assert np.all(np.abs(np.bincount(positions * 10 // 1_234_567) - 2_000) <= 1)
    # 0, or a bound at least the split's size: every record.
    assert np.array_equal(sample_positions(1_000, 0), np.arange(1_000))
    assert np.array_equal(sample_positions(1_000, 1_000), np.arange(1_000))
    assert np.array_equal(sample_positions(3, 20_000), [0, 1, 2])
    assert len(sample_positions(0, 5)) == 0


def test_the_paired_auc_interval_is_delongs_and_centred_on_the_drop():
    rng = np.random.default_rng(0)
    labels = (rng.random(4000) < 0.3).astype(np.float64)
    reference = np.clip(0.3 * labels + 0.7 * rng.random(4000), 0, 1)
    variant = np.clip(reference + rng.normal(0, 0.02, 4000), 0, 1)
    task = task_named(BINARY)
    low, high = drop_interval(task, labels, variant, reference, 0.95)
    drop = auc(labels, reference) - auc(labels, variant)
    assert abs((low + high) / 2 - drop) < 1e-12 and 0 < high - low < 0.01
    # A bootstrap over the same examples agrees with DeLong's interval.
    draws = [auc(labels[i], reference[i]) - auc(labels[i], variant[i])
             for i in (rng.integers(0, 4000, 4000) for _ in range(400))]
    boot_low, boot_high = np.percentile(draws, [2.5, 97.5])
    assert abs(boot_low - low) < 0.25 * (high - low) and abs(boot_high - high) < 0.25 * (high - low)
    assert drop_interval(task, labels, reference, reference, 0.95) == [0.0, 0.0]  # the same model: no spread
    wider = drop_interval(task, labels, variant, reference, 0.99)
    assert wider[0] < low and wider[1] > high


def test_paired_intervals_of_per_example_metrics_follow_the_metrics_direction():
    labels = np.array([0, 1, 2, 1, 0, 2, 1, 1])
    reference = np.eye(3)[labels] * 0.8 + 0.2 / 3
    variant = reference.copy()
    variant[[0, 3]] = np.eye(3)[[1, 0]]  # two examples now wrong: accuracy 0.75 instead of 1.0
    low, high = drop_interval(task_named(MULTICLASS), labels, variant, reference, 0.95)
    assert low < 0.25 < high and abs((low + high) / 2 - 0.25) < 1e-12
    targets = np.array([1.0, 2.0, 3.0, 4.0])
    low, high = drop_interval(task_named(REGRESSION), targets, targets + 0.5, targets + 0.1, 0.95)
    assert abs(low - 0.4) < 1e-9 and abs(high - 0.4) < 1e-9  # MAE 0.5 against 0.1: 0.4 worse on every example
    assert mean_interval(np.array([1.0]), 0.95) == [1.0, 1.0]


def test_an_export_report_round_trips_through_its_json_with_the_scoring_sample():
    report = ExportReport(True, task_name=BINARY, primary_metric="auc", eval_examples=50_000,
                          scored_examples=20_000, scoring_sample="evenly spread", confidence=0.95,
                          savedmodel={"auc": 0.9}, variants={"float32": {"auc": 0.9, "drop_interval": [-0.001, 0.001]}})
    assert ExportReport.from_json(report.to_json()) == report and report.scored == 20_000
    legacy = ExportReport.from_json({"exported": True, "task": BINARY, "eval_examples": 3_000})
    assert legacy.scored_examples == 0 and legacy.scored == 3_000 and legacy.confidence == 0.0
