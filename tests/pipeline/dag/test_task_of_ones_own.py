"""A task of one's own from the command line: the 0.9 quantile of a value (tests/pipeline/dag/quantile_task.py,
a subclass of Task itself, its metric, trivial predictor, TFMA metrics and scoring its own), in a file beside
the user's config as a user writes it. `python -m pipeline` prepare-data, init --task quantile_task:QuantileTask
and run: the real DAG trains the schema-driven model with the task's head and loss, gates it on the pinball
loss against the eval split's own 0.9 quantile, exports it with a device model and pushes it; the Kubeflow
compile stages the task's file with the pipeline. Nothing in the project names the task."""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from pipeline.config import PROJECT_ROOT
from tests.warm_python import run_warm

pytestmark = pytest.mark.e2e

TASK = "quantile_task:QuantileTask"
QUANTILE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "quantile_task.py")


def _table(rows: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Waiting minutes: the mean rises with the temperature, the spread is four times larger at weekends, so
    the 0.9 quantile is far above the mean there and a model must learn both."""
    rng = np.random.default_rng(seed)
    temperature = rng.uniform(-5.0, 30.0, rows)
    weekday = rng.choice(["mon", "tue", "wed", "thu", "fri", "sat", "sun"], rows)
    spread = np.where(np.isin(weekday, ["sat", "sun"]), 4.0, 1.0)
    minutes = 10.0 + 0.5 * temperature + spread * rng.normal(0.0, 1.0, rows)
    return temperature, weekday, minutes


def _python_m_pipeline(folder, *argv, timeout=1500) -> subprocess.CompletedProcess:
    """`python -m pipeline ARGV` in the user's folder, the project on the import path as installed (forked from a
    warm interpreter: tests/warm_python.py)."""
    env = {**os.environ, "PYTHONPATH": PROJECT_ROOT}
    return run_warm([sys.executable, "-m", "pipeline", *argv], cwd=str(folder), env=env, timeout=timeout)


@pytest.fixture(scope="module")
def quantile_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("waiting")
    shutil.copy(QUANTILE_FILE, folder / "quantile_task.py")  # the user's own file, beside the config
    temperature, weekday, minutes = _table(3000, seed=0)
    lines = ["temperature,weekday,minutes"] + [f"{t:.2f},{d},{m:.3f}" for t, d, m in zip(temperature, weekday, minutes)]
    (folder / "waiting.csv").write_text("\n".join(lines) + "\n")
    steps = [("prepare-data", "--csv", "waiting.csv", "--data", "data/waiting"),
             ("init", "--data", "data/waiting", "--label", "minutes", "--task", TASK),
             ("run", "--config", "waiting.yaml")]
    results = []
    for argv in steps:
        results.append(_python_m_pipeline(folder, *argv))
        if results[-1].returncode:
            break
    return {"folder": folder, "results": results}


def test_the_dag_trains_gates_exports_and_pushes_a_task_named_by_its_module_and_class(quantile_run):
    results = quantile_run["results"]
    last = results[-1]
    assert [result.returncode for result in results] == [0, 0, 0], last.stdout[-3000:] + last.stderr[-3000:]
    init, run = results[1].stdout, results[2].stdout
    assert f"task: {TASK} (set with --task)" in init
    config = (quantile_run["folder"] / "waiting.yaml").read_text()
    assert f"type: {TASK}" in config and "label_transform" not in config
    assert "weight_decay: 0.0003" in config  # a task the defaults table does not list takes its fallback row
    assert f"training: {TASK}" in run
    assert "beats_trivial: candidate pinball_loss" in run and "blessed: yes" in run, run
    report = _one(quantile_run["folder"], "precision_report.json")
    assert report["task"] == TASK and report["primary_metric"] == "pinball_loss"
    assert "the eval split's 0.9 quantile" in report["trivial_predictor"]
    overall = report["metrics"]["overall"]["candidate"]  # TFMA's metrics, and the pinball loss scored beside them
    assert {"mean_absolute_error", "pinball_loss"} <= set(overall) and overall["pinball_loss"] > 0
    export = _one(quantile_run["folder"], "export_report.json")
    assert export["primary_metric"] == "pinball_loss" and "pinball_loss" in export["savedmodel"]
    trained = [report for report in _every(quantile_run["folder"], "training_report.json") if not report.get("skipped")]
    assert trained and all("pinball loss of the 0.9 quantile" in json.dumps(report) for report in trained)


def test_the_pushed_model_serves_the_quantile_and_its_device_model_agrees(quantile_run):
    run = quantile_run["results"][-1].stdout
    pushed = next(line.split("pushed to: ", 1)[1] for line in run.splitlines() if "pushed to: " in line)
    serving = tf.saved_model.load(pushed).signatures["serving_raw"]
    assert set(serving.structured_outputs) == {"predictions"}
    temperature, weekday, minutes = _table(4000, seed=1)  # records the model never saw
    served = serving(temperature=tf.constant(temperature, tf.float32),
                     weekday=tf.constant(weekday.astype(bytes)))["predictions"].numpy().reshape(-1)
    weekend = np.isin(weekday, ["sat", "sun"])
    for part in (weekend, ~weekend):  # about nine in ten below the prediction, at weekends and in the week
        assert 0.8 < np.mean(minutes[part] <= served[part]) < 0.97
    # the same temperature: a weekend's 0.9 quantile lies higher than a weekday's (1.28 x 3 minutes apart)
    same = {day: serving(temperature=tf.constant([15.0]), weekday=tf.constant([day]))["predictions"].numpy()[0, 0]
            for day in (b"sun", b"tue")}
    assert same[b"sun"] - same[b"tue"] > 2.0

    from ai_edge_litert.interpreter import Interpreter
    runner = Interpreter(model_path=os.path.join(pushed, "model.tflite")).get_signature_runner()
    device = np.array([runner(temperature=temperature[i:i + 1].astype(np.float32),
                              weekday=weekday[i:i + 1].astype(bytes))["predictions"][0, 0] for i in range(50)])
    assert device == pytest.approx(served[:50], rel=0.05, abs=0.2)


def test_the_kubeflow_compile_stages_the_tasks_file_for_every_step(quantile_run, tmp_path):
    if [result.returncode for result in quantile_run["results"]] != [0, 0, 0]:
        pytest.skip("the run failed")
    root = tmp_path / "root"
    result = _python_m_pipeline(quantile_run["folder"], "compile", "--config", "waiting.yaml", "--image", "img:1",
                                "--pipeline-root", str(root), "--data", "gs://b/d", "--serving-dir", "gs://b/s",
                                "--output", str(tmp_path / "job.json"), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if "model code" in line)
    assert line.split()[2] == "quantile_task.py" and line.endswith("/code/quantile_task.py")
    code = line.split(" -> ")[1].rsplit("/", 1)[0]
    assert (root / os.path.relpath(code, str(root)) / "quantile_task.py").read_text() == open(QUANTILE_FILE).read()
    job = json.loads((tmp_path / "job.json").read_text())
    executors = job["pipelineSpec"]["deploymentSpec"]["executors"].values()
    arguments = [executor["container"]["args"] for executor in executors if "container" in executor]
    assert arguments and all(args[0] == f"--model_code={code}" for args in arguments)
    settings = json.dumps(job)
    assert TASK in settings  # the steps' settings name the task; the entrypoint puts its file on the import path


def _every(folder, name: str) -> list[dict]:
    """Every JSON file `name` of the run, oldest first."""
    paths = sorted((os.path.join(root, file) for root, _, files in os.walk(folder) for file in files if file == name),
                   key=os.path.getmtime)
    assert paths, name
    return [json.load(open(path, encoding="utf-8")) for path in paths]


def _one(folder, name: str) -> dict:
    """The JSON file `name` of the run (the newest, should there be several)."""
    return _every(folder, name)[-1]
