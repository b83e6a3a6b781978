"""Applies the device decisions to TensorFlow: GPU memory settings and the tf.distribute strategy, and the
workarounds Keras 3 needs to train under a multi-replica or multi-worker strategy.

Call `configure_gpus` and `make_strategy` before any other TensorFlow work in the process: GPU memory
options and multi-worker collectives can only be set up before the runtime starts.
"""
from __future__ import annotations

import os

import keras
import tensorflow as tf
from absl import logging

from components.trainer.device import DeviceDescription, TfConfigError, parse_tf_config


def configure_gpus(memory_growth: bool, memory_limit_mb: int) -> None:
    """Sets memory growth (allocate as needed) or a per-GPU memory limit (MB, 0 = none) on every GPU."""
    for gpu in tf.config.list_physical_devices("GPU"):
        try:
            if memory_limit_mb:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=memory_limit_mb)])
            elif memory_growth:
                tf.config.experimental.set_memory_growth(gpu, True)
        except RuntimeError as error:  # the runtime already started in this process
            logging.warning("GPU memory settings not applied to %s: %s", gpu.name, error)


def make_strategy(name: str, device: DeviceDescription) -> tf.distribute.Strategy:
    """Input: a strategy name from choose_strategy and the device. Output: the tf.distribute strategy.

    `mirrored` spans all local GPUs, or all logical CPU devices when there is no GPU. `one_device` is
    OneDeviceStrategy on a GPU (its iterator copies the next batches to the GPU ahead of each step) and
    TensorFlow's default strategy on a host without one: Keras then iterates the Trainer's dataset itself,
    where OneDeviceStrategy would wrap it in a per-device dataset of its own, with tf.data autotuning on (a
    wait at the end of every pass, components.core.datasets) and more work per step.
    """
    if name == "tpu":
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver()
        tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
        return tf.distribute.TPUStrategy(resolver)
    if name == "multi_worker_mirrored":
        try:
            return tf.distribute.MultiWorkerMirroredStrategy()
        except RuntimeError as error:
            raise RuntimeError(f"{error}: multi-worker training must create its strategy before TensorFlow starts "
                               "in the process; run each worker's trainer in a process of its own") from error
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if device.gpus:
        return tf.distribute.OneDeviceStrategy("/gpu:0")
    return tf.distribute.get_strategy()


def supported_steps_per_execution(steps_per_execution: int, replicas: int) -> int:
    """Output: the steps per execution Keras can run with this many replicas in sync: the setting, or 1
    with several replicas (Keras 3 fails to run several steps per call under a multi-replica strategy,
    keras#19246)."""
    if replicas > 1 and steps_per_execution > 1:
        logging.info("steps_per_execution 1 instead of %d: %d replicas", steps_per_execution, replicas)
        return 1
    return steps_per_execution


def work_around_keras_multi_worker_fit(model: keras.Model) -> None:
    """Keras 3's fit fails under MultiWorkerMirroredStrategy (tensorflow#72388) in two places; the model
    here is already built, so both can be sidestepped without changing what is trained:
    - fit reduces a sample batch across workers to build the model, and tf.distribute cannot reduce a dict
      of features there: without its own strategy the model skips that and takes the strategy from the
      enclosing scope;
    - each step reduces the scalar metrics along axis 0 across workers: inside a replica they are
      returned with shape [1], which that reduction turns back into scalars.
    """
    model._distribute_strategy = None
    plain_results = model.get_metrics_result

    def metrics_result():
        results = plain_results()
        if tf.distribute.has_strategy() and not tf.distribute.in_cross_replica_context():
            return {name: tf.reshape(value, [1]) for name, value in results.items()}
        return results

    model.get_metrics_result = metrics_result


def _tf_config(tf_config: str | None) -> dict:
    """`tf_config` (default: the TF_CONFIG environment variable) parsed; TfConfigError naming TF_CONFIG when
    it is malformed."""
    return parse_tf_config(os.environ.get("TF_CONFIG") if tf_config is None else tf_config)


def worker_task(tf_config: str | None = None) -> tuple[str, int]:
    """Output: this process's (task type, index) from TF_CONFIG; ("chief", 0) when training alone."""
    return _task(_tf_config(tf_config))


def is_chief(tf_config: str | None = None) -> bool:
    """Output: True for the process that writes the model: the chief, or worker 0 when there is no chief."""
    config = _tf_config(tf_config)
    task_type, index = _task(config)
    return task_type == "chief" or (task_type == "worker" and index == 0 and "chief" not in config.get("cluster", {}))


def _task(config: dict) -> tuple[str, int]:
    """(task type, index) of a parsed TF_CONFIG; TfConfigError naming TF_CONFIG when the index is no integer."""
    task = config.get("task", {})
    try:
        return str(task.get("type", "chief")), int(task.get("index", 0))
    except (TypeError, ValueError):
        raise TfConfigError(f"TF_CONFIG: task.index must be an integer, got {task.get('index')!r}") from None
