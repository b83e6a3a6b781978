"""The Kubeflow Pipelines v2 compile: the exact spec we would hand a KFP or Vertex AI backend."""
import copy
import json
import os
import subprocess
import sys

import pytest
import tensorflow as tf
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from pipeline.config import PROJECT_ROOT, load_config
from pipeline.kubeflow_runner import CompileError, check_resources, compile_kubeflow
from pipeline.pipeline import create_pipeline

RESOLVER = "latest_blessed_model_resolver"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    output = tmp_path_factory.mktemp("kfp") / "taxi.json"
    config = load_config(data_root="gs://bucket/taxi", serving_dir="/mnt/serving", resources={
        "data": {"cpu": 3, "memory_gb": 6}, "training": {"accelerator_count": 2}})
    job = compile_kubeflow(config, image="gcr.io/project/taxi-accel:1.0", pipeline_root="gs://bucket/root",
                           output_file=str(output))
    return config, output, job


def _tasks(job):
    return job["pipelineSpec"]["root"]["dag"]["tasks"]


def _container(job, task):
    spec = job["pipelineSpec"]
    label = spec["components"][_tasks(job)[task]["componentRef"]["name"]]["executorLabel"]
    return spec["deploymentSpec"]["executors"][label].get("container")


def test_the_written_file_parses_as_a_kfp_pipeline_job(compiled):
    _, output, job = compiled
    parsed = json_format.Parse(output.read_text(), pipeline_spec_pb2.PipelineJob())
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    assert parsed.pipeline_spec["pipelineInfo"]["name"] == spec.pipeline_info.name == "taxi-accel"
    assert parsed.runtime_config.gcs_output_directory == "gs://bucket/root"


def test_tasks_and_dependencies_match_the_local_dag(compiled):
    config, _, job = compiled
    local = {node.id: {upstream.id for upstream in node.upstream_nodes}
             for node in create_pipeline(config, fingerprint_data=False).components if node.id != RESOLVER}
    remote = {name: {dep.split("-model-")[0] for dep in task.get("dependentTasks", [])}
              for name, task in _tasks(job).items() if not name.startswith(RESOLVER)}
    assert remote == local
    assert {"Trainer", "Fp32BaselineTrainer", "PrecisionEvaluator", "ModelExport", "AtomicPusher"} <= set(remote)


def test_every_container_step_carries_its_resources(compiled):
    _, _, job = compiled
    containers = {name: _container(job, name) for name in _tasks(job)}
    steps = {name: c["resources"] for name, c in containers.items() if c is not None}
    assert len(steps) == 10 and "TFRecordIngest" in steps  # every step but the two resolver halves
    for trainer in ("Trainer", "Fp32BaselineTrainer"):
        assert steps[trainer]["cpuLimit"] == 8 and steps[trainer]["memoryLimit"] == 32
        assert steps[trainer]["accelerator"] == {"type": "NVIDIA_TESLA_T4", "count": "2",
                                                 "resourceType": "NVIDIA_TESLA_T4", "resourceCount": "2"}
    for step in ("PrecisionEvaluator", "ModelExport"):
        assert steps[step]["resourceCpuLimit"] == "4" and steps[step]["resourceMemoryLimit"] == "16G"
    for step in ("TFRecordIngest", "StatisticsGen", "ExampleValidator", "ValidationGate", "AtomicPusher"):
        assert (steps[step]["cpuLimit"], steps[step]["memoryLimit"], steps[step]["resourceMemoryRequest"]) == (
            3, 6, "6G") and "accelerator" not in steps[step]
    assert {c["image"] for c in containers.values() if c} == {"gcr.io/project/taxi-accel:1.0"}


def test_ingestion_always_runs_and_paths_are_the_pods(compiled):
    _, _, job = compiled
    tasks = _tasks(job)
    assert tasks["TFRecordIngest"]["cachingOptions"] == {"enableCache": False}
    assert tasks["Trainer"]["cachingOptions"] == {"enableCache": True}
    parameters = tasks["ImportSchemaGen"]["inputs"]["parameters"]
    assert parameters["schema_file"]["runtimeValue"]["constantValue"]["stringValue"] == \
        "/pipeline/schemas/taxi/schema.pbtxt"  # the bundled schema at its place in the image
    assert "gs://bucket/root/checkpoints/Trainer" in json.dumps(tasks["Trainer"])


def test_a_step_that_lost_its_resources_fails_the_check(compiled):
    config, _, job = compiled
    broken = copy.deepcopy(job)
    del _container(broken, "TFRecordIngest")["resources"]
    with pytest.raises(CompileError, match="TFRecordIngest: None"):
        check_resources(broken, config)


