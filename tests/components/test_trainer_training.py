"""Real training with the GPU-aware trainer on CPU (marked `training`: minutes): strategies over logical CPUs
and processes, precision policies, XLA fallback, kill-and-resume, warm start, and the float32 SavedModel of
a mixed-precision model. The rules that need no training are in test_trainer_rules.py."""
import json
import os
import re
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow as tf

from components.core import contract
from components.trainer.callbacks import TrainingDivergedError
from components.trainer.checkpoints import BACKUP_METADATA
from components.trainer.device import (DeviceDescription, Gpu, choose_precision, cpu_without_xla, device_from_json,
                                      xla_candidates)
from components.trainer.probing import build_for_device, in_memory_batches
from components.trainer.train import TrainingJob, set_up
from tests.components.training import settings as _settings, train_here as _train_here
from tests.warm_python import run_warm, start_warm

JOB_SCRIPT = os.path.join(os.path.dirname(__file__), "trainer_job.py")
PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# These jobs train on CPU devices (logical CPUs, one process per worker): a GPU of the machine stays out of them.
CPU_ONLY = {"CUDA_VISIBLE_DEVICES": ""}


def _start_job(files, output, env=None, **spec):
    """Starts trainer_job.py in its own process (a fresh TensorFlow runtime, forked from a warm interpreter:
    tests/warm_python.py), its output going to <output>/job.log; returns the running job (as a Popen)."""
    output.mkdir(parents=True, exist_ok=True)
    spec = {"output": str(output), **files, **spec}
    spec["overrides"] = {"epochs": 3, "batch_size": 64, "input_probe_steps": 20, **spec.get("overrides", {})}
    (output / "job.json").write_text(json.dumps(spec))
    log = str(output / "job.log")
    process = start_warm([sys.executable, JOB_SCRIPT, str(output / "job.json")], cwd=str(output), stdout=log,
                         stderr=log, env={**os.environ, **(env or {})})
    process.log_path = output / "job.log"
    return process


def _finish(process, timeout=300):
    """Waits for a job (killing it past `timeout`). Output: (exit code, its log)."""
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    return process.returncode, process.log_path.read_text()


def _finish_together(processes, timeout=300):
    """Waits for jobs that wait for each other (multi-worker): once one fails, or past `timeout`, the others
    are killed rather than left waiting for it. Output: [(exit code, log)] per job."""
    deadline = time.monotonic() + timeout
    while any(process.poll() is None for process in processes):
        if time.monotonic() > deadline or any(process.poll() not in (None, 0) for process in processes):
            for process in processes:
                if process.poll() is None:
                    process.kill()
        time.sleep(0.2)
    return [_finish(process) for process in processes]


def _report(output):
    return json.loads((output / "run" / contract.TRAINING_REPORT_FILE).read_text())


@pytest.mark.training
def test_mirrored_strategy_over_two_logical_cpus(files, tmp_path):
    code, log = _finish(_start_job(files, tmp_path, env=CPU_ONLY, logical_cpus=2, overrides={"strategy": "mirrored"}))
    assert code == 0, log[-3000:]
    report = _report(tmp_path)
    assert (report["strategy"], report["replicas"]) == ("mirrored", 2)
    settings = _settings()
    assert report["global_batch"] == 2 * settings.batch_size
    assert report["learning_rate"] == pytest.approx(2 * settings.learning_rate)  # linear scaling
    assert report["steps_per_execution"] == 1  # Keras 3 cannot run several steps per call with replicas
    assert report["final_metrics"]["val_auc"] > 0.85
    assert tf.saved_model.contains_saved_model(str(tmp_path / "serving"))


