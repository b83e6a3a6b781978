"""The compiled Kubeflow job runs: every container step through TFX's real entrypoint, artifacts on S3.

An S3-compatible server (moto, on 127.0.0.1) holds the pipeline root, the data and the serving directory.
The job is compiled as for a self-hosted Kubeflow with MinIO, and `kfp_launcher.StepByStepLauncher` (test code
playing KFP's launcher) runs each step's exact compiled command in DAG order. Two runs: span 1 is blessed
and pushed; span 2 warm-starts from span 1's blessed model, is evaluated against it and is checked for
drift against span 1's accepted validation report (two resolver answers that only work when the compiled
queries find our artifacts).
"""
import glob
import os

import numpy as np
import pytest
import tensorflow as tf

from components.core import contract, tasks
from components.atomic_pusher.publish import COMPLETE_MARKER
from pipeline.config import PROJECT_ROOT, load_config
from tests.config_text import taxi_config_text
from pipeline.onboarding.example_data import write_taxi_span
from pipeline.dag.kubeflow_runner import compile_kubeflow
from tests.pipeline.dag.kfp_launcher import StepByStepLauncher
from tests.warm_python import run_warm

pytestmark = pytest.mark.e2e

BUCKET = "kfp-play"
ROOT = f"s3://{BUCKET}/root"
DATA = f"s3://{BUCKET}/data"
SERVING = f"s3://{BUCKET}/serving"
CONTAINER_STEPS = {"TFRecordIngest", "StatisticsGen", "ImportSchemaGen", "ExampleValidator", "ValidationGate",
                   "Trainer", "Fp32BaselineTrainer", "PrecisionEvaluator", "ModelExport", "AtomicPusher"}


@pytest.fixture(scope="module")
def s3(s3_server, tmp_path_factory):
    """The bucket every step reads and writes; credentials reach the steps only through their environment."""
    return s3_server.bucket(BUCKET, tmp_path_factory.mktemp("s3-local"))


def _upload_span(s3, span: int, first_row: int) -> str:
    span_dir, _ = write_taxi_span(str(s3.local / "data"), span=span, max_rows=3000, first_row=first_row,
                                  num_shards=2)
    for name in sorted(os.listdir(span_dir)):
        s3.client.upload_file(os.path.join(span_dir, name), BUCKET, f"data/span-{span}/{name}")
    return span_dir


@pytest.fixture(scope="module")
def play(s3, tmp_path_factory):
    # CPU pods: the FP32 baseline takes the candidate's ModelRun and decides in its own pod whether to train.
    config = load_config(data_root=DATA, serving_dir=SERVING, train={"epochs": 3}, evaluate={"absolute_bar": 0.8},
                         export={"latency_examples": 50},
                         resources={"training": {"accelerator": "", "accelerator_count": 0}},
                         beam_pipeline_args=["--direct_running_mode=in_memory", *s3.beam_args])
    job = compile_kubeflow(config, image="taxi-accel:test", pipeline_root=ROOT,
                           output_file=str(tmp_path_factory.mktemp("kfp") / "pipeline.json"),
                           image_project_root=PROJECT_ROOT)  # the image's /pipeline is this checkout here
    env = {**os.environ, **s3.env, "PYTHONPATH": PROJECT_ROOT, "TF_CPP_MIN_LOG_LEVEL": "1",
           "TMPDIR": str(tmp_path_factory.mktemp("pod-tmp"))}  # the pods' temporary folder, checked below
    return StepByStepLauncher(job, env=env, read=s3.read)


@pytest.fixture(scope="module")
def first_run(s3, play):
    span_dir = _upload_span(s3, span=1, first_row=0)
    return play.run("run-1"), span_dir


@pytest.fixture(scope="module")
def second_run(s3, play, first_run):
    _upload_span(s3, span=2, first_row=3000)
    return play.run("run-2")


def _only(results, task, key):
    artifacts = results[task].outputs[key]
    assert len(artifacts) == 1, (task, key, artifacts)
    return artifacts[0]


def test_the_compiled_spec_is_2_1_and_every_step_runs_our_entrypoint(play):
    assert play.spec["schemaVersion"] == "2.1.0"
    containers = [executor["container"] for executor in play.spec["deploymentSpec"]["executors"].values()
                  if "container" in executor]
    assert len(containers) == len(CONTAINER_STEPS)
    assert {tuple(c["command"]) for c in containers} == {("python", "-m", "pipeline.dag.kfp_entrypoint")}


