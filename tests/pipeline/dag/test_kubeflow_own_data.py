"""A user's own CSV and model module go to Kubeflow on the stock image, with no image of their own.

In a folder outside the project, as a user would: `prepare-data` and `init` on a small CSV (the penguins),
a model module of the user's own beside the config (the schema-driven model under its own name, with a
description of its own), and `compile` with the pipeline root on an S3-compatible server (moto, on
127.0.0.1). The compile stages the curated schema, the config and the module on the pipeline root; the
user's folder is then deleted, and every compiled step runs through the step entrypoint as in
test_kubeflow_dag.py (`kfp_launcher.StepByStepLauncher` plays KFP's launcher), with only this checkout (the
stock image's code) on the import path. A second compile with an edited schema stages it elsewhere, and the
first job still reads the schema it was compiled with.
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from components.core import contract, tasks
from components.atomic_pusher.publish import COMPLETE_MARKER
from pipeline.commands.cli import main as cli_main
from pipeline.config import PROJECT_ROOT
from tests.pipeline.dag.kfp_launcher import StepByStepLauncher

pytestmark = pytest.mark.e2e

BUCKET = "own-data"
ROOT = f"s3://{BUCKET}/root"
DATA = f"s3://{BUCKET}/data/penguins"
SERVING = f"s3://{BUCKET}/serving"
IMAGE = "accel-tfx:stock"
PENGUINS_CSV = os.path.join(PROJECT_ROOT, "examples", "penguins.csv")
MODEL_MODULE = "my_penguin_model"
MODEL_SOURCE = '''"""The schema-driven model under a name of my own, saying so in its description."""
from models import tabular


def configure(schema_path, task_config):
    model = tabular.configure(schema_path, task_config)
    model.DESCRIPTION = "penguins, my way: " + model.DESCRIPTION
    return model
'''
STAGED = re.compile(rf"^  (schema|config|model code) +(\S+) -> ({ROOT}/staged/[0-9a-f]{{16}}/\S+)$", re.MULTILINE)


@pytest.fixture(scope="module")
def s3(s3_server, tmp_path_factory):
    return s3_server.bucket(BUCKET, tmp_path_factory.mktemp("s3-own-data"))


@pytest.fixture(scope="module")
def user(s3, tmp_path_factory):
    """The user's folder after prepare-data, init and their own edits; the span uploaded to the bucket."""
    folder = tmp_path_factory.mktemp("user-penguins")
    assert not str(folder).startswith(PROJECT_ROOT + os.sep)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        assert cli_main(["prepare-data", "--csv", PENGUINS_CSV, "--data", "data/penguins"]) == 0
        assert cli_main(["init", "--data", "data/penguins", "--label", "species"]) == 0
    span = folder / "data" / "penguins" / "span-1"
    for name in sorted(os.listdir(span)):
        s3.client.upload_file(str(span / name), BUCKET, f"data/penguins/span-1/{name}")
    (folder / f"{MODEL_MODULE}.py").write_text(MODEL_SOURCE)
    config = (folder / "penguins.yaml").read_text()
    config = re.sub(r"model: models\.tabular.*", f"model: {MODEL_MODULE}", config)
    config = re.sub(r"epochs: \d+.*", "epochs: 15", config)  # a small table: few epochs are plenty
    config = re.sub(r"early_stopping_patience: \d+.*", "early_stopping_patience: 5", config)
    (folder / "penguins.yaml").write_text(
        config + f"beam_pipeline_args: [--direct_running_mode=in_memory, {', '.join(s3.beam_args)}]\n")
    return folder


