"""Compiles create_pipeline(config) for Kubeflow Pipelines v2 (and Vertex AI Pipelines) with per-step resources.

Every container step gets CPU and memory (requests = limits) from the config's `resources` section by role:
both Trainers take `resources.training` (with its accelerator), the PrecisionEvaluator and ModelExport take
`resources.evaluation`, every other step `resources.data`. With `resources.training_workers` > 1 each
Trainer runs as a Vertex AI CustomJob of that many replicas (see vertex_training_config). Resources are set on each component before the
compile (TFX's `platform_config`) and checked in the compiled spec afterwards, so a step that lost them
(tfx#6146) fails the compile instead of running unconstrained.

The user's own files that the step image lacks (a curated schema, the config, a model module of their own) are
staged on the pipeline root under content-addressed folders (pipeline/dag/staging.py) and read from there by
the steps; the compiled pipeline's description lists them. Under a Beam runner other than the DirectRunner,
the step image is also the Beam workers' container (pipeline/dag/beam_workers.py, cluster_beam_args).
"""
from __future__ import annotations

import dataclasses
import json
import os

import yaml
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2
from tfx.orchestration.kubeflow.v2 import kubeflow_v2_dag_runner
from tfx.dsl.components.base import base_component

from components.core import contract
from pipeline.config import PROJECT_ROOT, PipelineConfig, StepResources, user_code, with_schema_moved
from pipeline.dag import staging as staged_files
from pipeline.dag.beam_workers import cluster_beam_args
from pipeline.dag.kfp_entrypoint import MODEL_CODE_FLAG, TFX_ENTRYPOINT
from pipeline.dag.wiring import baseline_after_candidate, create_pipeline

ResourceSpec = pipeline_spec_pb2.PipelineDeploymentConfig.PipelineContainerSpec.ResourceSpec
STEP_ROLES = {contract.TRAINER_NODE: "training", contract.FP32_BASELINE_NODE: "training",
              "PrecisionEvaluator": "evaluation", "ModelExport": "evaluation"}  # any other step: "data"
INGEST_STEP = "TFRecordIngest"
IMAGE_PROJECT_ROOT = "/pipeline"  # where the Dockerfile puts the project
PROJECT_ENTRYPOINT = "pipeline.dag.kfp_entrypoint"


class CompileError(RuntimeError):
    """The compiled spec is missing something it must carry; the message names the step."""


def resource_spec(resources: StepResources) -> ResourceSpec:
    """Input: one step's resources. Output: KFP's ResourceSpec, in both the numeric fields (Vertex AI, older
    KFP backends) and the string fields (KFP 2.x backends)."""
    spec = ResourceSpec(cpu_limit=resources.cpu, memory_limit=resources.memory_gb,
                        cpu_request=resources.cpu, memory_request=resources.memory_gb,
                        resource_cpu_limit=f"{resources.cpu:g}", resource_memory_limit=f"{resources.memory_gb:g}G",
                        resource_cpu_request=f"{resources.cpu:g}",
                        resource_memory_request=f"{resources.memory_gb:g}G")
    if resources.accelerator and resources.accelerator_count:
        spec.accelerator.type = spec.accelerator.resource_type = resources.accelerator
        spec.accelerator.count = resources.accelerator_count
        spec.accelerator.resource_count = str(resources.accelerator_count)
    return spec


def step_role(step: str, config: PipelineConfig) -> str:
    """The resources section a step takes. A trainer that launches a multi-replica Vertex AI CustomJob only
    waits for it: its own pod gets `data` resources, the job's replicas get the training ones."""
    role = STEP_ROLES.get(step, "data")
    return "data" if role == "training" and config.resources.training_workers > 1 else role


def vertex_training_config(config: PipelineConfig, image: str) -> dict | None:
    """Input: the config and the step image. Output: TFX's Vertex AI Trainer custom_config keys for a CustomJob
    of `resources.training_workers` replicas (pool 0: the chief; pool 1: the other workers, all running the
    Trainer's run_fn in `image`, Vertex setting TF_CONFIG on each), or None when training runs in one pod."""
    resources = config.resources
    if resources.training_workers <= 1:
        return None
    if not resources.vertex_project:
        raise CompileError(f"resources.training_workers is {resources.training_workers}: set "
                           f"resources.vertex_project (multi-worker training runs as a Vertex AI CustomJob)")
    from tfx.extensions.google_cloud_ai_platform import constants as vertex
    from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex_trainer

    machine = {"machine_type": resources.training_machine_type}
    if resources.training.accelerator and resources.training.accelerator_count:
        machine.update(accelerator_type=resources.training.accelerator,
                       accelerator_count=resources.training.accelerator_count)
    pools = [{"machine_spec": machine, "replica_count": count, "container_spec": {"image_uri": image}}
             for count in (1, resources.training_workers - 1)]
    return {vertex.ENABLE_VERTEX_KEY: True, vertex.VERTEX_REGION_KEY: resources.vertex_region,
            vertex_trainer.TRAINING_ARGS_KEY: {"project": resources.vertex_project,
                                               "job_spec": {"worker_pool_specs": pools}}}


