"""`make demo` beside TFX's own taxi example, measured one after the other on this machine, in pairs.

Usage:  .venv/bin/python bench/demo_vs_tfx.py [--pairs 2]
Each pair runs bench/tfx_taxi_example.py, then `python -m pipeline demo` (what `make demo` runs) on fresh
directories, each as its own process timed from start to exit (imports and data writing included).
Prints each run's wall time and eval metrics, then each pair's ratio and the range over the pairs, and appends
the pairs as a record to bench/results/demo_vs_tfx.jsonl (bench/records.py).
"""
from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import sys
import tempfile
import time

import records

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(command: list[str]) -> tuple[float, str]:
    """Input: a command. Output: (wall seconds from start to exit, its stdout + stderr); exits on failure."""
    start = time.monotonic()
    done = subprocess.run(command, cwd=PROJECT_ROOT, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if done.returncode:
        sys.exit(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return seconds, done.stdout + done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=2)
    args = parser.parse_args()
    ratios, pairs = [], []
    for pair in range(1, args.pairs + 1):
        with tempfile.TemporaryDirectory(prefix="demo-vs-tfx-") as workdir:
            tfx_seconds, tfx_log = timed([sys.executable, "bench/tfx_taxi_example.py", os.path.join(workdir, "tfx")])
            demo_seconds, demo_log = timed([sys.executable, "-m", "pipeline", "demo", "--data",
                                            os.path.join(workdir, "data"), "--output", os.path.join(workdir, "out")])
        tfx_metrics = re.search(r"eval metrics: (.*)", tfx_log)
        demo_metrics = re.search(r"eval metrics: auc ([\d.]+), binary_accuracy ([\d.]+)", demo_log)
        ratios.append(demo_seconds / tfx_seconds)
        pairs.append({"tfx_s": tfx_seconds, "demo_s": demo_seconds, "ratio": ratios[-1],
                      "tfx_eval_metrics": ast.literal_eval(tfx_metrics.group(1)) if tfx_metrics else None,
                      "demo_auc": float(demo_metrics.group(1)), "demo_binary_accuracy": float(demo_metrics.group(2))})
        print(f"pair {pair}: TFX example {tfx_seconds:.1f} s ({tfx_metrics.group(1) if tfx_metrics else '?'}); "
              f"make demo {demo_seconds:.1f} s (auc {demo_metrics.group(1)}, binary_accuracy "
              f"{demo_metrics.group(2)}); ratio {ratios[-1]:.2f}", flush=True)
    print(f"make demo / TFX example: {min(ratios):.2f}x to {max(ratios):.2f}x over {len(ratios)} pair(s), "
          f"mean {sum(ratios) / len(ratios):.2f}x")
    records.append("demo_vs_tfx", "make demo beside TFX's taxi example", {"runs": pairs})


if __name__ == "__main__":
    main()
