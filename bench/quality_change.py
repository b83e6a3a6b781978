"""The schema-driven model's quality before and after a change, per table, from two `--json` documents of
bench/tabular_quality.py (best made with --data-from, so that both code versions score the same eval split):

    python bench/quality_change.py AFTER.json --before BEFORE.json
    python bench/quality_change.py AFTER.json --before-records-until 2026-11-28T17:40

The second form takes each table's before side from the quality records (bench/results/tabular_quality.jsonl):
the newest schema-driven record dated up to that moment (dates compare as ISO 8601 text, so a record dated by
its day alone counts from that day's start).

Prints one Markdown table: per table the metric, each side's mean (min to max) over its runs (one per seed; a
failed run left out), after minus before (for a lower-is-better metric, after over before), the larger of the
two sides' spreads (max minus min) and the verdict: "worse" where the after mean is worse than the before mean
by more than that spread, else "not worse". Then how many tables are worse, and the tables not compared (no
run on one side). Appends one record per compared table to bench/results/quality_change.jsonl
(bench/records.py): each side's values and code version, and the verdict.
"""
from __future__ import annotations

import argparse
import json
import statistics

import records
from tabular_quality import LOWER_IS_BETTER, SCHEMA


def run_values(document: dict) -> dict[str, tuple[str, list[float]]]:
    """Per table: its metric and the values of its schema-driven runs that did not fail."""
    found = {}
    for name, result in document["tables"].items():
        runs = result.get("models", {}).get(SCHEMA, {}).get("runs", [])
        values = [run["value"] for run in runs if not run.get("error") and run.get("value") is not None]
        if values:
            found[name] = (result.get("metric"), values)
    return found


def document_from_records(found: list[dict], until: str) -> dict:
    """Input: quality records and a moment. Output: a document as run_values reads it, each table's runs those
    of its newest schema-driven record dated up to `until`, and its code version that record's commit."""
    newest = {}
    for record in found:
        figures, date = record.get("figures", {}), record.get("date", "")
        if figures.get("model", SCHEMA) != SCHEMA or date > until:
            continue
        if record["measurement"] not in newest or date >= newest[record["measurement"]]["date"]:
            newest[record["measurement"]] = record
    tables = {name: {"metric": record["figures"].get("metric"),
                     "models": {SCHEMA: {"runs": record["figures"].get("runs", [])}}}
              for name, record in newest.items()}
    return {"tables": tables, "code_version": f"records up to {until}"}


def verdict(metric: str, before: list[float], after: list[float]) -> dict:
    """Input: the metric and each side's run values. Output: the means, the change (after minus before; after
    over before for a lower-is-better metric), the larger spread and whether after is worse beyond it."""
    mean_before, mean_after = statistics.mean(before), statistics.mean(after)
    spread = max(max(before) - min(before), max(after) - min(after))
    lower = metric in LOWER_IS_BETTER
    worse_by = (mean_after - mean_before) if lower else (mean_before - mean_after)
    change = mean_after / mean_before if lower and mean_before else mean_after - mean_before
    return {"before": mean_before, "after": mean_after, "change": change, "spread": spread,
            "worse": worse_by > spread, "lower_is_better": lower}


def _cell(values: list[float]) -> str:
    """A side's mean (min to max), n runs."""
    spread = f" ({min(values):.4f} to {max(values):.4f})" if len(values) > 1 else ""
    return f"{statistics.mean(values):.4f}{spread}, {len(values)} run{'s' if len(values) > 1 else ''}"


def compare(before: dict, after: dict) -> tuple[list[str], int, list[str], dict]:
    """Input: the two documents. Output: the Markdown table's lines, how many tables are worse, the tables of
    the after document not compared and each compared table's figures (its record)."""
    lines = ["| table | metric | before | after | change | larger spread | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    before_values, after_values = run_values(before), run_values(after)
    worse, missing, figures = 0, [], {}
    for name in after["tables"]:
        if name not in before_values or name not in after_values or before_values[name][0] != after_values[name][0]:
            missing.append(name)
            continue
        metric = after_values[name][0]
        result = verdict(metric, before_values[name][1], after_values[name][1])
        worse += result["worse"]
        figures[name] = {"metric": metric, "before_runs": before_values[name][1], "after_runs": after_values[name][1],
                         "before_code": before.get("code_version"), "after_code": after.get("code_version"),
                         **result}
        change = f"{result['change']:.3f}x" if result["lower_is_better"] else f"{result['change']:+.4f}"
        lines.append(f"| {name} | {metric} | {_cell(before_values[name][1])} | {_cell(after_values[name][1])} | "
                     f"{change} | {result['spread']:.4f} | {'**worse**' if result['worse'] else 'not worse'} |")
    return lines, worse, missing, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("after", help="bench/tabular_quality.py --json document of the change")
    sides = parser.add_mutually_exclusive_group(required=True)
    sides.add_argument("--before", help="the same of the code before it")
    sides.add_argument("--before-records-until", metavar="DATE", help="the before side from the quality records")
    args = parser.parse_args()
    with open(args.after) as after_file:
        after = json.load(after_file)
    if args.before:
        with open(args.before) as before_file:
            before = json.load(before_file)
    else:
        before = document_from_records(records.read().get("tabular_quality", []), args.before_records_until)
    lines, worse, missing, figures = compare(before, after)
    print("\n".join(lines))
    print(f"\n{len(after['tables']) - len(missing)} tables compared: {worse} worse beyond the larger spread of the "
          "two sides")
    if missing:
        print(f"not compared (no run on one side, or another metric): {', '.join(missing)}")
    for name, table_figures in figures.items():
        records.append("quality_change", name, table_figures)


if __name__ == "__main__":
    main()