def _free_ports(count):
    """`count` distinct ports that were free a moment ago (all held until each is picked, so none repeats)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("localhost", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


PORT_TAKEN = re.compile(r"Address already in use|Could not start gRPC server")


def _train_two_workers(files, output, attempts=3, **spec):
    """Trains with two trainer_job.py workers on localhost (`spec`: trainer_job.py's, e.g. overrides). A port
    picked free can be taken by another process before its worker binds it: then both workers stop and the
    training starts again on new ports. Output: the worker folders and [(exit code, log)] per worker."""
    for attempt in range(attempts):
        folders = [output / f"attempt-{attempt}" / f"worker-{index}" for index in range(2)]
        workers = [f"localhost:{port}" for port in _free_ports(2)]
        processes = [_start_job(files, folder, env={**CPU_ONLY, "TF_CONFIG": json.dumps(
            {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})}, **spec)
            for index, folder in enumerate(folders)]
        results = _finish_together(processes, timeout=600)  # two TensorFlow processes beside the suite's other worker
        if not any(code and PORT_TAKEN.search(log) for code, log in results):
            break
    return folders, results


@pytest.mark.training
def test_multi_worker_mirrored_strategy_across_two_processes(files, tmp_path):
    # a time budget each worker's clock would end at an interval of its own: not applied with several workers;
    # bagged over folds, with the best intervals' weights averaged: the workers must agree on each average
    folders, results = _train_two_workers(files, tmp_path, overrides={"time_budget_seconds": 0.01, "folds": 2,
                                                                      "average_intervals": 3})
    assert [code for code, _ in results] == [0, 0], "\n-----\n".join(log[-3000:] for _, log in results)
    reports = [json.loads((folder / "returned_report.json").read_text()) for folder in folders]
    assert _report(folders[0]) == reports[0]
    for index, report in enumerate(reports):
        assert (report["strategy"], report["replicas"], report["worker"]) == ("multi_worker_mirrored", 2,
                                                                              f"worker-{index}")
        assert report["device"]["num_workers"] == 2
        # Workers must resume from the same interval: each checkpoints every interval, whatever the spacing.
        assert report["checkpoints_written"] == report["intervals"]
        assert report["time_budget_seconds"] == 0 and report["intervals_run"] == report["intervals"]
    # Gradients are all-reduced every step: both workers end with the same model, hence the same metrics.
    assert reports[0]["final_metrics"] == pytest.approx(reports[1]["final_metrics"], rel=1e-6)
    assert reports[0]["averaged_intervals"] == reports[1]["averaged_intervals"]
    assert reports[0]["averaged_intervals"][0] == reports[0]["best_interval"] >= 1
    assert reports[0]["final_metrics"]["val_auc"] > 0.85
    # Only the chief (worker 0) writes the model, the training report and TensorBoard's logs: in a real job
    # every worker is handed the same folders.
    assert tf.saved_model.contains_saved_model(str(folders[0] / "serving"))
    assert (folders[0] / "run" / "logs").is_dir()
    assert not (folders[1] / "serving").exists() and not (folders[1] / "run").exists()


@pytest.mark.training
def test_killed_training_resumes_from_its_last_checkpoint(files, tmp_path):
    overrides = {"checkpoint_every_steps": 10, "checkpoint_min_seconds": 0, "steps_per_execution": 5, "epochs": 6}
    code, log = _finish(_start_job(files, tmp_path, overrides=overrides, kill_after_interval=2))
    assert code == -9, log[-3000:]  # SIGKILL right after the second checkpoint
    assert not (tmp_path / "run" / contract.TRAINING_REPORT_FILE).exists()
    metadata = json.loads((tmp_path / "checkpoints" / BACKUP_METADATA).read_text())
    assert metadata["epoch"] == 2

    code, log = _finish(_start_job(files, tmp_path, overrides=overrides))
    assert code == 0, log[-3000:]
    report = _report(tmp_path)
    assert report["resumed_from_step"] == 20
    assert report["steps_run"] == report["total_steps"] - 20  # the first 20 steps were not run again
    assert report["final_metrics"]["val_auc"] > 0.85
    assert not (tmp_path / "checkpoints").exists()  # a finished training removes its checkpoints


# A CPU-bound process that ends with the test's process: a suite killed midway (where `finally` does not run)
# leaves no core spinning.
BUSY_WHILE_PARENT_LIVES = "import os, sys\nparent = int(sys.argv[1])\nwhile os.getppid() == parent:\n    pass\n"


@pytest.mark.training
def test_the_same_config_trains_the_same_model_on_an_idle_and_on_a_busy_machine(files, tmp_path):
    """No clock in the plan: with the training settings init writes (bagged over folds, validated every interval,
    the best intervals averaged, no time budget), over fewer epochs and folds, the same data, config and seed give the
    same predictions when the second training runs on a busy machine: a CPU-bound process beside it, and its clocks
    running three times fast (every step it times looks three times slower)."""
    import yaml
    from pipeline.onboarding.project_config import Project

    project = Project("t", str(tmp_path), str(tmp_path / "data"), 3000, "binary", "big_tipper", ["0", "1"],
                           {"float": ["x"]}, {}, "set with --task", "", 64, 40, 1 / 3)
    written = yaml.safe_load(project.config_text())["train"]
    assert written["time_budget_seconds"] == 0
    overrides = {**{key: written[key] for key in ("average_intervals", "schedule", "weight_decay", "learning_rate",
                                                  "time_budget_seconds")},
                 "folds": 3, "epochs": 4, "early_stopping_patience": 2, "checkpoint_min_seconds": 0}
    serialized = tf.constant([record.numpy() for record in
                              tf.data.TFRecordDataset(files["eval_files"][0], compression_type="GZIP")])
    predictions, reports = [], []
    for busy in (False, True):
        burners = [subprocess.Popen([sys.executable, "-c", BUSY_WHILE_PARENT_LIVES, str(os.getpid())])
                   for _ in range(1 if busy else 0)]
        try:
            code, log = _finish(_start_job(files, tmp_path / f"busy-{busy}", overrides=overrides, env=CPU_ONLY,
                                           clock_speed=3 if busy else 1), timeout=900)
        finally:
            for burner in burners:
                burner.kill()
                burner.wait()
        assert code == 0, log[-3000:]
        reports.append(_report(tmp_path / f"busy-{busy}"))
        served = tf.saved_model.load(str(tmp_path / f"busy-{busy}" / "serving"))
        predictions.append(served.signatures["serving_default"](examples=serialized)["probabilities"].numpy())
    idle, busy = reports
    assert busy["fit_seconds"] > 1.5 * idle["fit_seconds"]  # the machine looked busy: the same steps took longer
    for key in ("intervals_run", "best_interval", "averaged_intervals", "steps_run", "history"):
        assert busy[key] == idle[key], key
    assert (predictions[0] == predictions[1]).all()  # bit for bit


SERVE_IN_FRESH_PROCESS = textwrap.dedent("""
    import json, sys
    import numpy as np, tensorflow as tf
    from sklearn.metrics import roc_auc_score
    model_dir, eval_file = sys.argv[1], sys.argv[2]
    serialized = [r.numpy() for r in tf.data.TFRecordDataset(eval_file, compression_type="GZIP")]
    loaded = tf.saved_model.load(model_dir)
    serve = loaded.signatures["serving_default"]
    half = {tf.float16.as_datatype_enum, tf.bfloat16.as_datatype_enum}
    graph = serve.graph.as_graph_def()
    nodes = list(graph.node) + [n for f in graph.library.function for n in f.node_def]
    half_ops = sorted({n.op for n in nodes if any(a.type in half for a in n.attr.values())})
    outputs = serve(examples=tf.constant(serialized))
    labels = loaded.signatures["transform_features"](examples=tf.constant(serialized))["big_tipper"].numpy()
    raw = loaded.signatures["serving_raw"]
    import os, keras, models.taxi
    from components.core import contract
    from components.core.records import model_ready_dir
    from components.core.task_layers import load_keras_model
    model_ready = load_keras_model(os.path.join(model_ready_dir(model_dir), contract.MODEL_READY_FILE))
    features = tf.io.parse_example(tf.constant(serialized), models.taxi.INPUTS)
    ready = model_ready(loaded.signatures["preprocess"](**features)).numpy().reshape(-1)
    print(json.dumps({
        "model_ready_max_diff": float(np.abs(ready - outputs["probabilities"].numpy().reshape(-1)).max()),
        "model_ready_weight_dtypes": sorted({str(w.dtype) for w in model_ready.weights}),
        "input_dtypes": [spec.dtype.name for spec in serve.structured_input_signature[1].values()],
        "output_dtype": outputs["probabilities"].dtype.name,
        "half_precision_ops": half_ops,
        "auc": float(roc_auc_score(labels.reshape(-1), outputs["probabilities"].numpy().reshape(-1))),
        "raw_signature_inputs": sorted(raw.structured_input_signature[1]),
    }))
""")


@pytest.mark.training
@pytest.mark.parametrize("policy, xla", [("mixed_float16", "off"), ("mixed_bfloat16", "on")])
def test_mixed_precision_model_serves_float32_in_a_fresh_process(files, tmp_path, policy, xla):
    report = _train_here(files, tmp_path, precision=policy, xla=xla)
    assert report["precision"] == policy
    if policy == "mixed_float16":
        assert report["loss_scale_history"] and all(scale > 0 for scale in report["loss_scale_history"])
    result = run_warm([sys.executable, "-c", SERVE_IN_FRESH_PROCESS, str(tmp_path / "serving"),
                       files["eval_files"][0]], cwd=PROJECT_ROOT, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served["input_dtypes"] == ["string"] and served["output_dtype"] == "float32"
    assert served["half_precision_ops"] == []  # runs on CPUs without float16/bfloat16 kernels
    # The float32 export is the trained model: same eval AUC as the mixed-precision model had in training.
    assert served["auc"] == pytest.approx(report["final_metrics"]["val_auc"], abs=0.01)
    assert "fare" in served["raw_signature_inputs"] and "tips" not in served["raw_signature_inputs"]
    # The model-ready Keras file beside it (what TFLite converts) is the same float32 model.
    assert served["model_ready_max_diff"] < 1e-5 and served["model_ready_weight_dtypes"] == ["float32"]


@pytest.mark.training
def test_xla_auto_on_this_machine_follows_its_device(files, tmp_path):
    report = _train_here(files, tmp_path, xla="auto", epochs=1)
    device = device_from_json(report["device"])
    if xla_candidates(device, "auto") == ["off"]:  # a CPU: the FP32 baseline would cost more than XLA saves
        assert (report["xla"], report["xla_reason"]) == (False, cpu_without_xla(device))
        assert report["in_memory_examples_per_second"] > 0  # still timed: the input wait needs it
    else:
        assert report["xla_reason"].startswith(("measured on in-memory batches", "training is about"))
    assert report["precision"] == choose_precision(device, xla=report["xla"]).value


def _built_for_device(files, output, device, **overrides):
    """The Trainer's set-up and build_for_device for `device` (None: this machine's), as fit_model runs them, with
    the training settings' `overrides`. Output: (the setup, its training batches, build_for_device's 4-tuple)."""
    job = TrainingJob(settings=_settings(**overrides), serving_model_dir=str(output / "serving"),
                      run_dir=str(output / "run"), checkpoint_dir=str(output / "checkpoints"), **files)
    setup = set_up(job)
    batches = setup.dataset(job.train_files, True, split="train")
    with setup.strategy.scope():
        built = build_for_device(setup.model_module, setup.preprocessing, device or setup.device, setup.settings,
                                 setup.plan, lambda: next(iter(setup.dataset(job.train_files, False, batch_size=8))),
                                 in_memory_batches(batches, setup.settings), False)
    return setup, batches, built


@pytest.mark.training
@pytest.mark.parametrize("min_seconds", [0, 1e9])
def test_on_a_tensor_core_gpu_xla_auto_times_both_candidates_when_training_can_repay_the_compile(files, tmp_path,
                                                                                              min_seconds):
    # The probe as it runs on a described T4 (this CPU computes what the GPU would): both candidates get
    # mixed_float16, and each is timed on the same in-memory batches unless training is too short.
    gpu = DeviceDescription(gpus=(Gpu("Tesla T4", (7, 5)),))
    _, _, (model, precision, xla, rate) = _built_for_device(files, tmp_path, gpu, xla="auto", epochs=1,
                                                            xla_min_training_seconds=min_seconds)
    assert precision.value == "mixed_float16" and rate > 0
    if min_seconds:  # timed without XLA only, and kept
        assert xla.value == "off" and xla.reason.startswith("training is about")
    else:
        timed = re.fullmatch(r"measured on in-memory batches: ([\d,]+) examples/s with XLA \(mixed_float16\), "
                             r"([\d,]+) without \(mixed_float16\)", xla.reason)
        assert timed, xla.reason
        with_xla, without = (float(value.replace(",", "")) for value in timed.groups())
        assert xla.value == ("off" if without > 1.1 * with_xla else "on")
        assert rate == pytest.approx(without if xla.value == "off" else with_xla, rel=0.01)
    assert model.dtype_policy.name == "mixed_float16" and model.output.dtype == "float32"


@pytest.mark.training
@pytest.mark.parametrize("precision", ["float32", "mixed_float16"])  # Adam's slots; the loss scale's too
def test_the_first_training_step_makes_no_variable_so_it_is_traced_once(files, tmp_path, precision):
    """A variable made while TensorFlow traces a step has it trace that step a second time (seconds a trace): the
    built model comes with the optimizer's every variable already made, with no probe having trained it."""
    setup, batches, (model, chosen, _, _) = _built_for_device(files, tmp_path, None, input_probe_steps=0, xla="off",
                                                              precision=precision)
    assert chosen.value == precision
    made_while_tracing = []

    def creator(next_creator, **kwargs):
        if not tf.executing_eagerly():
            made_while_tracing.append(kwargs.get("name"))
        return next_creator(**kwargs)

    with tf.variable_creator_scope(creator), setup.strategy.scope():
        model.fit(batches, steps_per_epoch=setup.settings.steps_per_execution, epochs=1, verbose=0)
    assert made_while_tracing == []


