"""The printed run summary, from RunFacts built by hand: a run of many classes lists a few per-class figures,
not one per class; a run whose data held columns the schema does not know, or whose spans had rows left out
when they were prepared, says so (and so does the HTML report)."""
import datetime

from components.core.records import EvaluationReport
from pipeline.commands.cli import _with_data_lines
from pipeline.dag.local_runner import RunSummary, StepTiming
from pipeline.runs.run_facts import PER_CLASS_LISTED, RunFacts, Step, summary_metrics
from pipeline.runs.run_report import render_html

STARTED = datetime.datetime(2026, 11, 20, 9, 30, tzinfo=datetime.timezone.utc)


def _facts(**fields) -> RunFacts:
    return RunFacts(pipeline="t", run_id="r1", data_root="/data", started=STARTED, seconds=10.0,
                    steps=(Step("TFRecordIngest", "ran", 1.0), Step("Trainer", "ran", 5.0)), spans="2",
                    counts={"train": 900, "eval": 300}, blessed=True, pushed_to="/serving/1", **fields)


def test_a_50_class_run_lists_its_lowest_recalls_and_their_median_not_50_recalls():
    recalls = {f"recall/class_{i}": 0.5 + i / 100 for i in range(50)}
    overall = {"sparse_categorical_accuracy": 0.71, "example_count": 3000.0, **recalls}
    evaluation = EvaluationReport.from_json({
        "summary": "candidate blessed", "blessed": True, "chosen_model": "candidate", "task": "multiclass",
        "primary_metric": "sparse_categorical_accuracy", "classes": [f"c{i}" for i in range(50)],
        "metrics": {"overall": {"candidate": overall}}})
    line = next(line for line in RunSummary(_facts(evaluation=evaluation)).render().splitlines()
                if line.startswith("  eval metrics:"))
    assert line.count("recall/class_") == PER_CLASS_LISTED == 5 and "recall/class_0 0.5000" in line
    assert "recall/class_49" not in line and "recall/median of 50 classes 0.7450" in line
    assert "sparse_categorical_accuracy 0.7100" in line and len(line) < 300, line
    few = {f"recall/class_{i}": 0.9 for i in range(3)}
    assert summary_metrics({"auc": 0.9, **few}) == {"auc": 0.9, **few}  # a few classes: every one listed


def test_new_columns_and_rows_left_out_of_the_spans_are_said_in_the_summary_and_the_report():
    facts = _facts(validation={"blocking": False, "splits": {}, "new_columns": ["added", "later"]},
                   span_notes={"span-2": {"rows": 40, "left_out": [{"rows": 10, "why": "no value for the label 'y'"}]}})
    assert facts.data_lines == [
        "  new columns, left out of the model: added, later (not in the schema: run init again, or add them to the "
        "schema, to use them)",
        "  left out of span-2: 10 row(s) with no value for the label 'y'"]
    summary = RunSummary(facts, steps=[StepTiming("TFRecordIngest", "ran", 1.0), StepTiming("Trainer", "ran", 5.0)])
    printed = _with_data_lines(summary.render(), facts.data_lines).splitlines()
    at = printed.index(facts.data_lines[0])
    assert printed[at - 1].lstrip().startswith("Trainer") and printed[at + 2].startswith("  blessed:")
    page = render_html(facts)
    assert "New columns, not in the schema, left out of the model (not blocking): added, later" in page
    assert "<td>span-2</td><td>10</td><td>no value for the label &#x27;y&#x27;</td>" in page
    assert _with_data_lines("a\n  blessed: yes", []) == "a\n  blessed: yes"
