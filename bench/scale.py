"""Scale benchmark: the whole pipeline on an example dataset written K times over, per-step cost as data grows.

For each K in --copies (default 1,10,100) it writes the dataset K times as distinct records into gzip shards
of one span: the bundled 15k-row taxi sample (copy c shifts `trip_start_timestamp` by c seconds), or with
`--example penguins` TFX's 334 penguins (copy c moves `body_mass_g` c x 1e-5 of the way to 0.5, inside
the schema's [0, 1]). It runs
`python -m pipeline run` on it in a fresh output directory, with `--config` (configs/taxi_fare.yaml for the
fare regression, configs/penguins.yaml for the penguins), and prints one row per K: seconds and examples/s
of every step, the whole run's wall time and the run's peak RSS; each run's figures are appended as a record to
bench/results/scale.jsonl (bench/records.py). A benchmark, not a test.

Usage:  .venv/bin/python bench/scale.py [--copies 1,10,100] [--example taxi|penguins] [--workdir DIR]
        [--config YAML]   (`make bench-scale`). 100x taxi is 1.5M rows; the data is written once per workdir.
"""
from __future__ import annotations

import argparse
import csv
import glob
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_ROOT)

import records  # noqa: E402 - bench/records.py, beside this script
from components.core import contract  # noqa: E402 - plain strings, importable before TensorFlow

STEPS = ("TFRecordIngest", "StatisticsGen", "ExampleValidator", "ValidationGate", "Fp32BaselineTrainer", "Trainer",
         "PrecisionEvaluator", "ModelExport", "AtomicPusher")
STEP_LINE = re.compile(r"^\[(\w+)\] (ran|cached) in ([\d.]+) s$")
ROWS_PER_SHARD = 50_000


def _penguin_copies(copies: int):
    """TFX's penguin records, `copies` times, copy c with body_mass_g (scaled to [0, 1]) moved c x 1e-5 of the
    way to 0.5, so the copies are distinct records that stay inside the schema's range."""
    import tensorflow as tf

    from pipeline.onboarding.example_data import bundled_penguin_files

    penguins = [tf.train.Example.FromString(r.numpy())
                for r in tf.data.TFRecordDataset(bundled_penguin_files(), compression_type="GZIP")]
    for copy in range(copies):
        for record in penguins:
            example = tf.train.Example()
            example.CopyFrom(record)
            mass = example.features.feature["body_mass_g"].float_list
            mass.value[0] += (0.5 - mass.value[0]) * copy * 1e-5
            yield example


