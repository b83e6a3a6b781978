"""LightGBM variants on a finished run's own splits: which of LightGBM's settings account for its lead over the
schema-driven model on a table (a lead to follow, not a default to choose).

For each RUN folder (a `python -m pipeline run --output` folder, or one of bench/tabular_quality.py's
`WORK/TABLE/schema-driven-N` folders, whose config is the YAML file beside it of the same name) it reads the
run's ingested train and eval splits as bench/tabular_quality.py does and prints the task's primary metric on
the eval split of LightGBM with its defaults (the bench's yardstick), then of each variant, one line each:
- `max_bin` N for each N of --max-bins (LightGBM's histogram bins per number; the schema-driven model's
  piecewise-linear encoding has up to 16 bins per number);
- a regression's other losses: the absolute error, and the squared or absolute error of log(1 + label) (for a
  label >= 0);
- each column of --without left out, and each integer or float column of --bin cut into quantile bins first.

    TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python bench/lightgbm_variants.py RUN [RUN ...] [--config CONFIG]
        [--max-bins 8,16,48] [--without COLUMN ...] [--bin COLUMN:16,48 ...]

Each run's variants are appended as a record to bench/results/lightgbm_variants.jsonl (bench/records.py).
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import records  # noqa: E402
from export_again import PROJECT_ROOT, config_path, run_name  # noqa: E402

sys.path.insert(0, PROJECT_ROOT)


def quantile_binned(train_values, eval_values, bins: int):
    """A number's training and eval values as the index of their training quantile bin (missing stays NaN)."""
    present = train_values[np.isfinite(train_values)]
    edges = np.unique(np.quantile(present, np.linspace(0.0, 1.0, bins + 1)))[1:-1]

    def binned(values):
        values = np.asarray(values, np.float64)
        return np.where(np.isfinite(values), np.digitize(values, edges), np.nan)
    return binned(train_values), binned(eval_values)


def variants(task_name: str, splits: dict, max_bins=(), without=(), binned=None) -> list[tuple[str, float]]:
    """Input: the task's name, the run's splits ({"train": (features, labels), "eval": ...}, as
    bench/tabular_quality.py's _splits gives them), LightGBM max_bin values, columns to leave out, and columns
    to bin first ({column: [bins, ...]}). Output: (variant, the primary metric on the eval split), LightGBM's
    defaults first."""
    from components.core import tasks
    from tabular_quality import _frame, class_count, lightgbm_predictions

    task = tasks.task_named(task_name)
    (train_x, train_y), (eval_x, eval_y) = splits["train"], splits["eval"]
    train_frame, eval_frame = _frame(train_x), _frame(eval_x)
    classification = isinstance(task, tasks.ClassificationTask)
    classes = class_count(train_y, eval_y) if classification else 0

    def score(train, evaluate, label_transform=None, **settings) -> float:
        log = label_transform == "log"
        target = np.log1p(np.maximum(train_y, 0.0)) if log else train_y
        predictions = lightgbm_predictions(task_name, train, target, evaluate, classes, **settings)
        return float(task.score(eval_y, np.expm1(predictions) if log else predictions)[task.primary.name])

    results = [("defaults", score(train_frame, eval_frame))]
    results += [(f"max_bin {bins}", score(train_frame, eval_frame, max_bin=bins)) for bins in max_bins]
    if not classification:
        results.append(("absolute error", score(train_frame, eval_frame, objective="l1")))
        if np.min(train_y) >= 0:
            results.append(("squared error of log(1 + label)", score(train_frame, eval_frame, "log")))
            results.append(("absolute error of log(1 + label)", score(train_frame, eval_frame, "log",
                                                                      objective="l1")))
    for column in without:
        results.append((f"without {column}", score(train_frame.drop(columns=[column]),
                                                   eval_frame.drop(columns=[column]))))
    for column, counts in (binned or {}).items():
        for bins in counts:
            train_binned, eval_binned = train_frame.copy(), eval_frame.copy()
            train_binned[column], eval_binned[column] = quantile_binned(
                train_frame[column].to_numpy(np.float64), eval_frame[column].to_numpy(np.float64), bins)
            results.append((f"{column} in {bins} quantile bins", score(train_binned, eval_binned)))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--config", help="the runs' config (default: the YAML file beside each run's folder)")
    parser.add_argument("--max-bins", default="8,16,48", help="LightGBM max_bin values, comma-separated")
    parser.add_argument("--without", action="append", default=[], help="a column to leave out (repeatable)")
    parser.add_argument("--bin", action="append", default=[], metavar="COLUMN:N,N",
                        help="a number column cut into N quantile bins first (repeatable)")
    args = parser.parse_args()
    from pipeline.config import load_config
    from tabular_quality import _splits

    max_bins = [int(value) for value in args.max_bins.split(",") if value]
    binned = {column: [int(value) for value in counts.split(",")]
              for column, counts in (item.rsplit(":", 1) for item in args.bin)}
    for run in args.runs:
        config_file = config_path(run, args.config)
        task = load_config(config_file).task.type
        results = variants(task, _splits(run, config_file), max_bins, args.without, binned)
        print(f"{run}: {task}")
        for name, value in results:
            print(f"  {name:<40} {value:.4f}")
        records.append("lightgbm_variants", run_name(run), {"task": task, "variants": dict(results)})


if __name__ == "__main__":
    main()
