"""The schema-driven model's quality before and after a change, per table, from two `--json` documents of
bench/tabular_quality.py (made with --data-from, so that both code versions read the same prepared records):

    python bench/quality_change.py AFTER.json --before BEFORE.json
    python bench/quality_change.py AFTER.json --before-records-until 2026-11-28T17:40

The second form takes each table's before side from the quality records (bench/tabular_quality.jsonl under
bench/results, or under BENCH_RESULTS_DIR): the newest schema-driven record dated up to that moment, UTC, written
YYYY-MM-DD[THH:MM[:SS]] without a zone (dates compare as text, so a day alone means that day's start).

Prints one Markdown table: per table the metric, each side's mean (min–max) over its runs (one per seed; a
failed run left out), after minus before (for a lower-is-better metric, after over before), the larger of the
two sides' spreads (max minus min) and the verdict: "worse" where the after mean is worse than the before mean
by more than that spread, else "not worse". A side of one run has no spread, so any change counts against it.
Where the two sides' runs were scored on eval splits of different sizes (`eval_examples`: the versions split
records by different rules), the verdict is "other eval split" and the table is not counted: the change then
mixes the split's with the model's. Then the counts, and the tables not compared (no run on one side, or
another metric). Appends one record per compared table to bench/results/quality_change.jsonl
(bench/records.py): each side's runs and code version, and the verdict.
"""
from __future__ import annotations

import argparse
import json

import records
from tabular_quality import LOWER_IS_BETTER, METRIC_LABELS, SCHEMA, _spread, _stats


def run_values(document: dict) -> dict[str, dict]:
    """Per table with a run that did not fail: its metric, those runs ({"seed", "value"}) and the sizes of the
    eval splits they were scored on (empty where the document does not say)."""
    found = {}
    for name, result in document["tables"].items():
        runs = [run for run in result.get("models", {}).get(SCHEMA, {}).get("runs", [])
                if not run.get("error") and run.get("value") is not None]
        if runs:
            found[name] = {"metric": result.get("metric"),
                           "runs": [{"seed": run.get("seed"), "value": run["value"]} for run in runs],
                           "eval_examples": {run["eval_examples"] for run in runs if run.get("eval_examples")}}
    return found


def document_from_records(found: list[dict], until: str) -> dict:
    """Input: quality records and a moment. Output: a document as run_values reads it, each table's runs those
    of its newest schema-driven record dated up to `until`; its code version says so."""
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
    over before for a lower-is-better metric, None when the before mean is 0), the larger spread and whether
    after is worse beyond it."""
    old, new = _stats(before), _stats(after)
    mean_before, mean_after = old["mean"], new["mean"]
    lower = metric in LOWER_IS_BETTER
    if lower:
        change = mean_after / mean_before if mean_before else None
    else:
        change = mean_after - mean_before
    result = {"before": mean_before, "after": mean_after, "change": change, "lower_is_better": lower,
              "spread": max(old["max"] - old["min"], new["max"] - new["min"])}
    return {**result, "worse": worse_by(result) > result["spread"]}


def worse_by(result: dict) -> float:
    """How much worse the after mean is than the before mean, in the metric's direction (negative: better), from
    a verdict's (or its record's) "before", "after" and "lower_is_better"."""
    gap = result["after"] - result["before"]
    return gap if result["lower_is_better"] else -gap


def _cell(values: list[float]) -> str:
    """A side's mean (min–max), n runs."""
    return f"{_spread(_stats(values))}, {len(values)} run{'s' if len(values) > 1 else ''}"


def change_text(result: dict) -> str:
    """A verdict's change as text: "+0.0011" (after minus before), "1.005x" (after over before, lower is better)."""
    if result["change"] is None:
        return "n/a"
    return f"{result['change']:.3f}x" if result["lower_is_better"] else f"{result['change']:+.4f}"


def compare(before: dict, after: dict) -> tuple[list[str], dict, list[str], dict]:
    """Input: the two documents. Output: the Markdown table's lines, the counts ("worse", "other eval split"),
    the tables of the after document not compared and each compared table's figures (its record)."""
    lines = ["| table | metric | before | after | change | larger spread | verdict |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    before_sides, after_sides = run_values(before), run_values(after)
    counts, missing, figures = {"worse": 0, "other eval split": 0}, [], {}
    for name in after["tables"]:
        old, new = before_sides.get(name), after_sides.get(name)
        if old is None or new is None or old["metric"] != new["metric"]:
            missing.append(name)
            continue
        before_values, after_values = [run["value"] for run in old["runs"]], [run["value"] for run in new["runs"]]
        result = verdict(new["metric"], before_values, after_values)
        split_differs = bool(old["eval_examples"] and new["eval_examples"]
                             and old["eval_examples"] != new["eval_examples"])
        said = "other eval split" if split_differs else "worse" if result["worse"] else "not worse"
        counts[said] = counts.get(said, 0) + 1
        figures[name] = {"metric": new["metric"], "before_runs": old["runs"], "after_runs": new["runs"],
                         "before_eval_examples": sorted(old["eval_examples"]),
                         "after_eval_examples": sorted(new["eval_examples"]), "verdict": said,
                         "before_code": before.get("code_version"), "after_code": after.get("code_version"), **result}
        shown = {"worse": "**worse**", "other eval split": (
            f"other eval split ({'/'.join(map(str, sorted(old['eval_examples'])))} and "
            f"{'/'.join(map(str, sorted(new['eval_examples'])))} records)")}.get(said, said)
        lines.append(f"| {name} | {METRIC_LABELS.get(new['metric'], new['metric'])} | "
                     f"{_cell(before_values)} | {_cell(after_values)} | "
                     f"{change_text(result)} | {result['spread']:.4f} | {shown} |")
    return lines, counts, missing, figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("after", help="bench/tabular_quality.py --json document of the code after the change")
    sides = parser.add_mutually_exclusive_group(required=True)
    sides.add_argument("--before", help="bench/tabular_quality.py --json document of the code before the change")
    sides.add_argument("--before-records-until", metavar="DATE",
                       help="the before side from the quality records dated up to DATE (UTC, YYYY-MM-DD[THH:MM])")
    args = parser.parse_args()
    with open(args.after) as after_file:
        after = json.load(after_file)
    if args.before:
        with open(args.before) as before_file:
            before = json.load(before_file)
    else:
        before = document_from_records(records.read().get("tabular_quality", []), args.before_records_until)
    lines, counts, missing, figures = compare(before, after)
    print("\n".join(lines))
    print(f"\n{len(figures)} tables compared: {counts['worse']} worse beyond the larger spread of the two sides, "
          f"{counts['other eval split']} scored on another eval split (not judged)")
    if missing:
        print(f"not compared (no run on one side, or another metric): {', '.join(missing)}")
    for name, table_figures in figures.items():
        records.append("quality_change", name, table_figures)


if __name__ == "__main__":
    main()
