"""Trains a finished run's model again on the run's own ingested splits, as the Trainer would with this
checkout's code (or another's), and scores the SavedModel on the whole eval split: a model change tried on the
quality bench's prepared tables without running the rest of the pipeline.

For each RUN folder (a `python -m pipeline run --output` folder, or one of bench/tabular_quality.py's
`WORK/TABLE/schema-driven-N` folders, whose config is the YAML file beside it of the same name) it reads the
config and the newest Examples the run's MLMD records, trains once per seed (train.seed) in a fresh folder and
prints the holdout metric, the validation metric (out of fold with train.folds) of the weights the Trainer
served (the interval it kept, or an average of intervals) and the schedule the Trainer reports. With the same
code, config and seed the figure is the pipeline's candidate's (unless the time budget cut the schedule at
another measured speed).

    TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python bench/train_again.py RUN [RUN ...] [--seeds 0,1,2]
        [--set train.KEY=VALUE ...] [--default KEY=VALUE ...] [--module NAME=VALUE ...] [--code DIR] [--work DIR]
        [--json FILE]

`--set` overrides a `train` setting (a YAML value). `--default` sets an entry of the schema-driven model's
defaults table (models/defaults.py) in every row, to try a default before changing it (e.g. `--default bins=48`,
`--default hidden_units=[256,256]`); an entry init writes into the `train` section (learning_rate,
weight_decay, folds, ...) is set there too, since the run's config carries the value init wrote. An entry of
the plan (target_steps, max_epochs, ...) only shapes the epochs, batch size and patience init wrote: set those
with `--set`. `--module` sets a constant of a hand-written model module before it builds the model.
`--code DIR` imports the pipeline from another checkout. `--json` appends one JSON line per training; each training
is also appended as a record to bench/results/train_again.jsonl (bench/records.py): a trial, kept as data.
"""
from __future__ import annotations

import argparse
import dataclasses
import glob
import inspect
import json
import os
import sys
import tempfile
import time

import yaml

import records
from export_again import PROJECT_ROOT, config_path, newest_outputs, run_name


def eval_metric(serving_dir: str, module, examples: str) -> tuple[str, float]:
    """Input: a SavedModel, its model module and an Examples folder. Output: the task's primary metric and its
    value on the whole eval split, scored as ModelExport scores the SavedModel (scoring_sample, every record)."""
    import tensorflow as tf

    from components.core.model_module import task_of
    from components.model_export.executor import scoring_sample

    task = task_of(module)
    files = sorted(glob.glob(os.path.join(examples, "Split-eval", "*")))
    split = scoring_sample(tf.saved_model.load(serving_dir), module, task, files, examples=0)
    return task.primary.name, task.score(split["labels"], split["predictions"])[task.primary.name]


# The defaults table's entries that only shape the plan init writes (epochs, batch size, patience)
PLAN_ENTRIES = ("target_steps", "min_epochs", "max_epochs", "plan_scale", "batch_sizes", "early_stopping_share",
                "early_stopping_least")


def default_overrides(entries: dict) -> tuple[dict, dict]:
    """Input: --default's entries (name -> value). Output: (the defaults table's entries to set, the train
    settings they set too: those init writes under the same name). SystemExit names an entry that is no
    default, or one of the plan (PLAN_ENTRIES), which the run's config carries as epochs, batch size and
    patience."""
    from components.settings import TrainConfig
    from models.defaults import KEYS

    unknown = sorted(set(entries) - set(KEYS))
    if unknown:
        raise SystemExit(f"train_again: --default {', '.join(unknown)}: not a default of the schema-driven model "
                         f"(models/defaults.py: {', '.join(KEYS)})")
    plan = sorted(set(entries) & set(PLAN_ENTRIES))
    if plan:
        raise SystemExit(f"train_again: --default {', '.join(plan)} shapes the plan init wrote into the run's config: "
                         "set train.epochs, train.batch_size or train.early_stopping_patience with --set")
    train_fields = {field.name for field in dataclasses.fields(TrainConfig)}
    return dict(entries), {name: value for name, value in entries.items() if name in train_fields}


def train_again(run: str, config_file: str, seed: int, train_overrides: dict, constants: dict, work: str,
                table: dict | None = None) -> dict:
    """Input: a run folder, its config's path, the seed, train settings, model-module constants and defaults
    table entries to override, and a scratch folder. Output: the metric, its value, the schedule line and the
    seconds."""
    from models.defaults import overridden

    with overridden(**(table or {})):  # the model reads its row when it is configured, as the Trainer does
        return _train_again(run, config_file, seed, train_overrides, constants, work, table or {})