def test_first_run_every_step_succeeds_on_s3_and_pushes_a_model_that_serves(s3, play, first_run):
    first_run, span_dir = first_run
    assert CONTAINER_STEPS <= set(first_run)
    # The Beam steps ran with the DirectRunner in their pods: none built a copy of TFX to stage.
    assert not glob.glob(os.path.join(play.env["TMPDIR"], "**", "tfx_ephemeral*"), recursive=True)
    for step in CONTAINER_STEPS:
        for artifact in first_run[step].outputs.values():
            assert artifact[0].uri.startswith(f"{ROOT}/"), (step, artifact[0].uri)
            assert s3.keys(artifact[0].uri), f"{step} wrote nothing to {artifact[0].uri}"
    # Nothing blessed or accepted before this run: the resolvers answered with nothing.
    assert first_run["latest_blessed_model_resolver-model-resolver"].outputs[contract.MODEL] == []
    assert first_run["previous_validation_resolver"].outputs[contract.PREVIOUS_VALIDATION_REPORT] == []

    blessing = _only(first_run, "PrecisionEvaluator", contract.BLESSING)
    assert blessing.metadata[contract.BLESSED_PROPERTY] == 1
    assert "BLESSED" in s3.keys(blessing.uri)
    # TFX's entrypoint named the blessed model by its artifact name: what KFP's model resolver queries.
    models = {_only(first_run, trainer, contract.MODEL).name for trainer in ("Trainer", "Fp32BaselineTrainer")}
    assert blessing.metadata["current_model_id"] in models

    evaluation = _only(first_run, "PrecisionEvaluator", contract.EVALUATION)
    report = s3.json(f"{evaluation.uri}/{contract.PRECISION_REPORT_FILE}")
    assert report["blessed"] is True
    # The baseline ran in a pod of its own, after the candidate's, read the candidate's training report from
    # the bucket and did not train the same float32 model again: the candidate is its own baseline.
    candidate_run = _only(first_run, "Trainer", contract.MODEL_RUN)
    candidate_training = s3.json(f"{candidate_run.uri}/{contract.TRAINING_REPORT_FILE}")
    baseline_run = s3.json(f"{_only(first_run, 'Fp32BaselineTrainer', contract.MODEL_RUN).uri}/"
                           f"{contract.TRAINING_REPORT_FILE}")
    if (candidate_training["precision"], candidate_training["xla"]) == ("float32", False):
        assert baseline_run["skipped"] is True and baseline_run["candidate_run"] == candidate_run.uri
        assert set(report["models"]) == {"candidate"} and report["fp32_parity"].startswith("candidate trained")
    else:
        assert set(report["models"]) == {"candidate", "fp32_baseline"}

    exported = _only(first_run, "ModelExport", contract.EXPORTED_MODEL)
    export_report = s3.json(f"{exported.uri}/{contract.EXPORT_REPORT_FILE}")
    assert export_report["exported"] and export_report["recommended"]
    for variant in export_report["variants"].values():
        assert len(s3.read(f"{exported.uri}/{variant['file']}")) == variant["size_bytes"]

    training = s3.json(f"{_only(first_run, 'Trainer', contract.MODEL_RUN).uri}/{contract.TRAINING_REPORT_FILE}")
    examples = _only(first_run, "TFRecordIngest", contract.EXAMPLES)
    assert training["train_examples"] == examples.metadata["train_examples"]

    pushed = _only(first_run, "AtomicPusher", contract.PUSHED_MODEL)
    assert pushed.metadata[contract.PUSHED_PROPERTY] == 1
    destination = pushed.metadata[contract.PUSHED_DESTINATION_PROPERTY]
    assert destination.startswith(f"{SERVING}/")
    files = s3.keys(destination)
    assert {COMPLETE_MARKER, "saved_model.pb", contract.PUSHED_TFLITE_FILE, contract.PUSH_INFO_FILE} <= set(files)
    served = tf.saved_model.load(s3.download(destination))
    records = list(tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(f"{span_dir}/*")), compression_type="GZIP").take(64))
    probabilities = served.signatures[contract.SERVING_SIGNATURE](examples=tf.stack(records))[
        tasks.PROBABILITIES].numpy()
    assert probabilities.shape == (64, 1) and np.all((probabilities >= 0) & (probabilities <= 1))
    assert len(np.unique(probabilities.round(4))) > 10  # a trained model, not a constant


