"""What one pipeline run did, read once from MLMD: `RunFacts`.

The printed run summary (local_runner.RunSummary), the HTML run report (run_report.render_html) and the
`status` table (one line per run) all render from RunFacts and read nothing themselves. A run that failed
before MLMD recorded it gets RunFacts too (`not_started_facts`). Tests build RunFacts directly.

The steps' reports are read into their typed records (components/core/records.py: TrainingReport,
EvaluationReport, ExportReport); an absent report is None. validation_report.json stays a dict ({} when
absent).
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field

from tfx.dsl.io import fileio

from components.core import contract, tasks
from components.core.artifact_files import read_bytes
from components.core.contract import CANDIDATE, FP32_BASELINE, PRODUCTION
from components.core.records import EvaluationReport, ExportReport, TrainingReport
from pipeline.config import PipelineConfig
from pipeline.runs.mlmd import (artifact_json, input_dirs, is_blessed, open_store, output_artifact,
                                pushed_destination, runs_by_node, spans_of, split_counts)

TRAINERS = (contract.TRAINER_NODE, contract.FP32_BASELINE_NODE)  # the pipeline's two Trainer nodes
EVALUATOR_NODE, EXPORT_NODE = "PrecisionEvaluator", "ModelExport"
DATA_NODES = ("TFRecordIngest", "StatisticsGen", "ImportSchemaGen", "ExampleValidator", "ValidationGate")
PER_CLASS_LISTED = 5  # beyond this many classes, the summary lists a per-class metric's lowest and its median
MODEL_ROLES = (CANDIDATE, FP32_BASELINE, PRODUCTION)  # the models the PrecisionEvaluator compares
STEP_OUTCOMES = {"NEW": "new", "RUNNING": "running", "COMPLETE": "ran", "FAILED": "failed", "CACHED": "cached",
                 "CANCELED": "killed"}  # MLMD execution state -> what the summary, report and status say
NOT_STARTED_PREFIX = "not-started-"


@dataclass(frozen=True)
class Step:
    """One pipeline node's execution in a run (resolvers left out)."""
    name: str  # the node id, e.g. "Trainer"
    outcome: str  # a STEP_OUTCOMES value ("ran", "cached", "failed", "killed", "new", "running") or "?"
    seconds: float


