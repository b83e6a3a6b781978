"""Production retraining on a stream of natural spans: what each training window gives.

The bundled taxi rows, ordered by `trip_start_timestamp`, are split into a fixed holdout (every 10th row,
so it spans the whole period) and --spans natural spans of the rest, in time order (about 3,400 rows each).
For each window in --windows (`ingest.span_window`: the last N spans a run trains on, warm-started from the
served model), a fresh output directory receives the spans one at a time, and after each, one
`python -m pipeline run` with the default config, as a production retraining loop runs. Printed per span:
the window, each gate with its interval, blessed or not, and the holdout AUC of the model served after the
run (the one pushed last); each window's spans are appended as a record to bench/results/retraining_stream.jsonl
(bench/records.py). A benchmark, not a test; about 1 minute per run on a 2-core machine.

    python bench/retraining_stream.py [--spans 4] [--windows 1,2,4] [--work DIR]
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_ROOT)

import records  # noqa: E402 - bench/records.py, beside this script

HOLDOUT_EVERY = 10


def write_stream(root: str, spans: int) -> tuple[list[str], str]:
    """Writes the time-ordered spans (not yet in any data root) and the holdout. Output: (span folders,
    holdout file)."""
    import tensorflow as tf

    from pipeline.onboarding.example_data import bundled_taxi_csv, row_to_example

    with open(bundled_taxi_csv(), newline="") as handle:
        rows = sorted(csv.DictReader(handle), key=lambda row: int(row["trip_start_timestamp"] or 0))
    holdout = [row for i, row in enumerate(rows) if i % HOLDOUT_EVERY == 0]
    stream = [row for i, row in enumerate(rows) if i % HOLDOUT_EVERY]
    holdout_file = os.path.join(root, "holdout.tfrecord.gz")
    with tf.io.TFRecordWriter(holdout_file, "GZIP") as writer:
        for row in holdout:
            writer.write(row_to_example(row).SerializeToString())
    folders = []
    size = -(-len(stream) // spans)
    for span in range(spans):
        folder = os.path.join(root, "stream", f"span-{span + 1}")
        os.makedirs(folder, exist_ok=True)
        with tf.io.TFRecordWriter(os.path.join(folder, "data.tfrecord.gz"), "GZIP") as writer:
            for row in stream[span * size:(span + 1) * size]:
                writer.write(row_to_example(row).SerializeToString())
        folders.append(folder)
    return folders, holdout_file


def holdout_auc(serving_version: str, holdout_file: str) -> float:
    """The AUC of a pushed model on the holdout (its serving_default and transform_features signatures)."""
    import tensorflow as tf

    from components.core import tasks

    model = tf.saved_model.load(serving_version)
    records = tf.constant([r.numpy() for r in tf.data.TFRecordDataset(holdout_file, compression_type="GZIP")])
    labels = model.signatures["transform_features"](examples=records)["big_tipper"].numpy()
    scores = model.signatures["serving_default"](examples=records)[tasks.PROBABILITIES].numpy()
    return tasks.auc(labels, scores)


def run_stream(window: int, folders: list[str], holdout_file: str, work: str, cold: bool = False) -> list[dict]:
    import shutil

    from components.core.records import GateCheck

    name = f"window-{window}" + ("-cold" if cold else "")
    data, output = os.path.join(work, name, "data"), os.path.join(work, name, "output")
    config = os.path.join(work, f"{name}.yaml")
    with open(config, "w") as handle:
        handle.write(f"ingest: {{span_window: {window}}}\n" + ("train: {warm_start: false}\n" if cold else ""))
    rows = []
    for span, folder in enumerate(folders, start=1):
        shutil.copytree(folder, os.path.join(data, os.path.basename(folder)))
        result = subprocess.run([sys.executable, "-m", "pipeline", "run", "--config", config, "--data", data,
                                 "--output", output], cwd=PROJECT_ROOT, capture_output=True, text=True)
        reports = sorted(glob.glob(os.path.join(output, "pipeline", "PrecisionEvaluator", "evaluation", "*",
                                                "precision_report.json")), key=lambda p: int(p.split("/")[-2]))
        report = json.load(open(reports[-1])) if reports else {}
        versions = sorted(name for name in os.listdir(os.path.join(output, "serving")) if name.isdigit()) \
            if os.path.isdir(os.path.join(output, "serving")) else []
        served = os.path.join(output, "serving", versions[-1]) if versions else None
        rows.append({"span": span, "window": window, "exit": result.returncode, "blessed": report.get("blessed"),
                     "summary": report.get("summary", result.stderr.strip().splitlines()[-1:]),
                     "checks": report.get("checks", []), "eval_examples": report.get("eval_examples"),
                     "served_version": versions[-1] if versions else None,
                     "holdout_auc": holdout_auc(served, holdout_file) if served else None})
        row = rows[-1]
        print(f"window {window}{' (cold)' if cold else ''} span {span}: exit {row['exit']}, blessed {row['blessed']}, served "
              f"{row['served_version']}, holdout AUC {row['holdout_auc'] and round(row['holdout_auc'], 4)}",
              flush=True)
        for check in row["checks"]:
            print("    " + GateCheck(**check).describe(), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=4)
    parser.add_argument("--windows", default="1,2,4")
    parser.add_argument("--work", default="")
    parser.add_argument("--cold", action="store_true", help="train.warm_start off: every run trains from scratch")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="retraining-stream-")
    print(f"work folder: {work}")
    folders, holdout_file = write_stream(work, args.spans)
    summary = {}
    for window in (int(w) for w in args.windows.split(",")):
        summary[window] = run_stream(window, folders, holdout_file, work, args.cold)
        records.append("retraining_stream", f"window {window}" + (", from scratch" if args.cold else ""),
                       {"window": window, "cold": args.cold, "spans": summary[window]})
    print("\nwindow  span  blessed  served holdout AUC")
    for window, rows in summary.items():
        for row in rows:
            auc = "-" if row["holdout_auc"] is None else f"{row['holdout_auc']:.4f}"
            print(f"{window:>6}  {row['span']:>4}  {str(row['blessed']):>7}  {auc}")
    with open(os.path.join(work, "stream.json"), "w") as handle:
        json.dump(summary, handle, indent=2)


if __name__ == "__main__":
    main()
