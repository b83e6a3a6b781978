"""Converts and scores a finished run's trained model again, as ModelExport would with this checkout's code
(or another's): the TFLite ladder of an export change, measured on models already trained, without training
them again.

For each RUN folder (a `python -m pipeline run --output` folder, or one of bench/tabular_quality.py's
`WORK/TABLE/schema-driven-N` folders, whose config is the YAML file beside it of the same name) it takes the
newest Trainer model and ingested splits the run's MLMD records, runs ModelExport's `export_model` on them
(calibration on the training split, scoring on at most `export.scoring_examples` eval records) and prints one
line per variant: its primary metric beside the SavedModel's, its size, and its verdict with the reasons; and
the seconds `export_model` took (the ModelExport step but for finding its inputs and writing its report), over
`--repeat` exports of the same model (min, median and max).

    TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python bench/export_again.py RUN [RUN ...] [--config CONFIG]
        [--code DIR] [--repeat N] [--json FILE]

`--code DIR` imports the pipeline from another checkout (e.g. a `git worktree` of an older commit), so the
same models can be exported by the code before and after a change. `--json` appends one JSON line per run; each
run's figures are also appended as a record to bench/results/export_again.jsonl (bench/records.py).
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import time

import records

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_name(run: str) -> str:
    """A run folder as a record names it: its last two parts, e.g. "diamonds/schema-driven-0"."""
    return "/".join(os.path.normpath(os.path.abspath(run)).split(os.sep)[-2:])


def newest_outputs(run: str, config) -> tuple[str, str]:
    """The run's newest Trainer model (its Format-Serving folder) and ingested Examples folder, read from the
    run's MLMD."""
    from tfx.utils import path_utils

    from pipeline.runs import mlmd

    store = mlmd.open_store(config)
    if store is None:
        raise SystemExit(f"export_again: no MLMD under {run}: not a pipeline run's output folder")
    found = []
    for node, output_key in (("Trainer", "model"), ("TFRecordIngest", "examples")):
        artifact = mlmd.newest_output(store, config.pipeline_name, node, output_key)
        if artifact is None:
            raise SystemExit(f"export_again: no {node} output in {config.metadata_path}")
        found.append(artifact.uri)
    model, examples = found
    return path_utils.serving_model_path(model), examples


def config_path(run: str, config: str) -> str:
    """The config a run was made with: `config` when given, else the YAML file beside the run's folder."""
    if config:
        return config
    beside = run.rstrip(os.sep) + ".yaml"
    if os.path.exists(beside):
        return beside
    raise SystemExit(f"export_again: no config for {run}: pass --config (the run's YAML file)")


def export_again(run: str, config_file: str, repeat: int = 1) -> dict:
    """Input: a run folder, its config's path and how many times to export it. Output: the table, the metric,
    the SavedModel's figure, each variant's figure, size, verdict and reasons (of the last export), and the
    seconds of each export."""
    from components.core.model_module import load_model_module
    from components.model_export.executor import export_model
    from pipeline.config import load_config

    config = load_config(config_file, output_dir=run)
    module = load_model_module(config.train.model, config.task, config.schema_path)
    serving, examples = newest_outputs(run, config)
    train_files, eval_files = (sorted(glob.glob(os.path.join(examples, f"Split-{split}", "*")))
                               for split in ("train", "eval"))
    seconds = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as output:
            started = time.perf_counter()
            report = export_model(serving, module, train_files, eval_files, output, config.export)
            seconds.append(round(time.perf_counter() - started, 2))
    metric = report.primary_metric
    return {"run": run, "metric": metric, "savedmodel": report.savedmodel[metric], "scored": report.scored_examples,
            "variants": {name: {"metric": result[metric], "size_bytes": result["size_bytes"],
                                "accepted": result["accepted"], "recommended": result.get("recommended", False),
                                "reasons": result["reasons"]} for name, result in report.variants.items()},
            "failed": report.failed_variants, "seconds": seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each with pipeline/Trainer and pipeline/TFRecordIngest)")
    parser.add_argument("--config", default="", help="the runs' config (default: RUN.yaml beside each run)")
    parser.add_argument("--code", default=PROJECT_ROOT, help="the checkout whose export code runs")
    parser.add_argument("--repeat", type=int, default=1, help="exports of each run, timed (default 1)")
    parser.add_argument("--json", default="", help="append one JSON line per run to this file")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error(f"--repeat: at least 1 export, not {args.repeat}")
    sys.path.insert(0, os.path.abspath(args.code))
    for run in args.runs:
        result = export_again(run, config_path(run, args.config), args.repeat)
        result["code"] = os.path.abspath(args.code)
        print(f"{run}: {result['metric']} on {result['scored']:,} eval records, SavedModel {result['savedmodel']:.4f}")
        for name, variant in result["variants"].items():
            verdict = "recommended" if variant["recommended"] else "accepted" if variant["accepted"] else "rejected"
            reasons = f" ({'; '.join(reason[:120] for reason in variant['reasons'])})" if variant["reasons"] else ""
            print(f"  {name:13} {variant['metric']:.4f}  {variant['size_bytes']:>10,} bytes  {verdict}{reasons}")
        for name, why in result["failed"].items():
            print(f"  {name:13} not converted: {why}")
        seconds = result["seconds"]
        print(f"  export_model  {min(seconds):.1f} s (median {statistics.median(seconds):.1f}, max {max(seconds):.1f}; "
              f"{len(seconds)} exports)")
        if args.json:
            with open(args.json, "a") as handle:
                handle.write(json.dumps(result) + "\n")
        records.append("export_again", run_name(run), {key: value for key, value in result.items()
                                                        if key not in ("run", "code")}, code=args.code)


if __name__ == "__main__":
    main()
