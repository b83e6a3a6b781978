"""TFLite ladder on this machine: size, single-example latency and AUC of each variant against float32.

    .venv/bin/python bench/tflite_ladder.py [--models models.taxi models.taxi_wide] [--epochs 10]

For each model: trains it with the Trainer (float32, no XLA) on the bundled taxi data as gzip TFRecords
(shards 0-2 train, shard 3 eval), then runs the pipeline's own export step (`export_model`, as the
ModelExport component does): float32, float16, dynamic-range int8 and full int8 (calibrated on 300 training
examples), each a device model that takes raw features with the preprocessing inside, scored in LiteRT over
the eval shard and compared with the SavedModel's serving_raw on the same raw features. Prints each variant's
file size, weight bytes, median single-example invoke() latency (one thread, 1,000 examples), AUC and the
mean / max difference from serving_raw, the ratios to float32, and the ops the files use; each model's ladder is
appended as a record to bench/results/tflite_ladder.jsonl (bench/records.py).
"""
from __future__ import annotations

import argparse
import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import records  # noqa: E402 - bench/records.py, beside this script

from components.model_export.executor import export_model  # noqa: E402
from components.trainer.train import TrainingJob, train  # noqa: E402
from components.core.model_module import load_model_module  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.onboarding.example_data import write_taxi_span  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["models.taxi", "models.taxi_wide"])
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-tflite-")
    span_dir, rows = write_taxi_span(work, span=1)
    shards = sorted(glob.glob(os.path.join(span_dir, "*.gz")))
    train_files, eval_files = shards[:3], shards[3:]
    print(f"{rows} taxi rows in {span_dir}: 3 shards train, 1 shard eval", flush=True)
    settings = load_config(export={"latency_examples": 1000}).export
    for model_name in args.models:
        output = os.path.join(work, model_name)
        train_settings = load_config(train={
            "model": model_name, "epochs": args.epochs, "precision": "float32", "xla": "off"},
            evaluate={"absolute_bar": None}).train  # any task's model
        serving = os.path.join(output, "model", "Format-Serving")
        train(TrainingJob(settings=train_settings, train_files=train_files, eval_files=eval_files,
                          serving_model_dir=serving, run_dir=os.path.join(output, "run"),
                          checkpoint_dir=os.path.join(output, "ckpt")))
        report = export_model(serving, load_model_module(model_name), train_files, eval_files,
                              os.path.join(output, "export"), settings).to_json()
        variants = report["variants"]
        float32 = variants["float32"]
        print(f"\n{model_name}: SavedModel AUC {report['savedmodel']['auc']:.4f} on {report['eval_examples']} eval "
              f"examples; TFLite inputs: {report['inputs']}, scored in {report['runtime']} against "
              f"{report['compared_with']}")
        print(f"{'variant':<14}{'size (bytes)':>14}{'vs float32':>12}{'weights':>12}{'vs float32':>12}"
              f"{'median µs':>11}{'vs float32':>12}"
              f"{'AUC':>9}{'AUC drop':>10}{'diff mean':>10}{'diff max':>10}  verdict")
        for variant, result in variants.items():
            verdict = "recommended" if result["recommended"] else "accepted" if result["accepted"] else "rejected"
            print(f"{variant:<14}{result['size_bytes']:>14,}{result['size_bytes'] / float32['size_bytes']:>11.2f}x"
                  f"{result['weight_bytes']:>12,}{result['weight_bytes'] / float32['weight_bytes']:>11.2f}x"
                  f"{result['median_latency_us']:>11.1f}"
                  f"{result['median_latency_us'] / float32['median_latency_us']:>11.2f}x"
                  f"{result['auc']:>9.4f}{result['drop']:>10.4f}{result['mean_abs_diff']:>10.4f}"
                  f"{result['max_abs_diff']:>10.4f}  {verdict}", flush=True)
        records.append("tflite_ladder", model_name, {
            "epochs": args.epochs, "eval_examples": report["eval_examples"],
            "savedmodel_auc": report["savedmodel"]["auc"],
            "variants": variants, "failed_variants": report["failed_variants"]})
        for variant, reason in report["failed_variants"].items():
            print(f"{variant:<14}not converted: {reason}")
        for variant, result in variants.items():
            print(f"  {variant} ops: {', '.join(result['ops'])}; preprocessing constants "
                  f"{result['preprocessing_bytes']:,} bytes; non-builtin ops: {result['non_builtin_ops'] or 'none'}")


if __name__ == "__main__":
    main()
