"""A wide numeric table through the three commands: wall seconds and peak resident memory of `prepare-data`,
`init` and `run`, and the Trainer's seconds, how many of them were epochs.

Writes a CSV of --rows rows and --columns numeric columns (a binary label that depends on a few of them),
runs `python -m pipeline prepare-data`, `init` and `run` on it, each as a process of its own, and prints
one line per command. Memory is sampled every half second over the command's process tree; a command whose
tree passes --memory-limit-gb is stopped and reported as such. The run's figures are appended as a record to
bench/results/wide_table.jsonl (bench/records.py). A benchmark, not a test:

    TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python bench/wide_table.py --columns 300 --rows 2000
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import psutil

import records

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_csv(path: str, columns: int, rows: int, seed: int = 0) -> None:
    """Numeric columns x0.. and a binary label from the first five (and noise)."""
    rng = np.random.default_rng(seed)
    values = rng.normal(size=(rows, columns)).astype(np.float32)
    score = values[:, :5].sum(axis=1) + rng.normal(scale=1.0, size=rows)
    label = (score > 0).astype(int)
    with open(path, "w") as handle:
        handle.write(",".join([f"x{i}" for i in range(columns)] + ["label"]) + "\n")
        for row, y in zip(values, label):
            handle.write(",".join(f"{v:.4f}" for v in row) + f",{y}\n")


def tree_rss(process: psutil.Process) -> int:
    """Resident bytes of a process and its descendants (0 for those that ended meanwhile)."""
    total = 0
    for member in [process] + process.children(recursive=True):
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


def timed(command: list[str], cwd: str, limit_bytes: int) -> dict:
    """Runs `command`. Output: wall seconds, peak tree RSS in MB, exit code, whether the limit stopped it, and
    the output's last lines."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=PROJECT)
    started = time.perf_counter()
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(command, cwd=cwd, env=environment, stdout=log, stderr=subprocess.STDOUT)
    watched, peak, stopped = psutil.Process(process.pid), 0, False
    while process.poll() is None:
        try:
            peak = max(peak, tree_rss(watched))
        except psutil.Error:
            pass
        if peak > limit_bytes:
            for member in watched.children(recursive=True) + [watched]:
                member.kill()
            stopped = True
            process.wait()
            break
        time.sleep(0.5)
    log.seek(0)
    lines = log.read().decode(errors="replace").splitlines()
    return {"seconds": time.perf_counter() - started, "peak_mb": peak / 2**20, "code": process.returncode,
            "stopped": stopped, "tail": lines[-15:]}


def trainer_seconds(output: str) -> tuple[float | None, float | None]:
    """The candidate Trainer's training_report.json: (seconds in the Trainer, seconds in epochs)."""
    reports = sorted(glob.glob(os.path.join(output, "pipeline", "**", "Trainer", "model_run", "*",
                                            "training_report.json"), recursive=True))
    if not reports:
        return None, None
    report = json.load(open(reports[-1]))
    return report.get("total_seconds"), report.get("fit_seconds")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, default=300)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--memory-limit-gb", type=float, default=12.0)
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="wide-")
    write_csv(os.path.join(work, "wide.csv"), args.columns, args.rows)
    python = [sys.executable, "-m", "pipeline"]
    steps = [("prepare-data", python + ["prepare-data", "--csv", os.path.join(work, "wide.csv"),
                                        "--data", os.path.join(work, "data")]),
             ("init", python + ["init", "--data", os.path.join(work, "data"), "--label", "label",
                                "--name", "wide"]),
             ("run", python + ["run", "--config", os.path.join(work, "wide.yaml"),
                               "--output", os.path.join(work, "out")])]
    print(f"{args.columns} numeric columns x {args.rows:,} rows ({work})")
    figures = {}
    for name, command in steps:
        result = timed(command, work, int(args.memory_limit_gb * 2**30))
        key = name.replace("-", "_")
        figures.update({f"{key}_s": result["seconds"], f"{key}_peak_mb": result["peak_mb"],
                        f"{key}_exit": result["code"], f"{key}_stopped": result["stopped"]})
        extra = ""
        if name == "run":
            total, fit = trainer_seconds(os.path.join(work, "out"))
            figures.update({"trainer_s": total, "fit_s": fit})
            extra = f"  Trainer {total}s, of which epochs {fit}s" if total else ""
        status = "stopped at the memory limit" if result["stopped"] else f"exit {result['code']}"
        print(f"  {name:<13} {result['seconds']:7.1f} s  peak {result['peak_mb']:8.0f} MB  {status}{extra}")
        if result["code"] != 0 or result["stopped"]:
            print("    " + "\n    ".join(result["tail"]))
            break
    figures["total_s"] = sum(figures[f"{name}_s"] for name in ("prepare_data", "init", "run") if f"{name}_s" in figures)
    figures["peak_gb"] = max(figures[f"{name}_peak_mb"] for name in ("prepare_data", "init", "run")
                             if f"{name}_peak_mb" in figures) / 1024
    records.append("wide_table", f"{args.columns:,} columns x {args.rows:,} rows",
                   {"columns": args.columns, "rows": args.rows, "runs": [figures]})


if __name__ == "__main__":
    main()
