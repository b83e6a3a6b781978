"""The pipeline's MLMD store, read: its runs, each run's executions per node, their output artifacts and the
files and properties the run facts (pipeline/runs/run_facts.py), the run guard and the benchmarks read from them.

Every artifact key, property and file name comes from components/core/contract.py.
"""
from __future__ import annotations

import os

from components.core import contract
from pipeline.config import PipelineConfig


def open_store(config: PipelineConfig):
    """The pipeline's SQLite MLMD store, or None before the first run."""
    if not os.path.exists(config.metadata_path):
        return None
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata
    return metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(config.metadata_path))


def node_ids(store, execution) -> list[str]:
    """The pipeline node ids (e.g. "Trainer") an execution belongs to: what follows the last '.' of each node
    context's name, "<pipeline name>.<node id>" (a node id holds no '.'; a pipeline name of an older config may)."""
    node_type = store.get_context_type("node").id
    return [c.name.rsplit(".", 1)[-1] for c in store.get_contexts_by_execution(execution.id)
            if c.type_id == node_type]


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


def newest_output(store, pipeline_name: str, node: str, output_key: str):
    """The artifact that `node`'s newest execution in the pipeline (ran or cached) output under `output_key`,
    or None when the node never ran."""
    context = store.get_context_by_type_and_name("node", f"{pipeline_name}.{node}")
    executions = store.get_executions_by_context(context.id) if context else []
    return output_artifact(store, max(executions, key=lambda execution: execution.id) if executions else None,
                           output_key)


def artifact_json(artifact, name: str) -> dict:
    """The JSON file `name` in an MLMD artifact's folder (a local path or a URI), or {} when there is no
    artifact or no file."""
    from components.core.artifact_files import read_json_if_exists

    return (artifact and read_json_if_exists(os.path.join(artifact.uri, name))) or {}


def spans_of(examples) -> str:
    """The spans an Examples artifact (MLMD proto) was read from, as "2,3" (older artifacts: their one span)."""
    properties = examples.custom_properties
    return properties[contract.SPANS_PROPERTY].string_value if contract.SPANS_PROPERTY in properties \
        else str(examples.properties[contract.SPAN_PROPERTY].int_value)


def input_dirs(examples) -> list[str]:
    """The span folders an Examples artifact (MLMD proto) was read from ([] for artifacts that do not say)."""
    properties = examples.custom_properties
    value = properties[contract.INPUT_DIR_PROPERTY].string_value if contract.INPUT_DIR_PROPERTY in properties else ""
    return [folder for folder in value.split(",") if folder]


def split_counts(examples) -> dict[str, int]:
    """Split name -> records, from an Examples artifact's (MLMD proto) per-split count properties."""
    suffix = contract.SPLIT_EXAMPLES_PROPERTY.format(split="")
    return {key[: -len(suffix)]: value.int_value for key, value in examples.custom_properties.items()
            if key.endswith(suffix)}


def is_blessed(blessing) -> bool | None:
    """What a ModelBlessing artifact (MLMD proto) says: blessed or not; None when there is no blessing."""
    if blessing is None or contract.BLESSED_PROPERTY not in blessing.custom_properties:
        return None
    return blessing.custom_properties[contract.BLESSED_PROPERTY].int_value == 1


def pushed_destination(pushed) -> str | None:
    """Where a PushedModel artifact (MLMD proto) says the model was pushed, or None when nothing was."""
    if pushed is None or pushed.custom_properties[contract.PUSHED_PROPERTY].int_value != 1:
        return None
    return pushed.custom_properties[contract.PUSHED_DESTINATION_PROPERTY].string_value
