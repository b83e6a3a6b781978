"""The TFLite ladder and the pure rules that accept, reject and recommend its variants (no TensorFlow here).

Variants (components.core.contract.TFLITE_VARIANTS), from the TensorFlow post-training quantization guide; each
takes raw features and carries the preprocessing, which stays exact in all of them:
  float32       plain conversion, the reference for size and latency
  float16       weights stored as float16
  dynamic_int8  weights int8, activations quantized on the fly
  full_int8     the model core's weights and activations int8, calibrated on a representative dataset;
                preprocessing in its own types (float32 normalization, integer lookups and bins), raw inputs
                and the float output as they are. For regression, an int8 activation saturates outside its
                calibration range: the calibration examples span the model's whole range of predictions on
                the training data and the output layer stays float32 (ModelExport's calibration_features)
"""
from __future__ import annotations

# Largest mean |output - SavedModel output| over the scored eval examples that still counts as the same model: catches a
# broken conversion (wrong inputs, ignored options), not quantization noise. In probability for classifiers;
# for regression relative to the spread of the SavedModel's predictions (ModelExport's output_differences).
# Taken from the taxi models' measured differences (benchmarks page): the maximum is no criterion, one
# example of a 1024-wide network moved 0.27 under full int8 with the AUC unchanged.
OUTPUT_TOLERANCE = {"float32": 1e-5, "float16": 1e-3, "dynamic_int8": 0.01, "full_int8": 0.03}


def judge_variants(results: dict[str, dict], task, reference: dict[str, float], max_drop: float,
                   sampled: bool = False) -> dict[str, dict]:
    """Input: variant -> {<the task's metrics>, "size_bytes", "mean_abs_diff", ...; optionally "drop_interval"
    and "mean_abs_diff_interval", [low, high]}, the task (components/core/tasks.py), the SavedModel's metrics
    (on the same examples), the allowed drop on the task's primary metric (its units; a fraction of the
    SavedModel's value when the task's tolerances are relative), and whether the examples were a sample of the
    eval split (export.scoring_examples).

    Output: the same dicts with "drop" (how much worse than the SavedModel on the primary metric), "accepted",
    "reasons" (why a variant was rejected), "recommended" (True for the smallest accepted file, False for
    the rest) and "notes": a verdict its interval does not settle (the interval holds the tolerance, so the
    examples cannot tell at that confidence which side of it the variant is). The verdict is the measured
    value's, as on the whole split; the note says how sure it is. A variant that holds an op outside TFLite's
    builtins ("non_builtin_ops", e.g. Flex) or computes preprocessing in a quantized type
    ("quantized_preprocessing_ops") is rejected whatever it scores.
    """
    primary = task.primary
    allowed = task.tolerance(max_drop, reference[primary.name])
    more = "; more scored examples (export.scoring_examples) would settle it" if sampled else ""
    judged = {}
    for variant, result in results.items():
        reasons, notes = [], []
        drop = 0.0 - primary.improvement(result[primary.name], reference[primary.name])
        if drop > allowed:
            reasons.append(f"{primary.label} {result[primary.name]:.4f} is {drop:.4f} worse than the SavedModel's "
                           f"{reference[primary.name]:.4f} (tolerance {allowed:.4g})")
        if result["mean_abs_diff"] > OUTPUT_TOLERANCE[variant]:
            reasons.append(f"outputs differ from the SavedModel's by {result['mean_abs_diff']:.4g} on average "
                           f"(tolerance {OUTPUT_TOLERANCE[variant]})")
        if result.get("non_builtin_ops"):
            reasons.append(f"needs ops outside TFLite's builtins: {', '.join(result['non_builtin_ops'])}")
        if result.get("quantized_preprocessing_ops"):
            reasons.append(f"preprocessing quantized: {', '.join(result['quantized_preprocessing_ops'][:3])}")
        low, high = result.get("drop_interval") or (drop, drop)
        if low <= allowed < high:
            notes.append(f"the interval of the {primary.label} drop [{low:.4f}, {high:.4f}] holds the tolerance "
                         f"{allowed:.4g}{more}")
        low, high = result.get("mean_abs_diff_interval") or (result["mean_abs_diff"],) * 2
        if low <= OUTPUT_TOLERANCE[variant] < high:
            notes.append(f"the interval of the mean output difference [{low:.4g}, {high:.4g}] holds the tolerance "
                         f"{OUTPUT_TOLERANCE[variant]}{more}")
        judged[variant] = {**result, "drop": drop, "allowed_drop": allowed, "output_tolerance": OUTPUT_TOLERANCE[variant],
                           "accepted": not reasons, "reasons": reasons, "notes": notes, "recommended": False}
    accepted = [variant for variant, result in judged.items() if result["accepted"]]
    if accepted:
        judged[min(accepted, key=lambda variant: judged[variant]["size_bytes"])]["recommended"] = True
    return judged


def recommended_variant(judged: dict[str, dict]) -> str | None:
    """The variant judge_variants recommended, or None when every variant was rejected."""
    return next((variant for variant, result in judged.items() if result["recommended"]), None)
