"""The Kubeflow Pipelines v2 compile: the exact spec we would hand a KFP or Vertex AI backend."""
import copy
import dataclasses
import json
import re
import subprocess
import sys

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from pipeline.config import load_config
from pipeline.dag.kubeflow_runner import CompileError, check_resources, compile_kubeflow
from pipeline.dag.wiring import create_pipeline

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
    assert job["pipelineSpec"]["schemaVersion"] == "2.1.0"  # typed parameter constants
    parsed = json_format.Parse(output.read_text(), pipeline_spec_pb2.PipelineJob())
    spec = json_format.ParseDict(job["pipelineSpec"], pipeline_spec_pb2.PipelineSpec())
    assert parsed.pipeline_spec["pipelineInfo"]["name"] == spec.pipeline_info.name == "taxi-accel"
    assert parsed.runtime_config.gcs_output_directory == "gs://bucket/root"


def test_tasks_and_dependencies_match_the_local_dag(compiled):
    config, _, job = compiled
    local = {node.id: {upstream.id for upstream in node.upstream_nodes}  # GPU pods: the trainers side by side
             for node in create_pipeline(config, fingerprint_data=False, baseline_after_candidate=False).components
             if node.id != RESOLVER}
    remote = {name: {dep.split("-model-")[0] for dep in task.get("dependentTasks", [])}
              for name, task in _tasks(job).items() if not name.startswith(RESOLVER)}
    assert remote == local
    assert {"Trainer", "Fp32BaselineTrainer", "PrecisionEvaluator", "ModelExport", "AtomicPusher"} <= set(remote)
    assert "Trainer" not in remote["Fp32BaselineTrainer"]


@pytest.mark.parametrize("training, precision, waits", [
    ({"accelerator": "", "accelerator_count": 0}, "auto", True),  # CPU pods: the candidate may train in float32
    ({"accelerator_count": 1}, "auto", False),  # GPU pods: mixed precision; both train side by side
    ({"accelerator": "", "accelerator_count": 0}, "mixed_bfloat16", False),
], ids=["cpu_pods", "gpu_pods", "bf16_set_in_the_config"])
def test_the_baseline_waits_for_the_candidates_run_only_where_its_numerics_may_be_the_same(tmp_path, training,
                                                                                             precision, waits):
    """Two pods, two trainers: the baseline learns whether to train from the candidate's ModelRun, an input
    of its task, which makes it run after the candidate; where the numerics differ for certain it does not
    wait."""
    config = load_config(data_root="gs://bucket/taxi", serving_dir="/mnt/serving", resources={"training": training},
                         train={"precision": precision})
    job = compile_kubeflow(config, image="i", pipeline_root="gs://bucket/root", output_file=str(tmp_path / "p.json"))
    baseline = _tasks(job)["Fp32BaselineTrainer"]
    assert ("Trainer" in baseline.get("dependentTasks", [])) == waits
    artifacts = baseline["inputs"].get("artifacts", {})
    assert ("candidate_run" in artifacts) == waits
    if waits:
        assert artifacts["candidate_run"]["taskOutputArtifact"] == {"producerTask": "Trainer",
                                                                    "outputArtifactKey": "model_run"}
    assert "components.trainer.executor.Executor" in " ".join(_container(job, "Fp32BaselineTrainer")["args"])


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
    assert parameters["schema_file"]["runtimeValue"]["constant"] == \
        "/pipeline/schemas/taxi/schema.pbtxt"  # the bundled schema at its place in the image
    assert "gs://bucket/root/checkpoints/Trainer" in json.dumps(tasks["Trainer"])


def test_the_evaluator_and_export_settings_travel_as_json_of_their_config_sections(compiled):
    """The typed sections are serialized at the pipeline and rebuilt in the executors: on the wire they are
    the JSON of the section's fields, in field order (the evaluator's with what the model predicts last)."""
    config, _, job = compiled
    tasks = _tasks(job)

    def settings(task):
        return tasks[task]["inputs"]["parameters"]["settings"]["runtimeValue"]["constant"]

    target = {"label_key": "big_tipper", "task": "binary", "classes": ["not_big_tipper", "big_tipper"]}
    assert settings("PrecisionEvaluator") == json.dumps({**dataclasses.asdict(config.evaluate), "target": target})
    assert settings("ModelExport") == json.dumps(dataclasses.asdict(config.export))
    assert tasks["ModelExport"]["inputs"]["parameters"]["model_module"]["runtimeValue"]["constant"] == "models.taxi"


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
    schema = tmp_path / "schema.pbtxt"  # a curated schema on this machine, which no pod has
    schema.write_text(open(load_config().schema_path).read())
    with pytest.raises(CompileError, match=rf"schema_path: '{re.escape(str(schema))}' is a file on this machine"):
        compile_kubeflow(load_config(data_root="gs://b/t", serving_dir="/s", schema_path=str(schema)), image="i",
                         pipeline_root="gs://b/r", output_file=str(tmp_path / "p.json"))
    assert not (tmp_path / "p.json").exists()


def test_a_local_run_records_absolute_artifact_uris_whatever_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(data_root="data", output_dir="out")  # relative, as `make demo` passes them
    pipeline = create_pipeline(config, fingerprint_data=False)
    assert pipeline.pipeline_info.pipeline_root == str(tmp_path / "out" / "pipeline")


def test_multi_worker_training_compiles_to_a_vertex_custom_job_with_a_chief_and_workers(tmp_path):
    config = load_config(data_root="gs://bucket/taxi", serving_dir="/mnt/serving", resources={
        "training_workers": 3, "vertex_project": "my-project", "training": {"accelerator_count": 2}})
    job = compile_kubeflow(config, image="gcr.io/p/img:1", pipeline_root="gs://bucket/root",
                           output_file=str(tmp_path / "p.json"))
    for trainer in ("Trainer", "Fp32BaselineTrainer"):
        container = _container(job, trainer)
        assert "components.trainer.vertex.VertexExecutor" in " ".join(container["args"])
        assert container["resources"]["cpuLimit"] == config.resources.data.cpu  # it only waits for the job
        custom_config = json.loads(_tasks(job)[trainer]["inputs"]["parameters"]["custom_config"]
                                   ["runtimeValue"]["constant"])
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