@dataclass(frozen=True)
class RunFacts:
    """Input to every view of a run. Empty reports are {}; None is "not read" or "no such output"."""
    pipeline: str
    run_id: str
    data_root: str
    started: datetime.datetime  # UTC: the run's first execution, or when a run that never started was tried
    seconds: float = 0.0  # first execution created -> last execution updated
    steps: tuple[Step, ...] = ()  # in execution order
    not_started: bool = False  # the run failed before MLMD recorded it: no steps, no outputs
    error: str | None = None  # how the run failed, as the command line said it (None: it did not fail)
    spans: str = ""  # the spans TFRecordIngest read, as "2,3" ("" when it did not run)
    counts: dict[str, int] = field(default_factory=dict)  # split -> examples ingested
    # The data details (None: no StatisticsGen / ExampleValidator output, or not read: see list_runs).
    statistics: dict | None = None  # split -> TFDV DatasetFeatureStatistics
    anomalies: dict | None = None  # split -> [(feature, severity, short description, description)]
    validation: dict = field(default_factory=dict)  # the ValidationGate's validation_report.json
    training: dict[str, TrainingReport | None] = field(default_factory=dict)  # trainer node -> its report
    evaluation: EvaluationReport | None = None  # the PrecisionEvaluator's report
    export: ExportReport | None = None  # ModelExport's report
    blessed: bool | None = None  # what the ModelBlessing says (None: not evaluated)
    pushed_to: str | None = None  # the pushed version's folder (None: nothing pushed)
    # span folder name -> how prepare-data (and init) prepared it: {"left_out": [{"rows", "why"}], ...}; {} for
    # spans of one's own TFRecords, or not read (see list_runs)
    span_notes: dict[str, dict] = field(default_factory=dict)

    @property
    def candidate_metrics(self) -> dict[str, float]:
        """The candidate's overall eval metrics as the run summary lists them ({} when not evaluated): a
        per-class metric (`recall/class_7`) of more than PER_CLASS_LISTED classes is given by its
        PER_CLASS_LISTED lowest classes and its median over all of them (`recall/median of 50 classes`); every
        class's figure is in precision_report.json."""
        return summary_metrics(self.evaluation.overall(CANDIDATE)) if self.evaluation else {}

    @property
    def new_columns(self) -> list[str]:
        """Columns of the data that the schema does not know, which the model left out (the ValidationGate's
        report)."""
        return list(self.validation.get("new_columns", []))

    @property
    def data_lines(self) -> list[str]:
        """What the run summary says of the data beyond its counts: columns the model left out for the schema
        not knowing them, and rows left out of the spans read when they were prepared (and why)."""
        lines = []
        if self.new_columns:
            lines.append(f"  new columns, left out of the model: {', '.join(self.new_columns)} (not in the schema: "
                         "run init again, or add them to the schema, to use them)")
        for span, note in self.span_notes.items():
            for left in note.get("left_out", []):
                lines.append(f"  left out of {span}: {left['rows']:,} row(s) with {left['why']}")
        return lines

    @property
    def primary_metric(self) -> tasks.Metric | None:
        """The metric the run's gates decided on (its task's primary metric); None when not evaluated."""
        return self.evaluation.primary if self.evaluation else None

    @property
    def primary(self) -> dict[str, float | None]:
        """Model role (candidate, fp32_baseline, production) -> its overall primary metric, for the models
        evaluated."""
        if not self.evaluation:
            return {}
        roles = self.evaluation.metrics.get(contract.OVERALL, {})
        return {role: self.evaluation.overall(role).get(self.evaluation.primary.name) for role in roles}

    @property
    def blessed_model(self) -> str:
        """Which model the run blessed: candidate or fp32_baseline; "not blessed"; "" when not evaluated."""
        return (self.evaluation.chosen_model or "not blessed") if self.evaluation else ""

    @property
    def pushed_version(self) -> str:
        """The pushed version's folder name (the AtomicPusher's pushed_version), or ""."""
        return os.path.basename(self.pushed_to) if self.pushed_to else ""

    @property
    def time_split(self) -> list[tuple[str, float]]:
        """Where the run's seconds went, as (part, seconds) in TIME_PARTS' order, the parts adding up to the
        run's seconds: fitting (the Trainers' model.fit), building and compiling (their model built, compiled
        and probed for the device), evaluation (the PrecisionEvaluator), export (ModelExport and the Trainers'
        SavedModels), data (ingestion, statistics, schema and validation) and the rest (the Trainers' sample,
        preprocessing and labels, choosing the averaged intervals, the push, orchestration). [] for a run
        without steps."""
        if not self.steps:
            return []
        trainings = [report for report in self.training.values() if report and not report.skipped]
        seconds = {step.name: step.seconds for step in self.steps}
        phase = lambda name: sum(report.phase_seconds.get(name, 0.0) for report in trainings)  # noqa: E731
        parts = {"fitting": sum(report.fit_seconds for report in trainings), "building and compiling": phase("building"),
                 "evaluation": seconds.get(EVALUATOR_NODE, 0.0),
                 "export": seconds.get(EXPORT_NODE, 0.0) + phase("exporting"),
                 "data": sum(seconds.get(node, 0.0) for node in DATA_NODES)}
        total = max(self.seconds, sum(step.seconds for step in self.steps), sum(parts.values()))
        return [*parts.items(), ("the rest", max(0.0, total - sum(parts.values())))]

    def time_line(self) -> str:
        """The time split in one line with each part's share, and the share of the run an accelerator could
        have been busy (the fitting): "" for a run without steps."""
        split = self.time_split
        total = sum(seconds for _, seconds in split)
        if not total:
            return ""
        parts = ", ".join(f"{part} {seconds:.1f} s ({seconds / total:.0%})" for part, seconds in split)
        return f"{parts}; an accelerator could have been busy {split[0][1] / total:.0%} of the run (the fitting)"

    def steps_with(self, outcome: str) -> list[str]:
        """The names of the steps that ended with `outcome`."""
        return [step.name for step in self.steps if step.outcome == outcome]

    @property
    def outcome(self) -> str:
        """How the run ended, from its steps: complete; cached (every step reused); failed at <node>; killed
        at <node> (a later run found it dead and cleaned it up); running or killed at <node>."""
        for outcome, words in (("failed", "failed at "), ("killed", "killed at ")):
            if names := self.steps_with(outcome):
                return words + ", ".join(names)
        if unfinished := [step.name for step in self.steps if step.outcome in ("new", "running")]:
            return "running or killed at " + ", ".join(unfinished)
        return "cached" if self.steps_with("cached") and not self.steps_with("ran") else "complete"