def test_second_run_warm_starts_evaluates_against_and_checks_drift_from_the_first(s3, first_run, second_run):
    first_run, _ = first_run
    blessed_model = _only(first_run, "PrecisionEvaluator", contract.BLESSING).metadata["current_model_id"]
    resolved = _only(second_run, "latest_blessed_model_resolver-model-resolver", contract.MODEL)
    assert resolved.name == blessed_model

    for trainer in ("Trainer", "Fp32BaselineTrainer"):
        model_run = _only(second_run, trainer, contract.MODEL_RUN)
        training = s3.json(f"{model_run.uri}/{contract.TRAINING_REPORT_FILE}")
        if training.get("skipped"):
            continue
        assert training["warm_start"]["applied"] is True, training["warm_start"]
        assert training["warm_start"]["base_model"].startswith(resolved.uri)

    evaluation = _only(second_run, "PrecisionEvaluator", contract.EVALUATION)
    report = s3.json(f"{evaluation.uri}/{contract.PRECISION_REPORT_FILE}")
    assert report["models"]["production"]["uri"] == resolved.uri

    previous = _only(second_run, "previous_validation_resolver", contract.PREVIOUS_VALIDATION_REPORT)
    assert previous.uri == _only(first_run, "ValidationGate", contract.VALIDATION_REPORT).uri
    gate_report = _only(second_run, "ValidationGate", contract.VALIDATION_REPORT)
    validation = s3.json(f"{gate_report.uri}/{contract.VALIDATION_REPORT_FILE}")
    assert validation["drift"]["previous_span"] == 1 and validation["drift"]["splits"]
    assert validation["span"] == 2

    first_pushed = _only(first_run, "AtomicPusher", contract.PUSHED_MODEL)
    first_destination = first_pushed.metadata[contract.PUSHED_DESTINATION_PROPERTY]
    pushed = _only(second_run, "AtomicPusher", contract.PUSHED_MODEL)
    if pushed.metadata[contract.PUSHED_PROPERTY] == 1:
        # A newer version beside the first.
        assert pushed.metadata[contract.PUSHED_DESTINATION_PROPERTY] > first_destination
    assert COMPLETE_MARKER in s3.keys(first_destination)


def test_a_local_run_with_its_artifacts_and_serving_dir_on_s3(s3, taxi_span_root, tmp_path):
    """`python -m pipeline run --pipeline-root s3://... --serving-dir s3://...`: LocalDagRunner with the local
    SQLite MLMD and every artifact on the bucket, the code path of a pod exercised in one process."""
    import sys

    output = tmp_path / "output"
    command = [sys.executable, "-m", "pipeline", "run", "--data", taxi_span_root, "--output", str(output),
               "--pipeline-root", f"s3://{BUCKET}/local-root", "--serving-dir", f"s3://{BUCKET}/local-serving",
               "--config", str(tmp_path / "config.yaml")]
    (tmp_path / "config.yaml").write_text(taxi_config_text(
        "train: {epochs: 3}\nevaluate: {absolute_bar: 0.8}\nexport: {latency_examples: 50}\n"
        f"beam_pipeline_args: [--direct_running_mode=in_memory, {', '.join(s3.beam_args)}]\n"))
    env = {**os.environ, **s3.env, "PYTHONPATH": PROJECT_ROOT}
    result = run_warm(command, cwd=PROJECT_ROOT, env=env, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "blessed: yes" in result.stdout
    pushed_to = next(line.split("pushed to: ", 1)[1] for line in result.stdout.splitlines() if "pushed to: " in line)
    assert pushed_to.startswith(f"s3://{BUCKET}/local-serving/")
    assert {COMPLETE_MARKER, "saved_model.pb", contract.PUSHED_TFLITE_FILE} <= set(s3.keys(pushed_to))
    assert not (output / "pipeline").exists()  # no artifact landed on the local disk
    assert s3.keys(f"s3://{BUCKET}/local-root/Trainer")  # TFX's layout under the bucket root
    status = run_warm([sys.executable, "-m", "pipeline", "status", "--output", str(output)], cwd=PROJECT_ROOT,
                      env=env, timeout=300)
    assert status.returncode == 0 and "complete" in status.stdout and pushed_to.rsplit("/", 1)[1] in status.stdout
