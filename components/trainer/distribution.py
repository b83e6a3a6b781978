"""Applies the device decisions to TensorFlow: GPU memory settings and the tf.distribute strategy.

Call `configure_gpus` and `make_strategy` before any other TensorFlow work in the process: GPU memory
options and multi-worker collectives can only be set up before the runtime starts.
"""
from __future__ import annotations

import os

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

    `mirrored` spans all local GPUs, or all logical CPU devices when there is no GPU.
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
    return tf.distribute.OneDeviceStrategy("/gpu:0" if device.gpus else "/cpu:0")


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