def _compile(folder, s3, output) -> tuple[str, dict]:
    """`python -m pipeline compile` in the user's folder, as the user types it. Output: what it printed and
    the job it wrote."""
    result = subprocess.run(
        [sys.executable, "-m", "pipeline", "compile", "--config", "penguins.yaml", "--image", IMAGE,
         "--pipeline-root", ROOT, "--data", DATA, "--serving-dir", SERVING, "--output", str(output)],
        cwd=folder, env={**os.environ, **s3.env}, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout, json.loads(output.read_text())


@pytest.fixture(scope="module")
def compiled(user, s3, tmp_path_factory):
    """Two compiles, the second after an edit of the curated schema; then the user's folder is deleted."""
    jobs = tmp_path_factory.mktemp("jobs")
    first_out, first_job = _compile(user, s3, jobs / "first.json")
    print(first_out)  # the staged-files listing, as the user sees it
    schema = user / "schemas" / "penguins" / "schema.pbtxt"
    first_schema = schema.read_text()
    schema.write_text(first_schema.replace("threshold: 0.3", "threshold: 0.35", 1))  # a drift bar loosened
    second_out, second_job = _compile(user, s3, jobs / "second.json")
    originals = {"schema": first_schema, "edited schema": schema.read_text(),
                 "config": (user / "penguins.yaml").read_text(), "model code": MODEL_SOURCE}
    shutil.rmtree(user)
    return first_out, first_job, second_out, second_job, originals


@pytest.fixture(scope="module")
def run(compiled, s3, tmp_path_factory):
    _, first_job, _, _, _ = compiled
    env = {**os.environ, **s3.env, "PYTHONPATH": PROJECT_ROOT, "TF_CPP_MIN_LOG_LEVEL": "1",
           "TMPDIR": str(tmp_path_factory.mktemp("pod-tmp"))}  # the stock image's code only: no user folder
    return StepByStepLauncher(first_job, env=env, read=s3.read).run("run-1")


def _only(results, task, key):
    artifacts = results[task].outputs[key]
    assert len(artifacts) == 1, (task, key, artifacts)
    return artifacts[0]


def _staged(out: str) -> dict[str, str]:
    """compile's listing: what -> staged URI."""
    return {what: uri for what, _, uri in STAGED.findall(out)}


def _schema_file(job) -> str:
    tasks_ = job["pipelineSpec"]["root"]["dag"]["tasks"]
    return tasks_["ImportSchemaGen"]["inputs"]["parameters"]["schema_file"]["runtimeValue"]["constant"]


def test_compile_stages_the_schema_config_and_module_by_content_and_lists_them(s3, compiled):
    first_out, first_job, second_out, second_job, originals = compiled
    staged = _staged(first_out)
    assert set(staged) == {"schema", "config", "model code"}, first_out
    assert staged["model code"].endswith(f"/code/{MODEL_MODULE}.py")
    for what, uri in staged.items():
        assert s3.read(uri).decode() == originals[what], what  # the user's bytes, read back from the bucket
        assert uri in first_job["pipelineSpec"]["pipelineInfo"]["description"]
    assert _schema_file(first_job) == staged["schema"]
    code_folder = staged["model code"].rsplit("/", 1)[0]
    for executor in first_job["pipelineSpec"]["deploymentSpec"]["executors"].values():
        if "container" in executor:
            assert executor["container"]["args"][0] == f"--model_code={code_folder}"

    # The edited schema: a folder of its own; the module and config, unchanged, keep theirs.
    second = _staged(second_out)
    assert second["schema"] != staged["schema"] and _schema_file(second_job) == second["schema"]
    assert s3.read(second["schema"]).decode() == originals["edited schema"]
    assert (second["model code"], second["config"]) == (staged["model code"], staged["config"])
    assert "(1 item(s) copied, 2 already there)" in second_out
    assert _schema_file(first_job) == staged["schema"] and s3.read(staged["schema"]).decode() == originals["schema"]


def test_every_step_runs_from_the_staged_files_with_the_users_folder_gone(s3, compiled, run):
    _, _, _, _, originals = compiled
    # ImportSchemaGen read the schema the first job was compiled with, not the one edited after.
    schema = _only(run, "ImportSchemaGen", contract.SCHEMA)
    assert s3.read(f"{schema.uri}/schema.pbtxt").decode() == originals["schema"]
    # The Trainer imported the user's module by its own name from the staged copy.
    training = s3.json(f"{_only(run, 'Trainer', contract.MODEL_RUN).uri}/{contract.TRAINING_REPORT_FILE}")
    assert training["model_description"].startswith("penguins, my way: ")

    blessing = _only(run, "PrecisionEvaluator", contract.BLESSING)
    assert blessing.metadata[contract.BLESSED_PROPERTY] == 1
    pushed = _only(run, "AtomicPusher", contract.PUSHED_MODEL)
    assert pushed.metadata[contract.PUSHED_PROPERTY] == 1
    destination = pushed.metadata[contract.PUSHED_DESTINATION_PROPERTY]
    assert destination.startswith(f"{SERVING}/")
    assert {COMPLETE_MARKER, "saved_model.pb", contract.PUSHED_TFLITE_FILE} <= set(s3.keys(destination))

    # The served model scores the CSV's own rows (as prepare-data wrote them to the bucket).
    served = tf.saved_model.load(s3.download(destination))
    span = s3.download(f"{DATA}/span-1")
    records = list(tf.data.TFRecordDataset(sorted(tf.io.gfile.glob(f"{span}/*.gz")), compression_type="GZIP"))
    species = [tf.train.Example.FromString(record.numpy()).features.feature["species"].bytes_list.value[0].decode()
               for record in records]
    scores = served.signatures[contract.SERVING_SIGNATURE](examples=tf.stack(records))[tasks.SCORES].numpy()
    classes = ["Adelie", "Chinstrap", "Gentoo"]
    assert scores.shape == (344, 3) and np.allclose(scores.sum(axis=1), 1.0, atol=1e-3)
    accuracy = np.mean([classes[index] == truth for index, truth in zip(scores.argmax(axis=1), species)])
    assert accuracy > 0.9, accuracy