def write_copies(data_root: str, copies: int, example_name: str = "taxi") -> int:
    """Writes the example dataset `copies` times as distinct records into <data_root>/span-1. Output: rows."""
    import tensorflow as tf

    from pipeline.onboarding.example_data import bundled_taxi_csv, row_to_example

    span_dir = os.path.join(data_root, "span-1")
    done = os.path.join(span_dir, ".rows")
    if os.path.exists(done):
        with open(done) as handle:
            return int(handle.read())
    os.makedirs(span_dir, exist_ok=True)
    if example_name == "penguins":
        with tf.io.TFRecordWriter(os.path.join(span_dir, "data-00000-of-00001.tfrecord.gz"), "GZIP") as writer:
            written = 0
            for example in _penguin_copies(copies):
                writer.write(example.SerializeToString())
                written += 1
        with open(done, "w") as handle:
            handle.write(str(written))
        return written
    with open(bundled_taxi_csv(), newline="") as handle:
        rows = list(csv.DictReader(handle))
    total = len(rows) * copies
    shards = max(1, -(-total // ROWS_PER_SHARD))
    writers = [tf.io.TFRecordWriter(os.path.join(span_dir, f"data-{i:05d}-of-{shards:05d}.tfrecord.gz"), "GZIP")
               for i in range(shards)]
    written = 0
    for copy in range(copies):
        for row in rows:
            example = row_to_example(row)
            timestamp = example.features.feature["trip_start_timestamp"].int64_list.value
            if timestamp:
                timestamp[0] += copy
            writers[written % shards].write(example.SerializeToString())
            written += 1
    for writer in writers:
        writer.close()
    with open(done, "w") as handle:
        handle.write(str(written))
    return written


def run_pipeline(data_root: str, output: str, config: str | None) -> dict:
    """Runs the pipeline CLI once. Output: step seconds, wall seconds, peak RSS (GB) and the run's reports."""
    command = [sys.executable, "-m", "pipeline", "run", "--data", data_root, "--output", output]
    if config:
        command += ["--config", config]
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.monotonic()
    result = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True)
    wall = time.monotonic() - start
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if result.returncode != 0:
        raise SystemExit(f"pipeline failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    steps = {match.group(1): float(match.group(3))
             for match in map(STEP_LINE.match, result.stdout.splitlines()) if match}
    return {"steps": steps, "wall": wall, "peak_rss_gb": max(peak_kb, before) / 1e6,
            "reports": _reports(os.path.join(output, "pipeline"))}


def _newest_json(pattern: str) -> dict:
    files = sorted(glob.glob(pattern), key=lambda path: int(path.split(os.sep)[-2]))
    if not files:
        return {}
    with open(files[-1]) as handle:
        return json.load(handle)


def _reports(root: str) -> dict:
    """The newest report of each kind under the pipeline root (<step>/<output key>/<execution id>/<file>)."""
    def newest(step: str, output: str, file_name: str) -> dict:
        return _newest_json(os.path.join(root, step, output, "*", file_name))

    return {"ingest": newest("TFRecordIngest", contract.EXAMPLES, contract.INGEST_REPORT_FILE),
            "trainer": newest("Trainer", contract.MODEL_RUN, contract.TRAINING_REPORT_FILE),
            "baseline": newest("Fp32BaselineTrainer", contract.MODEL_RUN, contract.TRAINING_REPORT_FILE),
            "evaluation": newest("PrecisionEvaluator", contract.EVALUATION, contract.PRECISION_REPORT_FILE)}


def examples_per_second(run: dict) -> dict[str, float]:
    """Examples each step processed per second of its wall time (trainers: training examples x epochs)."""
    counts = run["reports"]["ingest"].get("counts", {})
    rows = sum(counts.values())
    models = len(run["reports"]["evaluation"].get("models", {})) or 2
    trained = {name: report.get("total_steps", 0) * report.get("global_batch", 0)
               for name, report in (("Trainer", run["reports"]["trainer"]),
                                     ("Fp32BaselineTrainer", run["reports"]["baseline"]))}
    processed = {"TFRecordIngest": rows, "StatisticsGen": rows, "ExampleValidator": rows, "ValidationGate": rows,
                 "PrecisionEvaluator": counts.get("eval", 0) * models, "ModelExport": counts.get("eval", 0),
                 **trained}
    return {step: processed[step] / run["steps"][step] for step in processed
            if run["steps"].get(step) and processed[step]}


def series_name(example: str, config: str | None) -> str:
    """The curve a run belongs to on the benchmarks page: the example and the config (a relative path is the
    project's, where the pipeline runs), e.g. "taxi, configs/taxi_fare.yaml"; "taxi, the default config"."""
    if not config:
        return f"{example}, the default config"
    path = os.path.normpath(os.path.join(PROJECT_ROOT, config))
    return f"{example}, {os.path.relpath(path, PROJECT_ROOT) if path.startswith(PROJECT_ROOT + os.sep) else config}"


def run_figures(copies: int, rows: int, run: dict) -> dict:
    """One run's record figures: the whole run's seconds and peak RSS, the Trainer's rate and input wait, each
    step's seconds and examples/s."""
    trainer = run["reports"]["trainer"]
    return {"copies": copies, "rows": rows,
            "runs": [{"whole_run_s": run["wall"], "peak_rss_gb": run["peak_rss_gb"],
                      "trainer_examples_per_s": trainer.get("examples_per_second"),
                      "input_wait_fraction": trainer.get("input_wait_fraction"),
                      "cached_in_memory": trainer.get("cached_in_memory"),
                      "steps_s": run["steps"], "steps_examples_per_s": examples_per_second(run)}]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", default="1,10,100", help="comma-separated K values")
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "accel-scale"),
                        help="data and outputs go here")
    parser.add_argument("--example", choices=("taxi", "penguins"), default="taxi", help="the dataset to copy")
    parser.add_argument("--config", help="YAML config overrides for every run")
    args = parser.parse_args()
    results = {}
    for copies in [int(k) for k in args.copies.split(",")]:
        data_root = os.path.join(args.workdir, f"{args.example}-data-{copies}x")
        started = time.monotonic()
        rows = write_copies(data_root, copies, args.example)
        print(f"{copies}x: {rows:,} rows in {data_root} ({time.monotonic() - started:.0f} s to write)", flush=True)
        output = os.path.join(args.workdir, f"out-{copies}x-{int(time.time())}")
        run = run_pipeline(data_root, output, args.config)
        results[copies] = (rows, run)
        series = series_name(args.example, args.config)
        records.append("scale", f"{series}, {copies}x", {"series": series, **run_figures(copies, rows, run)})
        trainer = run["reports"]["trainer"]
        print(f"  wall {run['wall']:.1f} s, peak RSS {run['peak_rss_gb']:.2f} GB, Trainer "
              f"{trainer.get('examples_per_second', 0):,.0f} ex/s, input wait "
              f"{100 * (trainer.get('input_wait_fraction') or 0):.1f}%, cached in memory "
              f"{trainer.get('cached_in_memory')}", flush=True)
    steps = [step for step in STEPS if any(step in run["steps"] for _, run in results.values())]
    print("\nseconds per step (examples/s)")
    print("| rows | " + " | ".join(steps) + " | whole run | peak RSS |")
    print("|---" * (len(steps) + 3) + "|")
    for copies, (rows, run) in results.items():
        rates = examples_per_second(run)
        cells = [f"{run['steps'][step]:.1f} s ({rates[step]:,.0f}/s)" if step in rates
                 else f"{run['steps'].get(step, 0):.1f} s" for step in steps]
        print(f"| {rows:,} | " + " | ".join(cells) + f" | {run['wall']:.0f} s | {run['peak_rss_gb']:.2f} GB |")


if __name__ == "__main__":
    main()
