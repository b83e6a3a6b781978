"""The schema-driven model (models/tabular.py, what `init` configures) beside the hand-written model modules,
on the same data and the same eval split, and beside the yardsticks a tabular user knows: LightGBM with its
default settings, a linear model (least squares with a small ridge penalty, or logistic regression) on
one-hot and standardized features, and the trivial predictor.

For each example (TFX's penguins, multi-class; the taxi fare, regression), the pipeline runs `--seeds` times
with the hand-written config (configs/) and with the config `init` writes for the same data, each run from
scratch; the holdout metric is the candidate's on the eval split the ingestion step wrote (the same records
for every run: the split is a hash of each record). LightGBM and the linear model train on that run's train
split with the same features as the schema-driven model. Needs the `bench` extra (LightGBM):
`pip install -c constraints.txt '.[bench]'`.

    python bench/tabular_quality.py [--seeds 2] [--work DIR]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

import yaml

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_ROOT)

EXAMPLES = {
    "penguins": {"prepare": ["--example", "penguins"], "config": "configs/penguins.yaml", "label": "species",
                 "init": ["--label", "species", "--task", "multiclass"]},
    "taxi_fare": {"prepare": ["--example", "taxi"], "config": "configs/taxi_fare.yaml", "label": "fare",
                  "init": ["--label", "fare", "--exclude", "tips"]},
}


def _pipeline(*argv, cwd=PROJECT_ROOT) -> str:
    result = subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=cwd, capture_output=True, text=True)
    if result.returncode:
        raise SystemExit(f"python -m pipeline {' '.join(argv)} failed:\n{result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result.stdout


def _with_seed(config_file: str, seed: int, target: str) -> str:
    """A copy of `config_file` with absolute paths and train.seed set. Output: its path."""
    folder = os.path.dirname(os.path.abspath(config_file))
    with open(config_file) as handle:
        config = yaml.safe_load(handle)
    for key in ("data_root", "output_dir", "schema_path"):
        if key in config and not os.path.isabs(config[key]):
            config[key] = os.path.normpath(os.path.join(folder, config[key]))
    config.setdefault("train", {})["seed"] = seed
    with open(target, "w") as handle:
        yaml.safe_dump(config, handle)
    return target


def _candidate_metric(output: str) -> tuple[str, float, float]:
    """(primary metric, the candidate's holdout value, the trivial predictor's) from a run's precision report."""
    [path] = glob.glob(os.path.join(output, "pipeline", "PrecisionEvaluator", "evaluation", "*",
                                    "precision_report.json"))
    with open(path) as handle:
        report = json.load(handle)
    trivial = next(check for check in report["checks"] if check["gate"] == "beats_trivial")
    return report["primary_metric"], trivial["value"], trivial["reference"]


def _splits(output: str, config_file: str) -> dict:
    """The run's train and eval splits as the schema-driven model's features and labels (numpy)."""
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
    import pandas as pd
    frame = pd.DataFrame({name: values.astype(str) if values.dtype == object else values
                          for name, values in features.items()})
    for name in frame.columns:
        if frame[name].dtype == object:
            frame[name] = frame[name].astype("category")
        elif frame[name].dtype.kind == "i":
            frame[name] = frame[name].where(frame[name] != -(2 ** 63))  # the missing integer: NaN
    return frame


def _yardsticks(task: str, splits: dict) -> dict[str, float]:
    """LightGBM (defaults) and a least-squares model on the same split, scored as the pipeline scores."""
    import lightgbm
    import pandas as pd
    from sklearn.linear_model import LogisticRegression, Ridge

    from components.core import tasks

    (train_x, train_y), (eval_x, eval_y) = splits["train"], splits["eval"]
    train_frame, eval_frame = _frame(train_x), _frame(eval_x)
    task_ = tasks.task_named(task)
    if task_.is_classification:
        booster = lightgbm.LGBMClassifier(verbose=-1).fit(train_frame, train_y)
        lgb = booster.predict_proba(eval_frame)
    else:
        lgb = lightgbm.LGBMRegressor(verbose=-1).fit(train_frame, train_y).predict(eval_frame)
    encoded = pd.get_dummies(pd.concat([train_frame, eval_frame]), dummy_na=True).astype(float)
    encoded = encoded.fillna(encoded.iloc[:len(train_frame)].mean())
    encoded = (encoded - encoded.mean()) / encoded.std().replace(0, 1)
    train_encoded, eval_encoded = encoded.iloc[:len(train_frame)], encoded.iloc[len(train_frame):]
    if task_.is_classification:
        linear = LogisticRegression(max_iter=2000).fit(train_encoded, train_y).predict_proba(eval_encoded)
    else:
        linear = Ridge(alpha=1.0).fit(train_encoded, train_y).predict(eval_encoded)
    primary = task_.primary.name
    return {"LightGBM (defaults)": task_.score(eval_y, lgb)[primary],
            "least squares (ridge)" if not task_.is_classification else "logistic regression":
                task_.score(eval_y, linear)[primary]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--work", default="")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="tabular-quality-")
    print(f"work folder: {work}")
    for name, example in EXAMPLES.items():
        folder = os.path.join(work, name)
        os.makedirs(folder, exist_ok=True)
        data = os.path.join(folder, "data")
        _pipeline("prepare-data", *example["prepare"], "--data", data)
        _pipeline("init", "--data", data, *example["init"], "--name", "tabular", "--force", cwd=folder)
        configs = {"hand-written": os.path.join(PROJECT_ROOT, example["config"]),
                   "schema-driven (init)": os.path.join(folder, "tabular.yaml")}
        results: dict[str, list[float]] = {model: [] for model in configs}
        metric, trivial, last_output = "", None, None
        for model, config_file in configs.items():
            for seed in range(args.seeds):
                output = os.path.join(folder, f"{model.split()[0]}-{seed}")
                seeded = _with_seed(config_file, seed, os.path.join(folder, f"{model.split()[0]}-{seed}.yaml"))
                _pipeline("run", "--config", seeded, "--data", data, "--output", output)
                metric, value, trivial = _candidate_metric(output)
                results[model].append(value)
                print(f"  {name} {model} seed {seed}: {metric} {value:.4f}", flush=True)
                last_output = (output, configs["schema-driven (init)"])
        task = yaml.safe_load(open(configs["schema-driven (init)"]))["task"]["type"]
        yardsticks = _yardsticks(task, _splits(*last_output))
        print(f"\n{name} ({task}), holdout {metric} on the same eval split:")
        for model, values in results.items():
            spread = f" (runs: {', '.join(f'{v:.4f}' for v in values)})" if len(values) > 1 else ""
            print(f"  {model:<26} {statistics.mean(values):.4f}{spread}")
        for model, value in yardsticks.items():
            print(f"  {model:<26} {value:.4f}")
        print(f"  {'trivial predictor':<26} {trivial:.4f}\n", flush=True)


if __name__ == "__main__":
    main()
