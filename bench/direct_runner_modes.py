"""Beam DirectRunner modes on this machine: time and record counts of the pipeline's statistics step.

    .venv/bin/python bench/direct_runner_modes.py [--copies 10] [--repeats 2]

Writes the bundled taxi data `--copies` times over as gzip TFRecord shards (15,002 rows per copy), then
computes TFDV statistics over them with Beam's DirectRunner (what StatisticsGen does) in `in_memory` mode
and in `multi_processing` mode with one worker per core. Prints the wall time of each run and the number
of examples the statistics counted, which must equal the number of records written in every mode (TFDV
users have reported multi-processing mode dropping records). Each mode's runs are appended as a record to
bench/results/direct_runner_modes.jsonl (bench/records.py).
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import records  # noqa: E402 - bench/records.py, beside this script

import tensorflow_data_validation as tfdv  # noqa: E402
from apache_beam.options.pipeline_options import PipelineOptions  # noqa: E402

from pipeline.onboarding.example_data import write_taxi_span  # noqa: E402

MODES = {
    "in_memory": ["--direct_running_mode=in_memory"],
    "multi_processing": ["--direct_running_mode=multi_processing", f"--direct_num_workers={os.cpu_count()}"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--copies", type=int, default=10, help="times the 15,002-row taxi sample is written")
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)  # Beam and TFDV warn per worker; the table is the output
    with tempfile.TemporaryDirectory() as root:
        written = 0
        for copy in range(args.copies):
            _, rows = write_taxi_span(root, span=copy + 1, num_shards=4)
            written += rows
        pattern = os.path.join(root, "span-*", "*.gz")
        print(f"{written:,} records in {4 * args.copies} gzip shards; {os.cpu_count()} cores")
        print(f"{'mode':<18} {'run':>3} {'seconds':>8} {'examples counted':>17} {'match':>6}")
        runs = {mode: [] for mode in MODES}
        for repeat in range(args.repeats):
            for mode, beam_args in MODES.items():
                started = time.monotonic()
                stats = tfdv.generate_statistics_from_tfrecord(
                    pattern, stats_options=tfdv.StatsOptions(), pipeline_options=PipelineOptions(beam_args))
                seconds = time.monotonic() - started
                counted = stats.datasets[0].num_examples
                print(f"{mode:<18} {repeat + 1:>3} {seconds:>8.1f} {counted:>17,} {str(counted == written):>6}",
                      flush=True)
                runs[mode].append({"seconds": seconds, "examples_counted": counted, "all_counted": counted == written})
        for mode, beam_args in MODES.items():
            records.append("direct_runner_modes", f"{mode}, {written:,} records", {
                "mode": mode, "beam_args": beam_args, "records": written, "cores": os.cpu_count(), "runs": runs[mode]})


if __name__ == "__main__":
    main()
