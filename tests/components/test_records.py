"""The typed records steps hand each other: each JSON round trip keeps every field, a report written before a
field existed reads with the legacy default, and what a record says of itself (the input line, the
mismatch of two targets) follows its fields."""
import dataclasses

from components.core import contract
from components.core.records import EvaluationReport, ExportReport, GateCheck, ModelFacts, TrainingReport
from components.core.tasks import LEGACY_TASK, LabelSummary, PredictionTarget


def _training(**changes) -> TrainingReport:
    report = TrainingReport(model="models.tabular", task_name="multiclass", label="species", classes=["a", "b", "c"],
                            labels={"train": LabelSummary(10, 1.0, (3, 4, 3))}, precision="mixed_bfloat16",
                            xla=True, plan={"global_batch": 32, "total_steps": 40}, examples_per_second=1000.0,
                            in_memory_examples_per_second=1200.0, input_wait_fraction=0.02,
                            final_metrics={"val_accuracy": 0.9}, history={"loss": [0.5, 0.4]})
    return dataclasses.replace(report, **changes)


def test_a_training_report_round_trips_through_its_json_with_the_plan_flattened_as_written():
    report = _training()
    value = report.to_json()
    assert value["task"] == "multiclass" and value["global_batch"] == 32 and "plan" not in value
    assert TrainingReport.from_json(value) == report
    assert report.facts() == ModelFacts("models.tabular", "multiclass", "species", ("a", "b", "c"),
                                        "mixed_bfloat16", True, {"train": LabelSummary(10, 1.0, (3, 4, 3))})
    skipped = TrainingReport(skipped=True, skip_reason="candidate trained in float32", candidate_run="/x")
    assert skipped.to_json() == {"skipped": True, "reason": "candidate trained in float32", "candidate_run": "/x"}
    assert TrainingReport.from_json(skipped.to_json()) == skipped
    assert TrainingReport.from_json({}) is None


def test_reports_and_facts_from_before_they_named_their_task_read_as_the_legacy_binary_ones():
    assert TrainingReport.from_json({"precision": "float32", "xla": False}).task_name == LEGACY_TASK
    assert EvaluationReport.from_json({"blessed": True, "chosen_model": "candidate", "summary": "ok"}).task.name == LEGACY_TASK
    assert ExportReport.from_json({"exported": True, "savedmodel": {"auc": 0.9}}).task.primary.name == "auc"
    legacy = ModelFacts.from_json({})
    assert legacy.legacy and legacy.task_name == LEGACY_TASK
    assert PredictionTarget("fare", "regression").mismatch(legacy).startswith("it predates model facts")
    assert PredictionTarget("tip", LEGACY_TASK, ("no", "yes")).mismatch(legacy) == ""


def test_an_evaluation_report_keeps_its_checks_typed_and_reads_metrics_by_role():
    check = GateCheck("vs_production", contract.CANDIDATE, "auc", 0.95, 0.94, contract.PRODUCTION, 0.01,
                      [-0.002, 0.022], 0.01, 500, True)
    report = EvaluationReport(True, contract.CANDIDATE, "candidate blessed", [check], "binary", "auc",
                              metrics={contract.OVERALL: {contract.CANDIDATE: {"auc": 0.95}}})
    again = EvaluationReport.from_json(report.to_json())
    assert again == report and isinstance(again.checks[0], GateCheck)
    assert again.overall(contract.CANDIDATE) == {"auc": 0.95} and again.primary.label == "AUC"
    assert "confusion_matrix" not in report.to_json()
    assert check.describe().startswith("vs_production: candidate auc 0.9500 vs production 0.9400: better by 0.0100")


def test_the_input_line_says_input_bound_with_the_hosts_headroom_when_the_device_waits():
    fed = _training(input_wait_fraction=0.01, host_examples_per_second=24000.0)
    assert not fed.input_bound
    assert fed.input_line() == "input wait 1.0%, host feeds 20.0x the model's rate"
    starved = _training(input_wait_fraction=0.26, host_examples_per_second=1500.0)
    assert starved.input_bound
    assert starved.input_line() == "input-bound: input wait 26.0%, host feeds 1.2x the model's rate"
    assert _training(input_wait_fraction=None).input_line() == "input wait n/a"
    slow_elsewhere = _training(input_wait_fraction=0.348, host_examples_per_second=67680.0)  # 56.4x the model
    assert not slow_elsewhere.input_bound and "input-bound" not in slow_elsewhere.input_line()
    assert slow_elsewhere.input_line() == (
        "34.8% slower than on in-memory batches (not input, the host feeds 56.4x the model's rate): the time went "
        "to validation passes, callbacks, checkpoints or other load on the machine")
    unmeasured = _training(input_wait_fraction=0.2, host_examples_per_second=0.0)
    assert not unmeasured.input_bound and "the host's ceiling was not measured" in unmeasured.input_line()
