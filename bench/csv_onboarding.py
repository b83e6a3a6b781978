"""`prepare-data --csv` and `init` on a large CSV: wall seconds and peak RSS of each command.

Writes a CSV of --rows rows made from the bundled taxi sample (the sample repeated, each copy's rows shifted
by one second, with the trip's start as an ISO date-time column `trip_start` and the integer timestamp
left out), then runs `python -m pipeline prepare-data --csv` and `python -m pipeline init` on it, each as a
process of its own, and prints their wall time and peak resident memory (the process and what it waited
for). `--code DIR` runs another checkout's code (PYTHONPATH=DIR), to measure before and after a change on
the same file. Both commands' figures are appended as a record to bench/results/csv_onboarding.jsonl
(bench/records.py). A benchmark, not a test:

    TF_CPP_MIN_LOG_LEVEL=3 .venv/bin/python bench/csv_onboarding.py --rows 1000000
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

PROJECT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT)

import records  # noqa: E402 - bench/records.py, beside this script


def write_csv(path: str, rows: int) -> None:
    """The taxi sample repeated until `rows` rows, `trip_start_timestamp` as an ISO date-time `trip_start`."""
    from pipeline.onboarding.example_data import bundled_taxi_csv

    with open(bundled_taxi_csv(), newline="") as handle:
        sample = list(csv.DictReader(handle))
    columns = ["trip_start" if c == "trip_start_timestamp" else c for c in sample[0]]
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(columns)
        written, copy = 0, 0
        while written < rows:
            for row in sample:
                if written == rows:
                    break
                start = datetime.datetime.fromtimestamp(int(row["trip_start_timestamp"]) + copy, datetime.timezone.utc)
                writer.writerow([start.strftime("%Y-%m-%d %H:%M:%S") if c == "trip_start_timestamp" else row[c]
                                 for c in row])
                written += 1
            copy += 1


def timed(command: list[str], cwd: str, code: str | None) -> tuple[float, float, str]:
    """Runs `command` in `cwd`. Output: (wall seconds, peak RSS in MB of it and its children, its output)."""
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if code:
        environment["PYTHONPATH"] = code
    start = time.perf_counter()
    process = subprocess.Popen(command, cwd=cwd, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    output = process.stdout.read().decode()
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{output}")
    return wall, usage.ru_maxrss / 1024, output


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--code", help="a checkout whose code to run (default: this one)")
    parser.add_argument("--csv", help="reuse this CSV instead of writing one")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="csv-bench-") as folder:
        path = args.csv or os.path.join(folder, "trips.csv")
        if not args.csv:
            write_csv(path, args.rows)
        size = os.path.getsize(path) / 2**20
        with open(path, "rb") as handle:
            rows = sum(1 for _ in handle) - 1  # the header aside
        print(f"CSV: {path}, {size:.0f} MB")
        figures = {}
        python = sys.executable
        data = os.path.join(folder, "data", "trips")
        for name, command in (
                ("prepare-data", [python, "-m", "pipeline", "prepare-data", "--csv", path, "--data", data]),
                ("init", [python, "-m", "pipeline", "init", "--data", data, "--label", "fare", "--name", "trips",
                          "--exclude", "tips"])):
            wall, peak_mb, output = timed(command, folder, args.code)
            print(output.strip())
            print(f"{name}: {wall:.1f} s, peak RSS {peak_mb:,.0f} MB")
            key = name.replace("-", "_")
            figures.update({f"{key}_s": wall, f"{key}_peak_mb": peak_mb})
        records.append("csv_onboarding", f"{rows:,} rows", {"rows": rows, "csv_mb": size, "runs": [figures]},
                       code=args.code or records.PROJECT_ROOT)


if __name__ == "__main__":
    main()