def test_compile_refuses_paths_that_mean_nothing_in_a_pod(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pipeline", "compile", "--image", "img", "--pipeline-root",
                             "gs://b/r", "--output", str(tmp_path / "p.json"), "--serving-dir", "/srv"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "data_root: 'data/taxi' must be a URI or an absolute path" in result.stderr
    assert not (tmp_path / "p.json").exists()
    with pytest.raises(CompileError, match="pipeline root 'runs/taxi' must be a URI"):
        compile_kubeflow(load_config(data_root="gs://b/t", serving_dir="/s"), image="i", pipeline_root="runs/taxi",
                         output_file=str(tmp_path / "p.json"))


def test_a_local_run_records_absolute_artifact_uris_whatever_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(data_root="data", output_dir="out")  # relative, as `make demo` passes them
    pipeline = create_pipeline(config, fingerprint_data=False)
    assert pipeline.pipeline_info.pipeline_root == str(tmp_path / "out" / "pipeline")


def _constant(value: dict):
    """A compiled constant (KFP's old-style Value) as the JSON value the KFP v2 launcher hands the container."""
    (kind, raw), = value.items()
    return {"intValue": int, "doubleValue": float, "stringValue": str}[kind](raw)


def _records(examples_uri, split):
    files = sorted(tf.io.gfile.glob(os.path.join(examples_uri, f"Split-{split}", "*")))
    return [bytes(r) for r in tf.data.TFRecordDataset(files, compression_type="GZIP").as_numpy_iterator()]


@pytest.mark.e2e
def test_ingestion_container_command_runs_through_the_tfx_entrypoint_like_a_local_run(taxi_span_root, tmp_path):
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner
    from tfx.orchestration import metadata, pipeline as tfx_pipeline
    from ml_metadata.metadata_store import metadata_store
    from components.tfrecord_ingest.component import TFRecordIngest
    from components.tfrecord_ingest.records import fingerprint_input

    config = load_config(data_root=taxi_span_root, serving_dir="/mnt/serving")
    job = compile_kubeflow(config, image="img", pipeline_root="gs://bucket/root", output_file=str(tmp_path / "p.json"))
    task = _tasks(job)["TFRecordIngest"]
    component = job["pipelineSpec"]["components"][task["componentRef"]["name"]]
    container = _container(job, "TFRecordIngest")
    # The ExecutorInput the KFP v2 launcher builds for this task: its parameters (in the typed form this
    # schema version declares, which TFX's entrypoint reads, and as plain values), one output artifact per
    # output definition under the pipeline root, and where the container writes its output metadata.
    output_type = component["outputDefinitions"]["artifacts"]["examples"]["artifactType"]
    constants = {name: parameter["runtimeValue"]["constantValue"] for name, parameter in task["inputs"]["parameters"].items()}
    executor_input = {
        "inputs": {"parameters": constants,
                   "parameterValues": {name: _constant(value) for name, value in constants.items()}},
        "outputs": {"artifacts": {"examples": {"artifacts": [{
            "name": "projects/1/locations/us-central1/metadataStores/default/artifacts/7",
            "type": output_type, "uri": str(tmp_path / "kfp" / "examples"), "metadata": {}}]}},
            "outputFile": str(tmp_path / "kfp" / "executor_output.json")}}
    command = container["command"] + [json.dumps(executor_input) if arg == "{{$}}" else arg
                                      for arg in container["args"]]
    assert command[:3] == ["python", "-m", "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"]
    result = subprocess.run([sys.executable] + command[1:], cwd=PROJECT_ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": PROJECT_ROOT}, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    # The same component run locally by TFX (LocalDagRunner, MLMD).
    local = tfx_pipeline.Pipeline(
        pipeline_name="ingest-only", pipeline_root=str(tmp_path / "local"),
        components=[TFRecordIngest(input_base=taxi_span_root, eval_fraction=config.ingest.eval_fraction,
                                   input_fingerprint=fingerprint_input(taxi_span_root))],
        metadata_connection_config=metadata.sqlite_metadata_connection_config(str(tmp_path / "m.sqlite")))
    LocalDagRunner().run(local)
    store = metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(str(tmp_path / "m.sqlite")))
    local_examples, = store.get_artifacts_by_type("Examples")

    for split in ("train", "eval"):
        assert _records(str(tmp_path / "kfp" / "examples"), split) == _records(local_examples.uri, split)
    output = json.loads((tmp_path / "kfp" / "executor_output.json").read_text())
    remote = output["artifacts"]["examples"]["artifacts"][0]["metadata"]
    for key in ("train_examples", "eval_examples", "input_fingerprint", "spans", "span"):
        value = local_examples.custom_properties[key] if key in local_examples.custom_properties \
            else local_examples.properties[key]
        local_value = value.string_value or value.int_value
        assert remote[key] == local_value or float(remote[key]) == float(local_value), (key, remote[key], local_value)


def test_multi_worker_training_compiles_to_a_vertex_custom_job_with_a_chief_and_workers(tmp_path):
    config = load_config(data_root="gs://bucket/taxi", serving_dir="/mnt/serving", resources={
        "training_workers": 3, "vertex_project": "my-project", "training": {"accelerator_count": 2}})
    job = compile_kubeflow(config, image="gcr.io/p/img:1", pipeline_root="gs://bucket/root",
                           output_file=str(tmp_path / "p.json"))
    for trainer in ("Trainer", "Fp32BaselineTrainer"):
        container = _container(job, trainer)
        assert "google_cloud_ai_platform.trainer.executor" in " ".join(container["args"])
        assert container["resources"]["cpuLimit"] == config.resources.data.cpu  # it only waits for the job
        custom_config = json.loads(_tasks(job)[trainer]["inputs"]["parameters"]["custom_config"]
                                   ["runtimeValue"]["constantValue"]["stringValue"])
        args = custom_config["ai_platform_training_args"]
        assert custom_config["ai_platform_enable_vertex"] is True and args["project"] == "my-project"
        pools = args["job_spec"]["worker_pool_specs"]
        assert [pool["replica_count"] for pool in pools] == [1, 2]  # chief + 2 workers = 3 replicas
        for pool in pools:
            assert pool["machine_spec"] == {"machine_type": "n1-standard-8", "accelerator_type": "NVIDIA_TESLA_T4",
                                            "accelerator_count": 2}
            assert pool["container_spec"]["image_uri"] == "gcr.io/p/img:1"
        assert custom_config["strategy"] == "auto"  # MultiWorkerMirrored, chosen from the TF_CONFIG Vertex sets
    with pytest.raises(CompileError, match="vertex_project"):
        compile_kubeflow(load_config(data_root="gs://b/t", serving_dir="/s", resources={"training_workers": 2}),
                         image="i", pipeline_root="gs://b/r", output_file=str(tmp_path / "q.json"))
