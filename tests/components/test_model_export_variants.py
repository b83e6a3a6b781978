"""Which TFLite variants are accepted, rejected and recommended (pure rules, no TensorFlow)."""
from components.model_export.variants import OUTPUT_TOLERANCE, judge_variants, recommended_variant
from components.core.tasks import BINARY, MULTICLASS, REGRESSION, task_named

AUC_OF = {"auc": 0.95}


def _result(auc, size, diff=0.0):
    return {"auc": auc, "size_bytes": size, "mean_abs_diff": diff}


def _judge(results, reference=None, max_drop=0.01, task=BINARY):
    return judge_variants(results, task_named(task), reference or AUC_OF, max_drop)


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
