"""A task of one's own, defined in this file alone: counts (whole numbers >= 0) with a Poisson loss and a log
link. Registered by name, it goes through the user's three commands (prepare-data, init --task count, run)
and the real DAG trains the schema-driven model with its head and loss, gates it on its metric, exports it
with a device model and pushes it; nothing else in the project names it."""
import contextlib
import io
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from components.core import tasks
from pipeline.commands.cli import main as cli_main

pytestmark = pytest.mark.e2e


class CountTask(tasks.RegressionTask):
    """Counts: a Poisson loss on a log-linked rate; scored, gated and served as a regression (MAE)."""
    name = "count"
    head_name = "rate"

    def label_problem(self, kind, distinct, whole):
        return "" if kind == "int" else "holds no whole numbers; a count label holds 0, 1, 2, ..."

    def invalid_labels(self, labels, classes):
        labels = np.asarray(labels, np.float64).reshape(-1)
        return ~np.isfinite(labels) | (labels < 0) | (labels != np.round(labels))

    def check_labels(self, labels, classes, where):
        bad = self.invalid_labels(labels, classes)
        if bad.any():
            raise tasks.TaskError(f"{where}: {int(bad.sum())} label(s) are not counts (whole numbers >= 0)")

    def propose_settings(self, label_numbers):
        return {}  # the log link is the head's own: no label transform

    def output_layer(self, training_labels, name):
        return keras.layers.Activation("exponential", dtype="float32", name=name)

    def training_loss(self):
        return keras.losses.Poisson()

    def head_description(self):
        return "; Poisson loss, log link"


def _counts_csv(path, rows: int = 3000, seed: int = 0) -> None:
    """Visits per day, Poisson with a rate set by a number and a category."""
    rng = np.random.default_rng(seed)
    temperature = rng.uniform(-5.0, 30.0, rows)
    weekday = rng.choice(["mon", "tue", "wed", "thu", "fri", "sat", "sun"], rows)
    rate = np.exp(0.3 + 0.06 * temperature + np.where(np.isin(weekday, ["sat", "sun"]), 0.8, 0.0))
    visits = rng.poisson(rate)
    lines = ["temperature,weekday,visits"] + [f"{t:.2f},{d},{v}" for t, d, v in zip(temperature, weekday, visits)]
    path.write_text("\n".join(lines) + "\n")


@pytest.fixture(scope="module")
def count_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("counts")
    _counts_csv(folder / "visits.csv")
    out, err = io.StringIO(), io.StringIO()  # the run's log handlers outlive a capture fixture
    tasks.register_task(CountTask())
    try:
        with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            patch.chdir(folder)
            codes = [cli_main(["prepare-data", "--csv", "visits.csv", "--data", "data/visits"]),
                     cli_main(["init", "--data", "data/visits", "--label", "visits", "--task", "count"]),
                     cli_main(["run", "--config", "visits.yaml"])]
    finally:
        del tasks.TASKS[CountTask.name]  # the other tests see the shipped tasks only
    return {"folder": folder, "codes": codes, "out": out.getvalue(), "err": err.getvalue()}


def test_the_dag_trains_gates_exports_and_pushes_a_task_defined_in_a_test_file(count_run):
    out = count_run["out"]
    assert count_run["codes"] == [0, 0, 0], count_run["err"][-3000:]
    assert "task: count (set with --task)" in out and "training: count" in out, out
    assert "Poisson loss, log link" in out or "Poisson" in _training_report(count_run["folder"])
    assert "beats_trivial: candidate mean_absolute_error" in out and "blessed: yes" in out, out
    config = (count_run["folder"] / "visits.yaml").read_text()
    assert "type: count" in config and "label_transform" not in config


def test_the_pushed_count_model_serves_positive_rates_and_its_device_model_agrees(count_run):
    pushed = next(line.split("pushed to: ", 1)[1] for line in count_run["out"].splitlines() if "pushed to: " in line)
    serving = tf.saved_model.load(pushed).signatures["serving_raw"]
    assert set(serving.structured_outputs) == {"predictions"}
    temperature = np.array([-5.0, 10.0, 30.0, 30.0], np.float32)
    weekday = np.array([b"mon", b"mon", b"mon", b"sun"])
    arguments = {"temperature": temperature, "weekday": weekday}  # valid argument names: the columns' own
    served = serving(**arguments)["predictions"].numpy().reshape(-1)
    assert (served > 0).all() and served[0] < served[1] < served[2] < served[3], served  # the rate the data has

    from ai_edge_litert.interpreter import Interpreter
    runner = Interpreter(model_path=os.path.join(pushed, "model.tflite")).get_signature_runner()
    device = np.array([runner(**{name: value[i:i + 1] for name, value in arguments.items()})["predictions"][0, 0]
                       for i in range(len(temperature))])
    assert device == pytest.approx(served, rel=0.05)


def _training_report(folder) -> str:
    reports = [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names
               if name == "training_report.json"]
    return "".join(open(path, encoding="utf-8").read() for path in reports)