def summary_metrics(metrics: dict[str, float | None], listed: int = PER_CLASS_LISTED) -> dict[str, float | None]:
    """Input: metric name -> value, per-class ones named `<metric>/class_<id>`. Output: the same, but a
    per-class metric of more than `listed` classes is reduced to its `listed` lowest classes and
    `<metric>/median of <N> classes`."""
    import re
    import statistics

    per_class: dict[str, dict[str, float | None]] = {}
    result = {}
    for name, value in metrics.items():
        match = re.fullmatch(r"(.+)/class_[0-9]+", name)
        if match:
            per_class.setdefault(match.group(1), {})[name] = value
        else:
            result[name] = value
    for metric, values in per_class.items():
        if len(values) <= listed:
            result.update(values)
            continue
        known = {name: value for name, value in values.items() if value is not None}
        result.update(dict(sorted(known.items(), key=lambda item: item[1])[:listed]))
        if known:
            result[f"{metric}/median of {len(values)} classes"] = statistics.median(known.values())
    return result


def read_run_facts(config: PipelineConfig, known_runs: frozenset[str] | None = None) -> RunFacts | None:
    """Input: the config and the run ids to leave out (None: none). Output: the newest other run's facts
    (None: MLMD records no such run)."""
    store = open_store(config)
    runs = runs_by_node(store, config.pipeline_name) if store is not None else []
    runs = [(run, nodes) for run, nodes in runs if run.name not in (known_runs or ())]
    if not runs:
        return None
    run, nodes = max(runs, key=lambda item: min(e.create_time_since_epoch for e in item[1].values()))
    return _facts(store, config, run, nodes, data_details=True)


def list_runs(config: PipelineConfig) -> list[RunFacts]:
    """Input: the config. Output: every run's facts, oldest first, without the data statistics and
    anomalies (statistics and anomalies None: the status table needs neither, and reading them imports TFDV)."""
    store = open_store(config)
    if store is None:
        return []
    runs = [_facts(store, config, run, nodes, data_details=False)
            for run, nodes in runs_by_node(store, config.pipeline_name)]
    return sorted(runs, key=lambda facts: facts.started)