@pytest.mark.training
@pytest.mark.parametrize("input_probe_steps", [20, 0])  # XLA's compile failure met by the timing, or by the check
def test_model_that_xla_cannot_compile_trains_without_xla(files, tmp_path, input_probe_steps):
    report = _train_here(files, tmp_path, model="tests.components.unjittable_model", xla="on", epochs=2,
                         input_probe_steps=input_probe_steps)
    assert report["xla"] is False
    assert "AsString" in report["xla_reason"]
    # The policy this device gets without XLA: float32 on a CPU (bf16 pays only with XLA), mixed_float16 on a
    # Tensor Core GPU. (precision is not set, so it is never "set in the config".)
    assert report["precision"] == choose_precision(device_from_json(report["device"]), xla=False).value
    assert report["final_metrics"]["val_auc"] > 0.8


@pytest.mark.training
def test_gradient_accumulation_trains_and_the_profiler_traces_its_window(files, tmp_path):
    report = _train_here(files, tmp_path, gradient_accumulation_steps=2, xla="off", profile_from_step=5,
                         profile_steps=3)
    assert report["gradient_accumulation_steps"] == 2
    assert report["learning_rate"] == pytest.approx(2 * _settings().learning_rate)
    assert report["final_metrics"]["val_auc"] > 0.85
    traces = tf.io.gfile.glob(str(tmp_path / "run" / "logs" / "train" / "plugins" / "profile" / "*" / "*.xplane.pb"))
    assert traces, list(tmp_path.rglob("*"))