def _train_again(run: str, config_file: str, seed: int, train_overrides: dict, constants: dict, work: str,
                 table: dict) -> dict:
    from components.core.model_module import load_model_module, task_of
    from components.trainer.train import TrainingJob, train
    from pipeline.config import load_config

    config = load_config(config_file, output_dir=run)
    module = load_model_module(config.train.model, config.task, config.schema_path)
    source = module if inspect.ismodule(module) else sys.modules[type(module).__module__]
    for name, value in constants.items():
        if not hasattr(source, name):
            hint = f" (the schema-driven model's defaults: --default {name.lower()}=...)" if hasattr(
                module, "defaults") else ""
            raise SystemExit(f"train_again: {source.__name__} has no constant {name}{hint}")
        setattr(source, name, value)
    settings = dataclasses.replace(config.train, **train_overrides, seed=seed)
    _, examples = newest_outputs(run, config)
    split = lambda name: [os.path.join(examples, f"Split-{name}", "*")]  # noqa: E731
    out = tempfile.mkdtemp(prefix="train-again-", dir=work)
    job = TrainingJob(settings, split("train"), split("eval"), os.path.join(out, "serving"), os.path.join(out, "run"),
                      os.path.join(out, "checkpoint"), task_config=config.task, schema_path=config.schema_path)
    report = train(job)
    metric, value = eval_metric(job.serving_model_dir, module, examples)
    validated = report.history.get(f"val_{task_of(module).validation_metric}", [])
    kept = validated[report.best_interval - 1] if report.best_interval and validated else None
    return {"run": run, "seed": seed, "metric": metric, "value": value, "validation": report.validation_value,
            "best_interval_validation": kept, "averaged_intervals": report.averaged_intervals,
            "schedule": report.schedule_line(), "search": report.search_line(), "candidates": report.candidates,
            "fit_seconds": report.fit_seconds, "trainer_seconds": report.total_seconds,
            "train_overrides": train_overrides, "module_constants": constants, "defaults": table}


def _assignments(pairs: list[str], prefix: str = "") -> dict:
    """["train.epochs=40", ...] -> {"epochs": 40} (values read as YAML; `prefix` stripped from the keys)."""
    parsed = {}
    for pair in pairs:
        key, _, value = pair.partition("=")
        if not _ or (prefix and not key.startswith(prefix)):
            raise SystemExit(f"train_again: expected {prefix or ''}NAME=VALUE, got {pair!r}")
        parsed[key[len(prefix):]] = yaml.safe_load(value)
    return {key: tuple(value) if isinstance(value, list) else value for key, value in parsed.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders (each with its MLMD and TFRecordIngest's output)")
    parser.add_argument("--config", default="", help="the runs' config (default: RUN.yaml beside each run)")
    parser.add_argument("--seeds", default="0", help="comma-separated train.seed values, one training each")
    parser.add_argument("--set", action="append", default=[], help="train.KEY=VALUE: a train setting overridden")
    parser.add_argument("--default", action="append", default=[],
                        help="KEY=VALUE: an entry of the schema-driven model's defaults table (models/defaults.py) set")
    parser.add_argument("--module", action="append", default=[], help="NAME=VALUE: a model-module constant set")
    parser.add_argument("--code", default=PROJECT_ROOT, help="the checkout whose Trainer runs")
    parser.add_argument("--work", default="", help="where the trained models go (default: the system's temp)")
    parser.add_argument("--json", default="", help="append one JSON line per training to this file")
    args = parser.parse_args()
    sys.path.insert(0, os.path.abspath(args.code))
    overrides, constants = _assignments(args.set, "train."), _assignments(args.module)
    table, written = default_overrides(_assignments(args.default))
    overrides = {**written, **overrides}  # --set wins
    if args.work:
        os.makedirs(args.work, exist_ok=True)
    for run in args.runs:
        for seed in (int(seed) for seed in args.seeds.split(",")):
            started = time.monotonic()
            result = train_again(run, config_path(run, args.config), seed, overrides, constants, args.work or None,
                                 table)
            result["code"] = os.path.abspath(args.code)
            validation = "" if result["validation"] is None else f", validation {result['validation']:.4f}"
            search = f"; search: {result['search']}" if result["search"] else ""
            print(f"{run} seed {seed}: {result['metric']} {result['value']:.4f}{validation} ({result['schedule']}"
                  f"{search}; {time.monotonic() - started:.0f} s)", flush=True)
            if args.json:
                with open(args.json, "a") as handle:
                    handle.write(json.dumps(result) + "\n")
            records.append("train_again", run_name(run), {key: value for key, value in result.items()
                                                           if key not in ("run", "code")}, code=args.code)


if __name__ == "__main__":
    main()
