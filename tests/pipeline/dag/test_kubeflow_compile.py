"""The Kubeflow Pipelines v2 compile: the exact spec we would hand a KFP or Vertex AI backend."""
import copy
import json
import os
import re
import subprocess
import sys

import pytest
from google.protobuf import json_format
from kfp.pipeline_spec import pipeline_spec_pb2

from components.core.tasks import PredictionTarget
from components.settings import EvaluateConfig, ExportConfig, StepSettings, TrainConfig
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


def test_each_step_gets_its_settings_as_one_record_in_the_compiled_spec(compiled):
    """The settings reach every step one way: one StepSettings record (its section, the task section, the model
    module, what the models predict) as JSON, decoded in the step as the typed record the wiring built."""
    config, _, job = compiled
    tasks = _tasks(job)

    def record(task, section):
        parameters = tasks[task]["inputs"]["parameters"]
        if "settings" in parameters:
            text = parameters["settings"]["runtimeValue"]["constant"]
        else:
            text = json.loads(parameters["custom_config"]["runtimeValue"]["constant"])["settings"]
        return StepSettings.from_json(text, section, task)

    target = PredictionTarget("big_tipper", "binary", ("not_big_tipper", "big_tipper"), ("tips",))
    for task, section, expected in (("PrecisionEvaluator", EvaluateConfig, config.evaluate),
                                    ("ModelExport", ExportConfig, config.export),
                                    ("Trainer", TrainConfig, config.train)):
        assert record(task, section) == StepSettings(expected, config.task, "models.taxi", target), task
    assert record("Fp32BaselineTrainer", TrainConfig).section.precision == "float32"
    assert not {"model_module", "task"} & set(tasks["ModelExport"]["inputs"]["parameters"])
    # ingestion's split leaves the label's sources out of its hash in the pod too
    assert tasks["TFRecordIngest"]["inputs"]["parameters"]["split_leaves_out"]["runtimeValue"]["constant"] == '["tips"]'


def test_a_step_that_lost_its_resources_fails_the_check(compiled):
    config, _, job = compiled
    broken = copy.deepcopy(job)
    del _container(broken, "TFRecordIngest")["resources"]
    with pytest.raises(CompileError, match="TFRecordIngest: None"):
        check_resources(broken, config)


@pytest.mark.slow
def test_compile_refuses_paths_that_mean_nothing_in_a_pod(tmp_path):
    result = subprocess.run([sys.executable, "-m", "pipeline", "compile", "--image", "img", "--pipeline-root",
                             "gs://b/r", "--output", str(tmp_path / "p.json"), "--serving-dir", "/srv",
                             "--data", "data/taxi"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "data_root: 'data/taxi' must be a URI or an absolute path" in result.stderr
    assert not (tmp_path / "p.json").exists()
    with pytest.raises(CompileError, match="pipeline root 'runs/taxi' must be a URI"):
        compile_kubeflow(load_config(data_root="gs://b/t", serving_dir="/s"), image="i", pipeline_root="runs/taxi",
                         output_file=str(tmp_path / "p.json"))
    assert not (tmp_path / "p.json").exists()


def test_a_local_run_records_absolute_artifact_uris_whatever_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = load_config(data_root="data", output_dir="out")  # relative, as `make demo` passes them
    pipeline = create_pipeline(config, fingerprint_data=False)
    assert pipeline.pipeline_info.pipeline_root == str(tmp_path / "out" / "pipeline")


@pytest.mark.slow
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
        settings = json.loads(custom_config["settings"])["section"]
        assert settings["strategy"] == "auto"  # MultiWorkerMirrored, chosen from the TF_CONFIG Vertex sets
    with pytest.raises(CompileError, match="vertex_project"):
        compile_kubeflow(load_config(data_root="gs://b/t", serving_dir="/s", resources={"training_workers": 2}),
                         image="i", pipeline_root="gs://b/r", output_file=str(tmp_path / "q.json"))


# ------------------------------------------------------------------ the user's files, staged on the pipeline root

def _user_project(folder, monkeypatch, module: str):
    """A user's folder outside the project: a curated schema, a config, and a model package of their own
    (`<module>_models.wide`, which re-exports models.taxi and imports a helper module beside the package)."""
    import shutil
    from pipeline.config import PROJECT_ROOT

    (folder / "schemas" / "shop").mkdir(parents=True)
    shutil.copy(f"{PROJECT_ROOT}/schemas/taxi/schema.pbtxt", folder / "schemas" / "shop" / "schema.pbtxt")
    package = folder / f"{module}_models"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "wide.py").write_text(f"from models.taxi import *  # noqa: F403\n"
                                     f"import {module}_helpers  # noqa: F401\n")
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "wide.cpython-311.pyc").write_bytes(b"not staged")
    (folder / f"{module}_helpers.py").write_text("WIDTH = 3\n")
    (folder / "shop.yaml").write_text("pipeline_name: shop\ndata_root: gs://b/d\n"
                                      f"schema_path: schemas/shop/schema.pbtxt\ntrain:\n  model: {module}_models.wide\n")
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    for name in [name for name in sys.modules if name.startswith(module)]:
        monkeypatch.delitem(sys.modules, name)


