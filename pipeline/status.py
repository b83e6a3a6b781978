"""`python -m pipeline status`: past runs of the pipeline, read from its MLMD store.

One row per pipeline run: when, which spans, how each step ended (ran, cached, failed where), candidate,
FP32 baseline and production AUC, the blessing, the pushed version and the duration.
"""
from __future__ import annotations

import datetime
import os
from dataclasses import dataclass, field

from components.precision_evaluator.gates import AUC, OVERALL, REPORT_FILE as PRECISION_REPORT
from pipeline.config import PipelineConfig


@dataclass
class RunRecord:
    run_id: str
    started: float  # seconds since the epoch
    seconds: float
    outcome: str  # "complete", "cached" (every step reused), "failed at <node>", "running or killed at <node>",
    # "killed at <node>" (a later run found it dead and cleaned it up)
    spans: str = ""
    ran: int = 0  # steps executed
    cached: int = 0  # steps reused from the cache
    auc: dict = field(default_factory=dict)  # role -> overall AUC (candidate, fp32_baseline, production)
    blessing: str = ""  # "candidate", "fp32_baseline", "not blessed" or ""
    pushed_version: str = ""


def list_runs(config: PipelineConfig) -> list[RunRecord]:
    """Input: the config (its MLMD path and pipeline name). Output: one record per run, oldest first."""
    store = open_store(config)
    if store is None:
        return []
    from ml_metadata.proto import metadata_store_pb2

    state = metadata_store_pb2.Execution.State
    records = []
    for run, nodes in runs_by_node(store, config.pipeline_name):
        executions = list(nodes.values())
        steps = {name: e for name, e in nodes.items() if not name.endswith("_resolver")}
        started = min(e.create_time_since_epoch for e in executions) / 1000
        ended = max(e.last_update_time_since_epoch for e in executions) / 1000
        record = RunRecord(run_id=run.name, started=started, seconds=ended - started, outcome="complete",
                           ran=sum(e.last_known_state == state.COMPLETE for e in steps.values()),
                           cached=sum(e.last_known_state == state.CACHED for e in steps.values()))
        failed = [name for name, e in steps.items() if e.last_known_state == state.FAILED]
        unfinished = [name for name, e in steps.items() if e.last_known_state in (state.NEW, state.RUNNING)]
        killed = [name for name, e in steps.items() if e.last_known_state == state.CANCELED]
        if failed:
            record.outcome = "failed at " + ", ".join(failed)
        elif killed:
            record.outcome = "killed at " + ", ".join(killed)
        elif unfinished:
            record.outcome = "running or killed at " + ", ".join(unfinished)
        elif record.cached and not record.ran:
            record.outcome = "cached"
        examples = output_artifact(store, nodes.get("TFRecordIngest"), "examples")
        if examples is not None:
            record.spans = spans_of(examples)
        blessing = output_artifact(store, nodes.get("PrecisionEvaluator"), "blessing")
        if blessing is not None:
            report = artifact_json(blessing, PRECISION_REPORT)
            overall = report.get("metrics", {}).get(OVERALL, {})
            record.auc = {role: metrics.get(AUC) for role, metrics in overall.items()}
            record.blessing = report.get("chosen_model") or "not blessed" if report else ""
        destination = pushed_destination(output_artifact(store, nodes.get("AtomicPusher"), "pushed_model"))
        if destination:
            record.pushed_version = os.path.basename(destination)  # the AtomicPusher's pushed_version
        records.append(record)
    return sorted(records, key=lambda record: record.started)


def render_runs(records: list[RunRecord]) -> str:
    """The records as a fixed-width table, one line per run."""
    if not records:
        return "no runs recorded yet"
    header = ("started (UTC)", "spans", "outcome", "steps ran/cached", "AUC cand", "AUC fp32", "AUC prod",
              "blessed", "pushed", "duration")
    rows = [header]
    for record in records:
        rows.append((
            datetime.datetime.fromtimestamp(record.started, datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S"),
            record.spans or "-", record.outcome, f"{record.ran}/{record.cached}",
            *(_auc(record.auc.get(role)) for role in ("candidate", "fp32_baseline", "production")),
            record.blessing or "-", record.pushed_version or "-", f"{record.seconds:.1f} s"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in rows)


def _auc(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def read_json(path: str | None) -> dict:
    """The JSON file at `path` (a local path or a URI), or {} when there is no path or no file."""
    from components.artifact_files import read_json_if_exists

    return read_json_if_exists(path or "") or {}


def artifact_json(artifact, name: str) -> dict:
    """The JSON file `name` in an MLMD artifact's folder, or {} when there is no artifact or no file."""
    return read_json(artifact and os.path.join(artifact.uri, name))


def spans_of(examples) -> str:
    """The spans an Examples artifact (MLMD proto) was read from, as "2,3" (older artifacts: their one span)."""
    from components.tfrecord_ingest.executor import SPANS_PROPERTY  # not at the top: it imports TFX's executor base

    properties = examples.custom_properties
    return properties[SPANS_PROPERTY].string_value if SPANS_PROPERTY in properties \
        else str(examples.properties["span"].int_value)


def pushed_destination(pushed) -> str | None:
    """Where a PushedModel artifact (MLMD proto) says the model was pushed, or None when nothing was."""
    if pushed is None or pushed.custom_properties["pushed"].int_value != 1:
        return None
    return pushed.custom_properties["pushed_destination"].string_value


def open_store(config: PipelineConfig):
    """The pipeline's SQLite MLMD store, or None before the first run."""
    if not os.path.exists(config.metadata_path):
        return None
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata
    return metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(config.metadata_path))


def node_ids(store, execution) -> list[str]:
    """The pipeline node ids (e.g. "Trainer") an execution belongs to."""
    node_type = store.get_context_type("node").id
    return [c.name.split(".", 1)[-1] for c in store.get_contexts_by_execution(execution.id) if c.type_id == node_type]


def recorded_run_ids(config: PipelineConfig) -> frozenset[str]:
    """The ids of the runs MLMD records for this pipeline (empty before the first run)."""
    store = open_store(config)
    return frozenset(run.name for run, _ in runs_by_node(store, config.pipeline_name)) if store else frozenset()


def runs_by_node(store, pipeline_name: str) -> list[tuple]:
    """Output: (pipeline_run context, {node id: its execution in that run}) for each run of the pipeline,
    resolvers included, in MLMD's order."""
    pipeline = store.get_context_by_type_and_name("pipeline", pipeline_name)
    if pipeline is None:
        return []
    in_pipeline = {execution.id for execution in store.get_executions_by_context(pipeline.id)}
    runs = []
    for run in store.get_contexts_by_type("pipeline_run"):
        nodes = {}
        for execution in sorted(store.get_executions_by_context(run.id), key=lambda e: e.id):
            if execution.id in in_pipeline:
                names = node_ids(store, execution)
                nodes[names[0] if names else str(execution.id)] = execution
        if nodes:
            runs.append((run, nodes))
    return runs


def output_artifact(store, execution, output_key: str):
    """The artifact an execution (ran or cached) output under `output_key`, or None."""
    if execution is None:
        return None
    for event in store.get_events_by_execution_ids([execution.id]):
        if event.type in (event.OUTPUT, event.DECLARED_OUTPUT) and any(
                step.key == output_key for step in event.path.steps if step.HasField("key")):
            return store.get_artifacts_by_id([event.artifact_id])[0]
    return None
