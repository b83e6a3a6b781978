"""The Trainer's rules that need no real training: the training plan and learning-rate schedule, the
custom_config at the executor boundary, the chief, checkpoint repair and spacing, the FP32 baseline that is
not trained twice, and a model whose labels or output do not fit its task (stopped before training).
Real training lives in test_trainer_training.py."""
import dataclasses
import json
import re

import keras
import pytest
import tensorflow as tf

from components.core import contract
from components.core.records import TrainingReport
from components.trainer.checkpoints import BACKUP_METADATA, BACKUP_WEIGHTS, checkpointed_interval, repair_checkpoint
from components.trainer.distribution import is_chief, worker_task
from components.trainer.plan import (VALIDATION_COST, WarmupSchedule, cosine_steps, learning_rate_schedule,
                                     training_plan, within_budget)
from pipeline.config import ConfigError, load_config
from tests.components.training import settings as _settings, train_here as _train_here


def test_training_plan_scales_batch_and_learning_rate_and_rounds_intervals():
    settings = _settings(batch_size=100, learning_rate=0.01, epochs=2, steps_per_execution=8,
                         gradient_accumulation_steps=3, checkpoint_every_steps=0)
    plan = training_plan(train_examples=1000, settings=settings, replicas=4)
    assert plan.global_batch == 400 and plan.gradient_accumulation_steps == 3
    assert plan.learning_rate == pytest.approx(0.01 * 4 * 3)
    # 3 steps per pass (ceil 1000/400), rounded up to whole executions of 8 steps; 2 passes = 6 steps.
    assert plan.steps_per_interval == 8 and plan.intervals == 1 and plan.total_steps == 8
    plan = training_plan(train_examples=10_000, settings=dataclasses.replace(settings, checkpoint_every_steps=20),
                         replicas=1)
    assert plan.steps_per_interval == 24 and plan.total_steps >= 2 * 100


def test_custom_config_becomes_the_train_config_and_keys_its_checkpoints():
    """The Trainer's custom_config (its settings record, the checkpoint root, the code fingerprint and TFX's
    Vertex AI keys) is read back into the record, its section a TrainConfig; an unknown key is an error."""
    from components.core.tasks import PredictionTarget
    from components.settings import StepSettings, TaskConfig
    from components.trainer.checkpoints import checkpoint_dir_for
    from components.trainer.run_fn import step_settings_from

    settings = _settings(batch_size=32)
    record = StepSettings(settings, TaskConfig(type="regression", label="fare"), settings.model,
                          PredictionTarget("fare", "regression"))
    custom_config = {contract.SETTINGS: record.to_json(), contract.CHECKPOINT_ROOT: "/ckpt",
                     contract.CODE_FINGERPRINT: "abc123", "ai_platform_training_args": {"project": "p"}}
    assert step_settings_from(custom_config) == (record, "/ckpt", "abc123")
    misspelt = record.to_json().replace('"batch_size"', '"batch_sise"')
    with pytest.raises(ValueError, match="Trainer settings: unknown TrainConfig setting.*batch_sise"):
        step_settings_from({**custom_config, contract.SETTINGS: misspelt})

    # Only a restart of the same job (same data, settings and code) finds the same checkpoint directory.
    key = checkpoint_dir_for("/ckpt", ["b", "a"], settings, "abc123")
    assert key.startswith("/ckpt/") and key == checkpoint_dir_for("/ckpt", ["a", "b"], settings, "abc123")
    assert len({key, checkpoint_dir_for("/ckpt", ["a"], settings, "abc123"),
                checkpoint_dir_for("/ckpt", ["a", "b"], dataclasses.replace(settings, epochs=4), "abc123"),
                checkpoint_dir_for("/ckpt", ["a", "b"], settings, "def456")}) == 4