@dataclasses.dataclass
class Compiled:
    """What compile_job made: the pipeline job (JSON dict, also written to its file), what was staged for it
    (`uploaded`: per staged item, False when a complete copy was already there) and the Beam flags the compile
    added for the workers."""
    job: dict
    staging: staged_files.Staging
    uploaded: list[bool]
    beam_flags_added: list[str]


def compile_kubeflow(config: PipelineConfig, image: str, pipeline_root: str, output_file: str,
                     image_project_root: str = IMAGE_PROJECT_ROOT, config_file: str | None = None) -> dict:
    """compile_job's pipeline job (JSON dict), also written to `output_file`."""
    return compile_job(config, image, pipeline_root, output_file, image_project_root, config_file).job


def compile_job(config: PipelineConfig, image: str, pipeline_root: str, output_file: str,
                image_project_root: str = IMAGE_PROJECT_ROOT, config_file: str | None = None) -> Compiled:
    """Input: the config, the step image, the pipeline root URI (gs://... on Vertex AI), where to write the
    spec, where the project sits inside the image, and the config file the config was read from (None: none).
    Stages the files the image lacks on the pipeline root (see pipeline/dag/staging.py), then compiles.
    Output: the Compiled job, also written to `output_file`. Raises CompileError for paths that would mean
    nothing inside a step's pod, naming the key."""
    if not (pipeline_root.startswith("/") or "://" in pipeline_root):
        raise CompileError(f"pipeline root {pipeline_root!r} must be a URI (gs://...) or an absolute path")
    for key in ("data_root", "serving_dir"):
        value = getattr(config, key)
        if not value or not (value.startswith("/") or "://" in value):
            raise CompileError(f"{key}: {value!r} must be a URI or an absolute path as the steps' pods see it "
                               f"(set it in the config file or with --data / --serving-dir)")
    try:
        staging = staged_files.plan_staging(config, config_file, pipeline_root)
    except staged_files.StagingError as error:
        raise CompileError(str(error)) from None
    model_code = staging.uri(staged_files.MODEL_CODE)
    if model_code and config.resources.training_workers > 1:
        staged = " and ".join(f"{key}: {module}" for key, module in zip(("train.model", "task.type"),
                                                                          user_code(config))
                              if staged_files.model_code_files(module, key))
        raise CompileError(f"{staged} is staged with the pipeline, but the "
                           f"{config.resources.training_workers} replicas of a multi-worker training job "
                           f"(resources.training_workers) run TFX's own executor script, which does not read it: "
                           f"install the module in the step image, or train with one worker")
    if staging.uri(staged_files.SCHEMA):  # what the models predict, checked against the schema before it is staged
        config = with_schema_moved(config, staging.uri(staged_files.SCHEMA))
    elif "://" not in config.schema_path:  # the bundled schema, at its place in the image
        config = dataclasses.replace(config, schema_path=os.path.join(
            image_project_root, os.path.relpath(config.schema_path, PROJECT_ROOT)))
    added = cluster_beam_args(config.beam_pipeline_args, image)
    config = dataclasses.replace(config, beam_pipeline_args=[*config.beam_pipeline_args, *added])
    vertex_training = vertex_training_config(config, image)
    accelerators = bool(config.resources.training.accelerator and config.resources.training.accelerator_count)
    pipeline = create_pipeline(config, pipeline_root=pipeline_root, fingerprint_data=False,
                               vertex_training=vertex_training,
                               baseline_after_candidate=baseline_after_candidate(config, accelerators))
    for node in pipeline.components:
        if isinstance(node, base_component.BaseComponent):
            node.with_platform_config(resource_spec(getattr(config.resources, step_role(node.id, config))))
    os.makedirs(os.path.dirname(os.path.abspath(output_file)), exist_ok=True)
    runner = kubeflow_v2_dag_runner.KubeflowV2DagRunner(
        # Pipeline spec 2.1: typed parameter constants (runtimeValue.constant), which KFP's current launcher
        # reads; TFX's default 2.0 form (runtimeValue.constantValue) is deprecated.
        config=kubeflow_v2_dag_runner.KubeflowV2DagRunnerConfig(default_image=image, use_pipeline_spec_2_1=True),
        output_filename=output_file)
    job = runner.run(pipeline, write_out=False)
    # The input files are fingerprinted only when a run starts, so ingestion is never answered from the cache.
    job["pipelineSpec"]["root"]["dag"]["tasks"][INGEST_STEP]["cachingOptions"] = {"enableCache": False}
    use_project_entrypoint(job, model_code)
    query_custom_types_by_title(job)
    check_resources(job, config)
    job["pipelineSpec"]["pipelineInfo"]["description"] = describe(image, staging)
    uploaded = staged_files.upload(staging)  # only once the compile has succeeded
    with open(output_file, "w") as handle:
        json.dump(job, handle, indent=2, sort_keys=True)
    return Compiled(job, staging, uploaded, added)


