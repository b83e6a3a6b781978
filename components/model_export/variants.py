"""The TFLite ladder and the pure rules that accept, reject and recommend its variants (no TensorFlow here).

Variants, from the TensorFlow post-training quantization guide; each takes raw features and carries the
preprocessing, which stays exact in all of them:
  float32       plain conversion, the reference for size and latency
  float16       weights stored as float16
  dynamic_int8  weights int8, activations quantized on the fly
  full_int8     the model core's weights and activations int8, calibrated on a representative dataset;
                preprocessing in its own types (float32 normalization, integer lookups and bins), raw inputs
                and the float output as they are
"""
from __future__ import annotations

TFLITE_VARIANTS = ("float32", "float16", "dynamic_int8", "full_int8")

# Largest mean |probability - SavedModel probability| over the eval split that still counts as the same
# model: catches a broken conversion (wrong inputs, ignored options), not quantization noise. Measured on the
# taxi models: float16 1e-5, dynamic int8 5e-4 to 9e-4, full int8 4e-3 to 7e-3 (whose single worst example,
# in a 1024-wide network, was 0.27 off with the AUC unchanged, so the maximum is no criterion).
OUTPUT_TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "dynamic_int8": 0.01, "full_int8": 0.03}


def judge_variants(results: dict[str, dict], reference_auc: float, max_auc_drop: float) -> dict[str, dict]:
    """Input: variant -> {"auc", "size_bytes", "mean_abs_diff", ...}, the SavedModel's AUC, the allowed drop.

    Output: the same dicts with "auc_drop", "accepted", "reasons" (why a variant was rejected) and
    "recommended" (True for the smallest accepted file, False for the rest). A variant that holds an op
    outside TFLite's builtins ("non_builtin_ops", e.g. Flex) or computes preprocessing in a quantized type
    ("quantized_preprocessing_ops") is rejected whatever its AUC.
    """
    judged = {}
    for variant, result in results.items():
        reasons = []
        auc_drop = reference_auc - result["auc"]
        if auc_drop > max_auc_drop:
            reasons.append(f"AUC {result['auc']:.4f} is {auc_drop:.4f} below the SavedModel's {reference_auc:.4f} "
                           f"(tolerance {max_auc_drop})")
        if result["mean_abs_diff"] > OUTPUT_TOLERANCE[variant]:
            reasons.append(f"outputs differ from the SavedModel's by {result['mean_abs_diff']:.4g} on average "
                           f"(tolerance {OUTPUT_TOLERANCE[variant]})")
        if result.get("non_builtin_ops"):
            reasons.append(f"needs ops outside TFLite's builtins: {', '.join(result['non_builtin_ops'])}")
        if result.get("quantized_preprocessing_ops"):
            reasons.append(f"preprocessing quantized: {', '.join(result['quantized_preprocessing_ops'][:3])}")
        judged[variant] = {**result, "auc_drop": auc_drop, "output_tolerance": OUTPUT_TOLERANCE[variant],
                           "accepted": not reasons, "reasons": reasons, "recommended": False}
    accepted = [variant for variant, result in judged.items() if result["accepted"]]
    if accepted:
        judged[min(accepted, key=lambda variant: judged[variant]["size_bytes"])]["recommended"] = True
    return judged


def recommended_variant(judged: dict[str, dict]) -> str | None:
    """The variant judge_variants recommended, or None when every variant was rejected."""
    return next((variant for variant, result in judged.items() if result["recommended"]), None)
