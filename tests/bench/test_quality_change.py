"""bench/quality_change.py: a change counts as worse only beyond the larger run-to-run spread of the two sides,
in the metric's own direction; failed runs count on neither side; runs scored on eval splits of different sizes
are not judged; the before side can come from the newest records up to a moment."""

import pytest

from tests.bench.scripts import bench_script


@pytest.fixture(scope="module")
def bench():
    with bench_script("quality_change") as module:
        yield module


def _document(bench, tables: dict, eval_examples: int | None = None) -> dict:
    """tables: name -> (metric, values, index of a failed run or None)."""
    def result(metric, values, failed):
        runs = [{"seed": seed, "value": value, "error": "Trainer failed" if seed == failed else None,
                 "eval_examples": eval_examples} for seed, value in enumerate(values)]
        return {"metric": metric, "models": {bench.SCHEMA: {"runs": runs}, "hand-written": {"runs": []}}}
    return {"tables": {name: result(*spec) for name, spec in tables.items()}}


def test_worse_only_beyond_the_larger_spread_of_either_side_in_the_metrics_direction(bench):
    auc = bench.verdict("auc", [0.80, 0.82], [0.775, 0.785])  # 0.03 lower, spreads 0.02 and 0.01
    assert auc["worse"] and auc["change"] == pytest.approx(-0.03)
    assert not bench.verdict("auc", [0.80, 0.82], [0.795, 0.80])["worse"]  # 0.0125 lower: within 0.02
    assert not bench.verdict("auc", [0.80, 0.801], [0.76, 0.82])["worse"]  # 0.0105 lower: within the after's 0.06
    mae = bench.verdict("mean_absolute_error", [10.0, 10.2], [10.6, 10.7])  # 0.55 higher, spreads 0.2, 0.1
    assert mae["worse"] and mae["change"] == pytest.approx(10.65 / 10.1)
    assert not bench.verdict("mean_absolute_error", [10.0, 10.6], [10.5, 10.6])["worse"]  # 0.25 higher, within 0.6
    assert not bench.verdict("mean_absolute_error", [10.0, 10.2], [9.0, 9.5])["worse"]  # lower MAE: better
    assert bench.verdict("mean_absolute_error", [0.0], [0.1])["change"] is None  # no ratio to a zero MAE


def test_failed_runs_are_left_out_and_a_table_without_both_sides_is_named(bench):
    before = _document(bench, {"credit": ("auc", [0.80, 0.81, 0.10], 2),
                               "wage": ("mean_absolute_error", [22.7], None)})
    after = _document(bench, {"credit": ("auc", [0.78, 0.79, 0.79], None),
                              "wage": ("sparse_categorical_accuracy", [0.5], None),
                              "boston": ("mean_absolute_error", [1.9], None)})
    lines, counts, missing, figures = bench.compare(before, after)
    assert counts["worse"] == 1 and missing == ["wage", "boston"]
    assert lines[-1].startswith("| credit | AUC | 0.8050 (0.8000–0.8100), 2 runs |")  # the failed 0.10 left out
    assert "**worse**" in lines[-1] and figures["credit"]["verdict"] == "worse"
    assert [run["value"] for run in figures["credit"]["before_runs"]] == [0.80, 0.81]


def test_runs_scored_on_eval_splits_of_other_sizes_are_not_judged(bench):
    before = _document(bench, {"digits": ("sparse_categorical_accuracy", [0.98, 0.98], None)}, eval_examples=600)
    after = _document(bench, {"digits": ("sparse_categorical_accuracy", [0.97, 0.97], None)}, eval_examples=590)
    lines, counts, _, figures = bench.compare(before, after)
    assert counts == {"worse": 0, "other eval split": 1} and figures["digits"]["worse"]  # worse, were it comparable
    assert "other eval split (600 and 590 records)" in lines[-1]
    same = bench.compare(before, _document(bench, {"digits": ("sparse_categorical_accuracy", [0.97], None)}, 600))
    assert same[1]["worse"] == 1


def test_the_before_side_from_records_is_each_tables_newest_record_up_to_the_moment(bench):
    def record(table, date, values, model=None):
        figures = {"metric": "auc", "runs": [{"seed": seed, "value": value} for seed, value in enumerate(values)]}
        return {"measurement": table, "date": date, "figures": {**figures, **({"model": model} if model else {})}}
    found = [record("credit", "2026-11-27", [0.80]), record("credit", "2026-11-28", [0.82, 0.83]),
             record("credit", "2026-11-28T18:44:20Z", [0.70]),  # after the moment
             record("credit", "2026-11-28T09:00:00Z", [0.60], model="hand-written")]  # another model
    sides = bench.run_values(bench.document_from_records(found, "2026-11-28T17:40"))
    assert [run["value"] for run in sides["credit"]["runs"]] == [0.82, 0.83]
