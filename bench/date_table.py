"""A public table whose label follows the seasons, through the three commands, beside LightGBM.

Seattle's daily weather 2012-2015 (`seattle-weather.csv`, shipped inside the vega_datasets package: date,
precipitation, temp_max, temp_min, wind, and the label `weather`: sun, fog, rain, drizzle or snow). Every 5th
day is held out; the other days go through `prepare-data --csv`, `init --label weather` and `run` in a
temporary folder, and the pushed model is scored on the held-out days through its serving_default signature
(the date sent as seconds since the epoch, as prepare-data writes it). Beside it, on the same days:
LightGBM with default settings given the date's parts (year, month, day, weekday, day of year), LightGBM
without them, and the majority class. A benchmark, not a test (installs nothing: `make bench-quality` or
`pip install -e '.[bench]'` first). The figures are appended as a record to bench/results/date_table.jsonl
(bench/records.py):

    TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python bench/date_table.py --runs 2
"""
from __future__ import annotations

import argparse
import csv
import datetime
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

import records

NUMBERS = ("precipitation", "temp_max", "temp_min", "wind")


def weather_csv() -> str:
    import vega_datasets
    return os.path.join(os.path.dirname(vega_datasets.__file__), "_data", "seattle-weather.csv")


def read_rows(path: str) -> list[dict]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def write_rows(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def as_date(day: str) -> datetime.date:
    """The file's dates are written YYYY/MM/DD."""
    return datetime.date.fromisoformat(day.replace("/", "-"))


def seconds(day: str) -> int:
    value = as_date(day)
    return int(datetime.datetime(value.year, value.month, value.day, tzinfo=datetime.timezone.utc).timestamp())


def date_parts(day: str) -> list[float]:
    value = as_date(day)
    return [value.year, value.month, value.day, value.weekday(), value.timetuple().tm_yday]


def pipeline_accuracy(folder: str, train_csv: str, holdout: list[dict], code: str | None = None) -> tuple[float, float]:
    """The three commands in `folder` (with another checkout's code: `code`); output: (holdout accuracy of the
    pushed model, run seconds)."""
    python = [sys.executable, "-m", "pipeline"]
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **({"PYTHONPATH": code} if code else {}))
    for command in (["prepare-data", "--csv", train_csv, "--data", "data/weather"],
                    ["init", "--data", "data/weather", "--label", "weather"]):
        subprocess.run(python + command, cwd=folder, check=True, env=environment, capture_output=True)
    start = time.perf_counter()
    run = subprocess.run(python + ["run", "--config", "weather.yaml"], cwd=folder, env=environment,
                         capture_output=True, text=True)
    seconds_taken = time.perf_counter() - start
    if run.returncode != 0 or "blessed: yes" not in run.stdout:
        raise SystemExit(f"the run did not push a model:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}")
    import tensorflow as tf

    serving = os.path.join(folder, "output", "weather", "serving")
    newest = max(os.listdir(serving), key=int)
    model = tf.saved_model.load(os.path.join(serving, newest))
    examples = []
    for row in holdout:
        example = tf.train.Example()
        example.features.feature["date"].int64_list.value.append(seconds(row["date"]))
        for name in NUMBERS:
            example.features.feature[name].float_list.value.append(float(row[name]))
        examples.append(example.SerializeToString())
    outputs = model.signatures["serving_default"](examples=tf.constant(examples))
    classes = outputs["classes"].numpy()[0]
    predicted = [classes[i].decode() for i in outputs["scores"].numpy().argmax(axis=1)]
    return float(np.mean([p == row["weather"] for p, row in zip(predicted, holdout)])), seconds_taken


def lightgbm_accuracy(train: list[dict], holdout: list[dict], with_dates: bool) -> float:
    import lightgbm

    def features(rows):
        return np.array([[float(row[name]) for name in NUMBERS] + (date_parts(row["date"]) if with_dates else [])
                         for row in rows])

    model = lightgbm.LGBMClassifier(verbose=-1).fit(features(train), [row["weather"] for row in train])
    return float(np.mean(model.predict(features(holdout)) == np.array([row["weather"] for row in holdout])))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="pipeline runs (each from scratch)")
    parser.add_argument("--code", help="run another checkout's code (PYTHONPATH=DIR), e.g. to measure before a change")
    args = parser.parse_args()
    rows = read_rows(weather_csv())
    holdout = rows[4::5]
    train = [row for i, row in enumerate(rows) if i % 5 != 4]
    print(f"seattle-weather: {len(train):,} training days, {len(holdout):,} held out")
    ours, runs = [], []
    for run in range(args.runs):
        with tempfile.TemporaryDirectory(prefix="date-table-") as folder:
            train_csv = os.path.join(folder, "weather.csv")
            write_rows(train_csv, train)
            accuracy, seconds_taken = pipeline_accuracy(folder, train_csv, holdout, args.code)
        ours.append(accuracy)
        runs.append({"accuracy": accuracy, "run_s": seconds_taken})
        print(f"run {run + 1}: pushed model accuracy {accuracy:.4f} (run {seconds_taken:.0f} s)")
    majority = max(set(r["weather"] for r in train), key=[r["weather"] for r in train].count)
    with_dates, without_dates = lightgbm_accuracy(train, holdout, True), lightgbm_accuracy(train, holdout, False)
    majority_accuracy = float(np.mean([r["weather"] == majority for r in holdout]))
    print("| model | holdout accuracy |\n| --- | --- |")
    print(f"| ours, three commands ({args.runs} runs) | {', '.join(f'{a:.4f}' for a in ours)} |")
    print(f"| LightGBM, default settings, with the date's parts | {with_dates:.4f} |")
    print(f"| LightGBM, default settings, without the date | {without_dates:.4f} |")
    print(f"| majority class ({majority}) | {majority_accuracy:.4f} |")
    records.append("date_table", "seattle_weather", {
        "training_days": len(train), "holdout_days": len(holdout), "runs": runs,
        "lightgbm_with_dates": with_dates, "lightgbm_without_dates": without_dates,
        "majority_class": majority, "majority_accuracy": majority_accuracy}, code=args.code or records.PROJECT_ROOT)


if __name__ == "__main__":
    main()