def not_started_facts(config: PipelineConfig, error: str | None) -> RunFacts:
    """The facts of a run that failed with `error` before MLMD recorded it: an id of its own, no steps, no
    outputs."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return RunFacts(pipeline=config.pipeline_name, run_id=NOT_STARTED_PREFIX + now.strftime("%Y-%m-%dT%H-%M-%S.%fZ"),
                    data_root=config.data_root, started=now, not_started=True, error=error)


def _facts(store, config: PipelineConfig, run, nodes: dict, data_details: bool) -> RunFacts:
    """RunFacts of one run: `nodes` maps node id -> its execution in the run. `data_details`: also read
    the statistics and anomalies protos."""
    from ml_metadata.proto import metadata_store_pb2

    def output(node: str, key: str):
        return output_artifact(store, nodes.get(node), key)

    executions = list(nodes.values())
    started = min(e.create_time_since_epoch for e in executions) / 1000
    examples = output("TFRecordIngest", contract.EXAMPLES)
    statistics = output("StatisticsGen", contract.STATISTICS) if data_details else None
    anomalies = output("ExampleValidator", contract.ANOMALIES) if data_details else None
    return RunFacts(
        pipeline=config.pipeline_name, run_id=run.name, data_root=config.data_root,
        started=datetime.datetime.fromtimestamp(started, datetime.timezone.utc),
        seconds=max(e.last_update_time_since_epoch for e in executions) / 1000 - started,
        steps=tuple(Step(name, STEP_OUTCOMES.get(metadata_store_pb2.Execution.State.Name(e.last_known_state), "?"),
                         (e.last_update_time_since_epoch - e.create_time_since_epoch) / 1000)
                    for name, e in nodes.items() if not name.endswith("_resolver")),
        spans=spans_of(examples) if examples is not None else "",
        counts=split_counts(examples) if examples is not None else {},
        statistics=_read_statistics(statistics) if statistics is not None else None,
        anomalies=_read_anomalies(anomalies) if anomalies is not None else None,
        validation=artifact_json(output("ValidationGate", contract.VALIDATION_REPORT), contract.VALIDATION_REPORT_FILE),
        training={node: TrainingReport.from_json(artifact_json(output(node, contract.MODEL_RUN),
                                                               contract.TRAINING_REPORT_FILE)) for node in TRAINERS},
        evaluation=EvaluationReport.from_json(artifact_json(output(EVALUATOR_NODE, contract.EVALUATION),
                                                            contract.PRECISION_REPORT_FILE)),
        export=ExportReport.from_json(artifact_json(output(EXPORT_NODE, contract.EXPORTED_MODEL),
                                                    contract.EXPORT_REPORT_FILE)),
        blessed=is_blessed(output(EVALUATOR_NODE, contract.BLESSING)),
        pushed_to=pushed_destination(output("AtomicPusher", contract.PUSHED_MODEL)),
        span_notes=_span_notes(input_dirs(examples)) if examples is not None and data_details else {},
    )


def _span_notes(span_dirs: list[str]) -> dict[str, dict]:
    """Span folder name -> its note as prepare-data wrote it (spans without one left out); a note that cannot be
    read is left out too (the data may have moved since the run)."""
    from pipeline.onboarding.span_folders import read_span_note

    notes = {}
    for span_dir in span_dirs:
        try:
            note = read_span_note(span_dir)
        except Exception:  # noqa: BLE001 - a report of the run, not a check of the data
            continue
        if note:
            notes[os.path.basename(span_dir.rstrip("/"))] = note
    return notes


def _split_files(artifact, file_name: str) -> dict[str, str]:
    """Split -> the path of `file_name` in that split's folder of an MLMD artifact, for the files that exist."""
    from tfx.types import artifact_utils

    splits = artifact_utils.decode_split_names(artifact.properties["split_names"].string_value)
    paths = {split: os.path.join(artifact.uri, f"Split-{split}", file_name) for split in splits}
    return {split: path for split, path in paths.items() if fileio.exists(path)}


def _read_statistics(artifact) -> dict:
    """split -> the DatasetFeatureStatistics proto of that split."""
    import tensorflow_data_validation as tfdv

    result = {}
    for split, path in _split_files(artifact, contract.STATISTICS_FILE).items():
        datasets = tfdv.load_stats_binary(path).datasets
        if datasets:
            result[split] = datasets[0]
    return result


def _read_anomalies(artifact) -> dict:
    """split -> [(feature, severity, short description, description)]."""
    from tensorflow_metadata.proto.v0 import anomalies_pb2

    result = {}
    for split, path in _split_files(artifact, contract.ANOMALIES_FILE).items():
        anomalies = anomalies_pb2.Anomalies.FromString(read_bytes(path))
        rows = [(name, anomalies_pb2.AnomalyInfo.Severity.Name(info.severity), info.short_description,
                 info.description) for name, info in sorted(anomalies.anomaly_info.items())]
        rows += [("<dataset>", "ERROR", reason.short_description, reason.description)
                 for reason in anomalies.dataset_anomaly_info.reason]
        result[split] = rows
    return result


# ------------------------------------------------------------------------------ `python -m pipeline status`

def render_runs(runs: list[RunFacts]) -> str:
    """The runs as a fixed-width table, one line per run: when, which spans, how each step ended, the metric
    the gates decided on and its value for the candidate, FP32 baseline and production model, the blessing,
    the pushed version and the duration."""
    if not runs:
        return "no runs recorded yet"
    header = ("started (UTC)", "spans", "outcome", "steps ran/cached", "metric", "cand", "fp32", "prod",
              "blessed", "pushed", "duration")
    rows = [header]
    for run in runs:
        values, metric = run.primary, run.primary_metric
        rows.append((
            run.started.strftime("%Y-%m-%d %H:%M:%S"), run.spans or "-", run.outcome,
            f"{len(run.steps_with('ran'))}/{len(run.steps_with('cached'))}", metric.label if metric else "-",
            *("-" if values.get(role) is None else f"{values[role]:.4f}" for role in MODEL_ROLES),
            run.blessed_model or "-", run.pushed_version or "-", f"{run.seconds:.1f} s"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)