def describe(image: str, staging: staged_files.Staging) -> str:
    """The compiled pipeline's description: its step image and what the steps read from the staged files."""
    lines = [f"accel-tfx pipeline for the step image {image}."]
    if staging.items:
        lines.append("Staged on the pipeline root when compiled (content-addressed):")
        lines += staging.listing()
    else:
        lines.append("Nothing staged: the schema and the model module are the image's (or on an object store).")
    return "\n".join(lines)


def query_custom_types_by_title(job: dict) -> None:
    """TFX compiles a resolver over a custom artifact type to the query `schema_title="tfx.Artifact"`, which
    finds no artifact of that type on a KFP backend (the previous ValidationReport would never be found, and
    drift never measured). Each resolver query asks for the schema title of the type it outputs instead."""
    spec = job["pipelineSpec"]
    for task in spec["root"]["dag"]["tasks"].values():
        component = spec["components"][task["componentRef"]["name"]]
        resolver = spec["deploymentSpec"]["executors"][component["executorLabel"]].get("resolver")
        for key, query in (resolver or {}).get("outputArtifactQueries", {}).items():
            title = artifact_title(component["outputDefinitions"]["artifacts"][key]["artifactType"])
            query["filter"] = query["filter"].replace('schema_title="tfx.Artifact"', f'schema_title="{title}"')


def artifact_title(artifact_type: dict) -> str:
    """The schema title of a compiled artifact type (schemaTitle, or the title line of an instanceSchema)."""
    if "schemaTitle" in artifact_type:
        return artifact_type["schemaTitle"]
    return yaml.safe_load(artifact_type["instanceSchema"])["title"]


def use_project_entrypoint(job: dict, model_code: str | None = None) -> None:
    """Points every container that runs TFX's Kubeflow V2 entrypoint at pipeline.dag.kfp_entrypoint, which runs
    that same entrypoint after registering the filesystems (s3://) its artifact URIs need and, given
    `model_code` (the staged model code's folder), after making the modules there importable."""
    for executor in job["pipelineSpec"]["deploymentSpec"]["executors"].values():
        container = executor.get("container")
        if container and container.get("command") == ["python", "-m", TFX_ENTRYPOINT]:
            container["command"] = ["python", "-m", PROJECT_ENTRYPOINT]
            if model_code:
                container["args"] = [f"{MODEL_CODE_FLAG}={model_code}"] + container["args"]


def check_resources(job: dict, config: PipelineConfig) -> None:
    """Raises CompileError naming every container step whose compiled resources differ from the config's."""
    spec = job["pipelineSpec"]
    executors = spec["deploymentSpec"]["executors"]
    wrong = []
    for name, task in spec["root"]["dag"]["tasks"].items():
        executor = executors[spec["components"][task["componentRef"]["name"]]["executorLabel"]]
        if "container" not in executor:
            continue  # resolvers run in the orchestrator, not in a pod
        expected = json_format.MessageToDict(resource_spec(getattr(config.resources, step_role(name, config))))
        if executor["container"].get("resources") != expected:
            wrong.append(f"{name}: {executor['container'].get('resources')} (expected {expected})")
    if wrong:
        raise CompileError("steps without their resources in the compiled spec: " + "; ".join(wrong))