def test_the_users_schema_config_and_model_package_are_staged_by_content_and_the_steps_read_them(tmp_path, capsys,
                                                                                                  monkeypatch):
    from pipeline.commands.cli import main as cli_main
    from pipeline.dag.kfp_entrypoint import MODEL_CODE_FLAG

    user, root = tmp_path / "user", tmp_path / "root"
    user.mkdir()
    _user_project(user, monkeypatch, "staging1")
    argv = ["compile", "--config", "shop.yaml", "--image", "img:1", "--pipeline-root", str(root), "--data", "gs://b/d",
            "--serving-dir", "gs://b/s", "--output", str(tmp_path / "job.json")]
    capsys.readouterr()
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    job = json.loads((tmp_path / "job.json").read_text())
    staged = sorted(str(path.relative_to(root)) for path in root.rglob("*") if path.is_file())

    def digest(fragment):  # the staged folder of the listed file whose line holds `fragment`
        line = next(line for line in out.splitlines() if " -> " in line and fragment in line)
        return line.split("/staged/")[1].split("/")[0]

    schema_digest, config_digest, code_digest = digest("schema.pbtxt"), digest("config.yaml"), digest("wide.py")
    assert staged == sorted([
        f"staged/{schema_digest}/schema.pbtxt", f"staged/{schema_digest}/MANIFEST.json",
        f"staged/{config_digest}/config.yaml", f"staged/{config_digest}/MANIFEST.json",
        f"staged/{code_digest}/code/staging1_helpers.py", f"staged/{code_digest}/code/staging1_models/__init__.py",
        f"staged/{code_digest}/code/staging1_models/wide.py", f"staged/{code_digest}/MANIFEST.json"])
    assert len({schema_digest, config_digest, code_digest}) == 3
    assert all(re.fullmatch("[0-9a-f]{16}", value) for value in (schema_digest, config_digest, code_digest))
    assert "staged for the steps (3 item(s) copied, 0 already there):" in out
    assert f"  schema      schemas/shop/schema.pbtxt -> {root}/staged/{schema_digest}/schema.pbtxt" in out
    assert f"  model code  staging1_models/wide.py -> {root}/staged/{code_digest}/code/staging1_models/wide.py" in out
    # The steps read them: the schema in ImportSchemaGen, the code through the entrypoint's flag on every step.
    tasks = _tasks(job)
    assert tasks["ImportSchemaGen"]["inputs"]["parameters"]["schema_file"]["runtimeValue"]["constant"] == \
        f"{root}/staged/{schema_digest}/schema.pbtxt"
    containers = [_container(job, name) for name in tasks if _container(job, name)]
    assert {c["args"][0] for c in containers} == {f"{MODEL_CODE_FLAG}={root}/staged/{code_digest}/code"}
    description = job["pipelineSpec"]["pipelineInfo"]["description"]
    assert "step image img:1" in description and f"{root}/staged/{code_digest}/code/staging1_helpers.py" in description

    # The same files again: the same folders, nothing copied. An edited schema: a folder of its own, the rest kept.
    assert cli_main(argv) == 0
    assert "(0 item(s) copied, 3 already there)" in capsys.readouterr().out
    schema = user / "schemas" / "shop" / "schema.pbtxt"
    schema.write_text(schema.read_text() + "\n# curated again\n")
    assert cli_main(argv) == 0
    out = capsys.readouterr().out
    assert "(1 item(s) copied, 2 already there)" in out and schema_digest not in out and code_digest in out
    assert (root / "staged" / schema_digest / "schema.pbtxt").read_text() != schema.read_text()  # the first one kept


