"""Where the quality bench's runs spent their time, before and after a change: per table the three commands,
the whole run, the Trainer, its fitting (and its share of the Trainer) and ModelExport, from the `--json`
documents of bench/tabular_quality.py (the schema-driven model's runs; a table's figures the mean over its runs).

    python bench/time_split.py AFTER.json [--before BEFORE.json]

Prints one Markdown table (before / after in each cell when --before is given), then the totals and the tables
that miss: fitting under 70% of the Trainer's seconds on a table of 5,000 rows or more, under 50% on any
table, and ModelExport over 15 s on a table of up to 100 columns. Appends one record per table to
bench/results/time_split.jsonl (bench/records.py): its rows and columns, the after figures, the before figures
(or null) and the commits the two documents measured.
"""
from __future__ import annotations

import argparse
import json
import statistics

import records

SCHEMA = "schema-driven (init)"
FIT_SHARE_LARGE, FIT_SHARE_ANY, LARGE_ROWS, EXPORT_SECONDS, EXPORT_COLUMNS = 0.70, 0.50, 5_000, 15.0, 100


def table_times(document: dict) -> dict[str, dict]:
    """Per table: rows, columns and the mean seconds of its schema-driven runs (None where a run lacks them)."""
    times = {}
    for name, result in document["tables"].items():
        runs = [run for run in result.get("models", {}).get(SCHEMA, {}).get("runs", []) if not run.get("error")]
        if not runs:
            continue

        def mean(values):
            values = [value for value in values if value is not None]
            return statistics.mean(values) if values else None

        commands = result.get("command_seconds") or {}
        run_seconds = mean(run["wall_seconds"] for run in runs)
        times[name] = {
            "rows": result.get("rows"), "columns": result.get("columns"),
            "run": run_seconds, "trainer": mean(run.get("trainer_seconds") for run in runs),
            "fitting": mean(run.get("fit_seconds") for run in runs),
            "export": mean((run.get("steps") or {}).get("ModelExport") for run in runs),
            "three commands": (run_seconds + sum(commands.values())) if "prepare-data" in commands else None}
    return times


def _cell(after, before=None, digits=".1f") -> str:
    text = "n/a" if after is None else format(after, digits)
    return text if before is None else f"{'n/a' if before is None else format(before, digits)} / {text}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("after")
    parser.add_argument("--before", default="")
    args = parser.parse_args()
    with open(args.after) as handle:
        after_document = json.load(handle)
    after, before, before_document = table_times(after_document), {}, {}
    if args.before:
        with open(args.before) as handle:
            before_document = json.load(handle)
        before = table_times(before_document)
    print("| table | rows | columns | three commands s | whole run s | Trainer s | fitting s (share) | ModelExport s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    misses = []
    for name, figures in after.items():
        old = before.get(name, {})
        share = figures["fitting"] / figures["trainer"] if figures["fitting"] and figures["trainer"] else None
        old_share = old["fitting"] / old["trainer"] if old.get("fitting") and old.get("trainer") else None
        print(f"| {name} | {figures['rows'] or 'n/a':,} | {figures['columns'] or 'n/a'} | "
              + " | ".join(_cell(figures[key], old.get(key) if before else None)
                           for key in ("three commands", "run", "trainer"))
              + f" | {_cell(figures['fitting'], old.get('fitting') if before else None)} "
              f"({_cell(share, old_share if before else None, '.0%')}) | "
              f"{_cell(figures['export'], old.get('export') if before else None)} |")
        large = (figures["rows"] or 0) >= LARGE_ROWS
        if share is not None and share < (FIT_SHARE_LARGE if large else FIT_SHARE_ANY):
            misses.append(f"{name}: fitting {share:.0%} of the Trainer's seconds")
        if figures["export"] and figures["export"] > EXPORT_SECONDS and (figures["columns"] or 0) <= EXPORT_COLUMNS:
            misses.append(f"{name}: ModelExport {figures['export']:.1f} s")
    for key in ("three commands", "run", "trainer", "fitting", "export"):
        total = sum(f[key] for f in after.values() if f[key] is not None)
        old_total = sum(f[key] for f in before.values() if f.get(key) is not None) if before else None
        print(f"total {key}: {_cell(total, old_total)} s")
    print("misses: " + ("; ".join(misses) if misses else "none"))
    for name, figures in after.items():
        parts = ("three commands", "run", "trainer", "fitting", "export")
        records.append("time_split", name, {
            "rows": figures["rows"], "columns": figures["columns"],
            "after": {part: figures[part] for part in parts}, "after_code": after_document.get("code_version"),
            "before": {part: before[name][part] for part in parts} if name in before else None,
            "before_code": before_document.get("code_version")})


if __name__ == "__main__":
    main()
