"""Which TFLite variants are accepted, rejected and recommended (pure rules, no TensorFlow)."""
from components.model_export.variants import OUTPUT_TOLERANCE, judge_variants, recommended_variant


def _result(auc, size, diff=0.0):
    return {"auc": auc, "size_bytes": size, "mean_abs_diff": diff}


def test_smallest_accepted_variant_is_recommended():
    judged = judge_variants({"float32": _result(0.95, 1000), "float16": _result(0.95, 500),
                             "dynamic_int8": _result(0.948, 300), "full_int8": _result(0.93, 250)},
                            reference_auc=0.95, max_auc_drop=0.01)
    assert [v for v, r in judged.items() if not r["accepted"]] == ["full_int8"]  # 0.02 below the SavedModel
    assert "AUC 0.9300 is 0.0200 below" in judged["full_int8"]["reasons"][0]
    assert recommended_variant(judged) == "dynamic_int8"
    assert sum(r["recommended"] for r in judged.values()) == 1


def test_outputs_beyond_a_variants_tolerance_reject_it():
    judged = judge_variants({"float16": _result(0.95, 500, diff=2 * OUTPUT_TOLERANCE["float16"])},
                            reference_auc=0.95, max_auc_drop=0.01)
    assert not judged["float16"]["accepted"] and "outputs differ" in judged["float16"]["reasons"][0]
    assert recommended_variant(judged) is None


def test_a_variant_with_a_flex_op_or_quantized_preprocessing_is_rejected_whatever_its_auc():
    flex = {"non_builtin_ops": ["custom:FlexStringToHashBucketFast"]}
    quantized = {"quantized_preprocessing_ops": ["LOG -> raw_preprocessing/fare_log/Log1p"]}
    clean = {"non_builtin_ops": [], "quantized_preprocessing_ops": []}
    judged = judge_variants({"float32": {**_result(0.95, 1000), **flex},
                             "full_int8": {**_result(0.95, 250, diff=0.004), **quantized},
                             "float16": {**_result(0.95, 500), **clean}},
                            reference_auc=0.95, max_auc_drop=0.01)
    assert "outside TFLite's builtins: custom:FlexStringToHashBucketFast" in judged["float32"]["reasons"][0]
    assert "preprocessing quantized: LOG" in judged["full_int8"]["reasons"][0]
    assert recommended_variant(judged) == "float16"