def test_warmup_rises_linearly_then_stays_at_the_peak():
    schedule = WarmupSchedule(0.1, warmup_steps=10)
    values = [float(schedule(step)) for step in (0, 4, 9, 50)]
    assert values == pytest.approx([0.01, 0.05, 0.1, 0.1])
    assert float(WarmupSchedule(0.1, 0)(0)) == pytest.approx(0.1)


def test_a_cosine_schedule_falls_from_the_peak_after_the_warmup_to_zero_at_the_last_update():
    settings = _settings(warmup_steps=10, schedule="cosine", gradient_accumulation_steps=2, learning_rate=0.1)
    plan = training_plan(train_examples=2560, settings=dataclasses.replace(settings, epochs=1), replicas=1)
    schedule = learning_rate_schedule(plan, settings)
    updates = plan.total_steps // 2  # the optimizer steps once per two batches
    values = [float(schedule(step)) for step in range(updates + 5)]
    assert values[9] == pytest.approx(plan.learning_rate)
    assert values[10 + (updates - 10) // 2] == pytest.approx(plan.learning_rate / 2, rel=0.1)
    assert all(later <= earlier + 1e-9 for earlier, later in zip(values[9:], values[10:]))
    assert values[updates] == pytest.approx(0.0, abs=1e-9) and values[-1] == pytest.approx(0.0, abs=1e-9)
    constant = learning_rate_schedule(plan, dataclasses.replace(settings, schedule="constant"))
    assert float(constant(updates)) == pytest.approx(plan.learning_rate)


def test_a_time_budget_keeps_the_intervals_that_fit_it_and_the_cosine_then_ends_with_the_last():
    settings = _settings(warmup_steps=0, schedule="cosine", learning_rate=0.1, time_budget_seconds=10.0)
    plan = training_plan(train_examples=2560, settings=dataclasses.replace(settings, epochs=20), replicas=1)
    # an interval: 2,560 examples trained and 1,000 validated (at VALIDATION_COST) at 1,000 examples/s
    seconds = (2560 + VALIDATION_COST * 1000) / 1000
    cut = within_budget(plan, settings, 1000.0, 1000)
    assert cut.intervals == int(10 // seconds) == 3 and cut.total_steps == 3 * plan.steps_per_interval
    assert within_budget(plan, settings, 100_000.0, 1000) == plan  # a device fast enough: all 20
    assert within_budget(plan, settings, 0.0, 1000) == plan  # not measured: the hard stop alone
    assert within_budget(plan, dataclasses.replace(settings, time_budget_seconds=0), 1.0, 0) == plan
    schedule = learning_rate_schedule(plan, settings)
    schedule.shorten(cosine_steps(cut, settings))
    assert float(schedule(cut.total_steps)) == pytest.approx(0.0, abs=1e-9)
    assert float(schedule(cut.total_steps // 2)) == pytest.approx(plan.learning_rate / 2, rel=0.05)


def test_chief_is_the_chief_task_or_worker_zero():
    workers = {"cluster": {"worker": ["a:1", "b:2"]}}
    assert is_chief("") and worker_task("") == ("chief", 0)
    assert is_chief(json.dumps({**workers, "task": {"type": "worker", "index": 0}}))
    assert not is_chief(json.dumps({**workers, "task": {"type": "worker", "index": 1}}))
    with_chief = {"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}
    assert not is_chief(json.dumps(with_chief))


@pytest.mark.parametrize("key, value", [("strategy", "horovod"), ("precision", "int8"), ("xla", "maybe"),
                                        ("steps_per_execution", 0), ("gradient_accumulation_steps", 0)])
def test_config_rejects_unknown_training_choices(key, value):
    with pytest.raises(ConfigError, match=f"train.{key}"):
        load_config(train={key: value})


def test_config_takes_one_way_to_validate_folds_or_a_validation_share():
    assert load_config(train={"folds": 4, "time_budget_seconds": 60}).train.folds == 4
    with pytest.raises(ConfigError, match="train.folds .* train.validation_share"):
        load_config(train={"folds": 4, "validation_share": 0.15})
    with pytest.raises(ConfigError, match="train.time_budget_seconds"):
        load_config(train={"time_budget_seconds": -1})


def test_a_checkpoint_cut_off_by_a_kill_is_repaired_from_the_previous_one_or_dropped(tmp_path):
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    weights = checkpoint / BACKUP_WEIGHTS
    model.save_weights(str(weights))
    whole = weights.read_bytes()
    (checkpoint / BACKUP_METADATA).write_text('{"epoch": 1, "batch": 0}')
    assert repair_checkpoint(str(checkpoint)) == "intact"
    assert repair_checkpoint(str(checkpoint / "never-written")) == "intact"  # no checkpoint yet: nothing to do

    # Killed while writing interval 3's weights: interval 2's pair sits in .bkp.
    (checkpoint / f"{BACKUP_WEIGHTS}.bkp").write_bytes(whole)
    (checkpoint / f"{BACKUP_METADATA}.bkp").write_text('{"epoch": 2, "batch": 0}')
    (checkpoint / BACKUP_METADATA).write_text('{"epoch": 2, "batch": 0}')
    weights.write_bytes(whole[:96])
    assert repair_checkpoint(str(checkpoint)) == "restored previous"
    assert weights.read_bytes() == whole and checkpointed_interval(str(checkpoint)) == 2
    model.load_weights(str(weights))

    # Killed while writing the very first checkpoint: nothing to fall back on, so it is dropped.
    for name in (f"{BACKUP_WEIGHTS}.bkp", f"{BACKUP_METADATA}.bkp", BACKUP_METADATA):
        (checkpoint / name).unlink()
    weights.write_bytes(whole[:96])
    assert repair_checkpoint(str(checkpoint)) == "dropped"
    assert not checkpoint.exists() and checkpointed_interval(str(checkpoint)) == 0


def test_a_kill_during_the_metadata_write_falls_back_to_the_previous_checkpoint_or_starts_over(tmp_path):
    """Keras writes the weights, then training_metadata.json: a kill in between leaves new weights beside a
    truncated JSON. The previous pair (.bkp) is restored; without one the checkpoint is dropped."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    checkpoint = tmp_path / "checkpoint"
    checkpoint.mkdir()
    weights, metadata = checkpoint / BACKUP_WEIGHTS, checkpoint / BACKUP_METADATA
    model.save_weights(str(weights))  # interval 2's pair, copied to .bkp as Keras does before the next one
    (checkpoint / f"{BACKUP_WEIGHTS}.bkp").write_bytes(weights.read_bytes())
    (checkpoint / f"{BACKUP_METADATA}.bkp").write_text('{"epoch": 2, "batch": 0}')
    model.layers[0].kernel.assign(model.layers[0].kernel + 1.0)
    model.save_weights(str(weights))  # interval 3's weights, whole...
    metadata.write_text('{"epoch": 3, "ba')  # ...and its metadata cut off by the kill

    assert repair_checkpoint(str(checkpoint)) == "restored previous"
    assert checkpointed_interval(str(checkpoint)) == 2
    assert weights.read_bytes() == (checkpoint / f"{BACKUP_WEIGHTS}.bkp").read_bytes()
    model.load_weights(str(weights))

    for name in (f"{BACKUP_WEIGHTS}.bkp", f"{BACKUP_METADATA}.bkp"):  # the very first checkpoint: nothing before it
        (checkpoint / name).unlink()
    metadata.write_text("")
    assert repair_checkpoint(str(checkpoint)) == "dropped"
    assert not checkpoint.exists() and checkpointed_interval(str(checkpoint)) == 0

    checkpoint.mkdir()  # killed after the first weights, before any metadata: dropped too
    model.save_weights(str(weights))
    assert repair_checkpoint(str(checkpoint)) == "dropped" and checkpointed_interval(str(checkpoint)) == 0


@pytest.mark.parametrize("min_seconds, written", [(0, 4), (3600, 0)])
def test_checkpoints_are_spaced_by_min_seconds(tmp_path, min_seconds, written):
    """An interval's checkpoint is written only once `checkpoint_min_seconds` passed since the last one."""
    from components.trainer.callbacks import SpacedBackupAndRestore

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    checkpoints = SpacedBackupAndRestore(str(tmp_path / "backup"), min_seconds)
    seen = []  # what a kill after each interval would find on disk
    record = keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: seen.append(
        json.loads((tmp_path / "backup" / BACKUP_METADATA).read_text())["epoch"]
        if (tmp_path / "backup" / BACKUP_METADATA).exists() else None))
    data = tf.data.Dataset.from_tensors((tf.ones([4, 2]), tf.ones([4, 1]))).repeat()
    model.fit(data, steps_per_epoch=2, epochs=4, callbacks=[checkpoints, record], verbose=0)
    assert checkpoints.checkpoints_written == written
    assert seen == ([1, 2, 3, 4] if written else [None] * 4)


def test_the_fp32_baseline_is_not_trained_again_when_the_candidate_trained_in_plain_float32(tmp_path):
    """The baseline reads the candidate's training report: the same float32 training twice would compare
    training noise, not precision; with mixed precision or XLA in the candidate, the baseline trains."""
    from components.trainer.run_fn import same_numerics_as_candidate, write_skipped_baseline

    baseline = load_config(train={"precision": "float32", "xla": "off"}).train
    candidate_run = tmp_path / "candidate_run"
    candidate_run.mkdir()
    for precision, xla, skipped in (("float32", False, True), ("mixed_bfloat16", True, False),
                                    ("float32", True, False), ("mixed_float16", False, False)):
        (candidate_run / contract.TRAINING_REPORT_FILE).write_text(json.dumps({"precision": precision, "xla": xla}))
        reason = same_numerics_as_candidate(str(candidate_run), baseline)
        assert bool(reason) == skipped, (precision, xla)
    (candidate_run / contract.TRAINING_REPORT_FILE).write_text(json.dumps({"precision": "float32", "xla": False}))
    assert not same_numerics_as_candidate(str(candidate_run), load_config(train={"precision": "mixed_bfloat16"}).train)
    reason = same_numerics_as_candidate(str(candidate_run), baseline)
    write_skipped_baseline(str(tmp_path / "model" / "Format-Serving"), str(tmp_path / "model_run"), reason,
                           str(candidate_run))
    marker = json.loads((tmp_path / "model" / "Format-Serving" / contract.SKIPPED_BASELINE_FILE).read_text())
    report = json.loads((tmp_path / "model_run" / contract.TRAINING_REPORT_FILE).read_text())
    assert marker == report == {"skipped": True, "reason": reason, "candidate_run": str(candidate_run)}
    assert reason.startswith("candidate trained in float32 without XLA")


@pytest.mark.parametrize("module_text, message", [
    ("from models.taxi import *  # noqa\n"
     "import keras\n"
     "from models import taxi\n"
     "def build_model(preprocessing):\n"
     "    inputs = taxi.model_inputs(preprocessing)\n"
     "    hidden = taxi.wide_and_deep(inputs, preprocessing, (8,))\n"
     "    return keras.Model(inputs, keras.layers.Dense(3, activation='softmax')(hidden))\n",
     r"a binary task needs a model output of shape \(batch, 1\); build_model's output has shape \(None, 3\)"),
    ("from models.taxi_fare import *  # noqa\n"
     "import tensorflow as tf\n"
     "LABEL_INPUTS = {'payment_type': tf.io.FixedLenFeature([], tf.string, default_value='')}\n"
     "LABEL_KEY = 'payment_type'\n"
     "def make_label(features):\n"
     "    return features['payment_type']\n",
     r"label 'payment_type': make_label returns strings; a regression task needs float32 labels"),
], ids=["binary_with_3_outputs", "regression_with_string_label"])
@pytest.mark.slow
def test_a_model_whose_output_or_labels_do_not_fit_its_task_stops_before_training(files, tmp_path, monkeypatch,
                                                                                  module_text, message):
    """What only TensorFlow can tell (the labels' dtype, the model's output width) is checked by the Trainer
    before it trains: a TaskError, which the command line turns into exit 2."""
    from components.core.tasks import TaskError

    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"misfit_{abs(hash(module_text)) % 10**8}"
    (tmp_path / f"{name}.py").write_text(module_text)
    with pytest.raises(TaskError, match=message):
        _train_here(files, tmp_path / "out", model=name, epochs=1, input_probe_steps=0)
    assert not (tmp_path / "out" / "serving").exists()


@pytest.mark.slow
def test_a_training_split_too_small_for_its_folds_trains_one_model_and_says_so(files, tmp_path):
    from components.settings import FOLDS_MIN_RECORDS
    from components.trainer.train import one_model_when_few
    from tests.pipeline.span_files import write_records

    eight = _settings(folds=8)
    assert one_model_when_few(eight, FOLDS_MIN_RECORDS) == (eight, "")
    assert one_model_when_few(_settings(folds=30), 60) == (_settings(folds=30), "")
    fewer, note = one_model_when_few(eight, FOLDS_MIN_RECORDS - 1)
    assert fewer.folds == 0 and note == ("train.folds 8 not applied: the training split holds 39 record(s), fewer "
                                         "than 40: one model trained on all of them")
    # A span of a few rows: the Trainer trains one model on them, as init would have configured it.
    records = list(tf.data.TFRecordDataset(files["train_files"], compression_type="GZIP").take(40).as_numpy_iterator())
    few = {"train_files": [write_records(tmp_path / "few" / "train.tfrecord", records[:3])],
           "eval_files": [write_records(tmp_path / "few" / "eval.tfrecord", records[3:40])]}
    report = _train_here(few, tmp_path / "out", folds=8, epochs=1, input_probe_steps=0, xla="off")
    assert report["folds"] == 1 and report["train_examples"] == 3 and report["folds_note"].startswith(
        "train.folds 8 not applied: the training split holds 3 record(s)")
    schedule = TrainingReport.from_json(report).schedule_line()
    assert schedule.endswith("the last kept (no validation slice) (train.folds 8 not applied: the training split "
                             "holds 3 record(s), fewer than 40: one model trained on all of them)"), schedule


@pytest.mark.parametrize("every, lines", [(0, 3), (3600, 0)])
def test_a_long_fit_prints_progress_lines_under_the_trainers_name(every, lines):
    """ProgressLine logs an interval's number, the validation score and the best so far once `every` seconds
    passed; the local runner's reporter prints each under the running step's name, and nothing for a short fit."""
    import io

    from absl import logging as absl_logging

    from components.trainer.callbacks import KeepBest, ProgressLine
    from pipeline.dag.local_runner import ProgressReporter

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    best = KeepBest("val_loss", higher_is_better=False)
    data = tf.data.Dataset.from_tensors((tf.ones([4, 2]), tf.ones([4, 1]))).repeat()
    stream = io.StringIO()
    reporter, logger, verbosity = ProgressReporter(stream), absl_logging.get_absl_logger(), absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)
    logger.addHandler(reporter)
    try:
        reporter.emit(logger.makeRecord("absl", 20, __file__, 1, "Component Trainer is running.", (), None))
        model.fit(data, steps_per_epoch=2, epochs=3, validation_data=data.take(1), verbose=0,
                  callbacks=[best, ProgressLine(3, best, every=every)])
    finally:
        logger.removeHandler(reporter)
        absl_logging.set_verbosity(verbosity)
    printed = stream.getvalue().splitlines()[1:]
    assert len(printed) == lines
    for interval, line in enumerate(printed, 1):
        assert re.fullmatch(rf"\[Trainer\] interval {interval} of 3, loss [0-9.]+ \(best [0-9.]+ at interval "
                            rf"[1-{interval}]\), [0-9]+ s fitting", line), line
