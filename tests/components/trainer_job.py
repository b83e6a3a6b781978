"""Runs one training job in its own process, as the Trainer would: `python trainer_job.py JOB.json`.

JOB.json: {"overrides": {TrainConfig keys}, "train_files": [...], "eval_files": [...], "output": dir,
"logical_cpus": N (split the CPU into N devices first), "kill_after_interval": K (SIGKILL this process
right after the K-th checkpoint is written), "clock_speed": S (Python's clocks run S times fast from the start: the
job sees a machine S times slower)}. The chief writes its report to <output>/run/training_report.json;
every worker writes the report train() returned to <output>/returned_report.json.
"""
import json
import os
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def speed_up_the_clocks(speed: float) -> None:
    """time.monotonic, time.perf_counter and time.time read `speed` times the seconds that passed since this call.
    Called before anything imports them by name."""
    import time
    for name in ("monotonic", "perf_counter", "time"):
        real = getattr(time, name)
        began = real()
        setattr(time, name, lambda real=real, began=began: began + speed * (real() - began))


if __name__ == "__main__":
    with open(sys.argv[1]) as handle:
        speed_up_the_clocks(json.load(handle).get("clock_speed", 1))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from components.trainer.train import TrainingJob, train  # noqa: E402
from pipeline.config import load_config  # noqa: E402


class KillAfterInterval(keras.callbacks.Callback):
    def __init__(self, interval):
        super().__init__()
        self.interval = interval

    def on_epoch_end(self, epoch, logs=None):  # runs after BackupAndRestore wrote this interval's checkpoint
        if epoch + 1 == self.interval:
            os.kill(os.getpid(), signal.SIGKILL)


def main(path):
    with open(path) as handle:
        spec = json.load(handle)
    if spec.get("logical_cpus"):
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * spec["logical_cpus"])
    settings = load_config(train=spec.get("overrides", {})).train
    output = spec["output"]
    extra = (KillAfterInterval(spec["kill_after_interval"]),) if spec.get("kill_after_interval") else ()
    report = train(TrainingJob(settings=settings, train_files=spec["train_files"], eval_files=spec["eval_files"],
                               serving_model_dir=os.path.join(output, "serving"), run_dir=os.path.join(output, "run"),
                               checkpoint_dir=os.path.join(output, "checkpoints")), extra_callbacks=extra).to_json()
    with open(os.path.join(output, "returned_report.json"), "w") as handle:
        json.dump(report, handle)


if __name__ == "__main__":
    main(sys.argv[1])