def test_the_project_schema_and_model_stage_nothing_and_a_staged_model_cannot_train_on_several_workers(tmp_path,
                                                                                                     monkeypatch):
    from pipeline.dag.kubeflow_runner import compile_job

    compiled = compile_job(load_config(data_root="gs://b/t", serving_dir="/s"), image="i",
                           pipeline_root=str(tmp_path / "root"), output_file=str(tmp_path / "p.json"))
    assert compiled.staging.items == () and not (tmp_path / "root").exists()
    assert "Nothing staged" in compiled.job["pipelineSpec"]["pipelineInfo"]["description"]
    _user_project(tmp_path, monkeypatch, "staging2")
    config = load_config(str(tmp_path / "shop.yaml"), data_root="gs://b/t", serving_dir="/s",
                         resources={"training_workers": 2, "vertex_project": "p"})
    with pytest.raises(CompileError, match=r"train\.model: staging2_models\.wide is staged .* install the module"):
        compile_job(config, image="i", pipeline_root=str(tmp_path / "root"), output_file=str(tmp_path / "q.json"))
    assert not (tmp_path / "root").exists() and not (tmp_path / "q.json").exists()


def test_a_task_of_ones_own_is_staged_with_the_model_code_and_named_when_too_large(tmp_path, monkeypatch):
    from pipeline.config import read_config
    from pipeline.dag.staging import plan_staging

    _user_project(tmp_path, monkeypatch, "staging3")
    (tmp_path / "staging3_tasks.py").write_text("import staging3_helpers  # noqa: F401\n"
                                                "from components.core.tasks import RegressionTask\n\n\n"
                                                "class Mine(RegressionTask):\n    pass\n")
    config = read_config(str(tmp_path / "shop.yaml"), task={"type": "staging3_tasks:Mine"})
    code = plan_staging(config, None, str(tmp_path / "root")).items[-1]
    assert sorted(name for _, name in code.files) == ["code/staging3_helpers.py", "code/staging3_models/__init__.py",
                                                       "code/staging3_models/wide.py", "code/staging3_tasks.py"]
    # the task alone (the schema-driven model is in the image)
    alone = read_config(str(tmp_path / "shop.yaml"), task={"type": "staging3_tasks:Mine"},
                        train={"model": "models.tabular"})
    assert [name for _, name in plan_staging(alone, None, str(tmp_path / "root")).items[-1].files] == [
        "code/staging3_helpers.py", "code/staging3_tasks.py"]
    from pipeline.dag.staging import StagingError
    monkeypatch.setattr("pipeline.dag.staging.MAX_CODE_BYTES", 10)
    with pytest.raises(StagingError, match=r"^task\.type: staging3_tasks brings"):
        plan_staging(alone, None, str(tmp_path / "root"))


def test_a_schema_driven_model_compiles_with_its_schema_staged_under_a_local_pipeline_root(tmp_path, monkeypatch):
    """What the models predict is checked against the user's schema: the staged copy is written only once the
    compile has succeeded."""
    from pipeline.dag.kubeflow_runner import compile_job

    _user_project(tmp_path, monkeypatch, "staging4")
    config = load_config(str(tmp_path / "shop.yaml"), data_root="gs://b/t", serving_dir="/s",
                         train={"model": "models.tabular"}, task={"type": "regression", "label": "fare"})
    compiled = compile_job(config, image="i", pipeline_root=str(tmp_path / "root"), output_file=str(tmp_path / "j.json"))
    schema = compiled.staging.uri("schema")
    assert os.path.isfile(schema) and schema.startswith(str(tmp_path / "root" / "staged"))