@pytest.mark.training
def test_diverging_training_stops_with_the_step_named(files, tmp_path):
    with pytest.raises(TrainingDivergedError, match=r"at step \d+"):
        _train_here(files, tmp_path, learning_rate=1e38, xla="off", warmup_steps=0)
    assert not (tmp_path / "serving").exists()


@pytest.mark.training
def test_warm_start_continues_from_the_base_model_and_skips_a_base_that_does_not_fit(files, tmp_path):
    from components.trainer.warm_start import load_warm_start
    import models.taxi
    import models.taxi_wide
    base = _train_here(files, tmp_path / "base", xla="off", epochs=2)
    assert base["warm_start"] == {"base_model": "", "applied": False, "reason": "no blessed model yet"}
    base_dir = str(tmp_path / "base" / "serving")

    warm = _train_here(files, tmp_path / "warm", base_model=base_dir, xla="off", epochs=1)
    cold = _train_here(files, tmp_path / "cold", xla="off", epochs=1)
    assert warm["warm_start"] == {"base_model": base_dir, "applied": True, "reason": ""}
    # Same data, same single pass: starting from trained weights, the first pass ends far lower.
    assert warm["history"]["loss"][0] < 0.9 * cold["history"]["loss"][0]
    off = load_warm_start(models.taxi, base_dir, enabled=False)
    assert off.weights is None and off.preprocessing is None and "off in the config" in off.reason

    wider = load_warm_start(models.taxi_wide, base_dir, enabled=True)  # other model code: weights do not fit
    assert wider.weights is None and wider.preprocessing is None and "do not fit" in wider.reason
    missing = load_warm_start(models.taxi_wide, str(tmp_path / "nowhere" / "Format-Serving"), enabled=True)
    assert missing.weights is None and "cannot be loaded" in missing.reason