def test_the_entrypoint_copies_the_staged_code_and_puts_it_first_on_the_import_path(tmp_path, monkeypatch):
    from pipeline.dag.kfp_entrypoint import model_code_importable, split_model_code

    code = tmp_path / "staged" / "code"
    (code / "pkg_of_mine").mkdir(parents=True)
    (code / "pkg_of_mine" / "__init__.py").write_text("from pkg_of_mine.inner import VALUE\n")
    (code / "pkg_of_mine" / "inner.py").write_text("VALUE = 42\n")
    assert split_model_code(["--model_code=s3://b/c", "--executor_class_path", "x"]) == (
        "s3://b/c", ["--executor_class_path", "x"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    with model_code_importable(str(code)) as local:
        assert sys.path[0] == local and os.environ["PYTHONPATH"] == f"{local}{os.pathsep}/elsewhere"
        import importlib
        assert importlib.import_module("pkg_of_mine").VALUE == 42
    assert not os.path.exists(local)
    for name in ("pkg_of_mine", "pkg_of_mine.inner"):
        sys.modules.pop(name, None)
    with pytest.raises(FileNotFoundError, match="no staged model code"):
        with model_code_importable(str(tmp_path / "empty")):
            pass


# ---------------------------------------------------------------------------- Beam steps on a cluster engine

def _beam_steps(job) -> dict[str, list[str]]:
    """Every compiled step whose executor runs Beam -> the Beam flags TFX's entrypoint hands it (its own flags
    parsed off as TFX's entrypoint parses them)."""
    import importlib
    from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
    from tfx.orchestration.kubeflow.v2.container import kubeflow_v2_run_executor

    steps = {}
    for name in _tasks(job):
        container = _container(job, name)
        if not container:
            continue
        parsed, beam_args = kubeflow_v2_run_executor._parse_flags(container["args"])
        module, _, cls = parsed.executor_class_path.rpartition(".")
        if issubclass(getattr(importlib.import_module(module), cls), BaseBeamExecutor):
            steps[name] = beam_args
    return steps


@pytest.mark.parametrize("flags, added", [
    (["--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/tmp"],
     ["--sdk_container_image=reg/accel:1"]),
    (["--runner=PortableRunner", "--job_endpoint=jobs:8099"],
     ["--sdk_container_image=reg/accel:1", "--environment_type=DOCKER", "--environment_config=reg/accel:1"]),
    (["--runner=FlinkRunner", "--flink_master=flink:8081"],
     ["--sdk_container_image=reg/accel:1", "--environment_type=DOCKER", "--environment_config=reg/accel:1"]),
    (["--runner=FlinkRunner"], ["--sdk_container_image=reg/accel:1"]),  # Flink in the pod: its workers too
    (["--runner=FlinkRunner", "--flink_master=flink:8081", "--environment_type=LOOPBACK"],
     ["--sdk_container_image=reg/accel:1"]),
    (["--runner=SparkRunner", "--spark_master_url=spark://m:7077", "--environment_config=reg/workers:2"],
     ["--sdk_container_image=reg/accel:1", "--environment_type=DOCKER"]),
    (["--runner=DataflowRunner", "--project=p", "--sdk_container_image=reg/workers:2"], []),
    (["--direct_running_mode=multi_processing"], []),
], ids=["dataflow", "portable", "flink_cluster", "flink_in_the_pod", "flink_loopback", "spark_own_environment_image",
        "own_worker_image", "direct"])
def test_every_beam_step_carries_the_worker_image_flags_and_tfx_builds_no_sdist_for_it(tmp_path, flags, added):
    from tfx.utils import dependency_utils

    config = load_config(data_root="gs://b/t", serving_dir="/s", beam_pipeline_args=flags)
    job = compile_kubeflow(config, image="reg/accel:1", pipeline_root="gs://b/r", output_file=str(tmp_path / "p.json"))
    steps = _beam_steps(job)
    assert set(steps) == {"TFRecordIngest", "StatisticsGen", "PrecisionEvaluator"}
    for step, beam_args in steps.items():
        assert beam_args == flags + added, step
    if any(flag.startswith("--runner") for flag in flags):
        # With these flags TFX's Beam executors pass the flags on as they are: no sdist of TFX built per step.
        assert dependency_utils.make_beam_dependency_flags(flags + added) == flags + added
