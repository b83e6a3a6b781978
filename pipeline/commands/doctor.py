"""`python -m pipeline doctor`: what this machine offers the pipeline, and whether the config can run here.

Prints TensorFlow's build (CUDA/cuDNN), the visible GPUs (name, compute capability, memory), TPUs, CPU
bfloat16, the strategy and precision the Trainer would choose and why, whether XLA compiles here, and
whether the output directory and MLMD are writable (a run in progress is a warning). A malformed TF_CONFIG
is an error finding and a hung nvidia-smi a warning, never a crash. Problems are findings with a severity: an "error"
(something the config asks for is missing) makes the exit status 1.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import tempfile
from dataclasses import dataclass

from components.native_stderr import native_stderr_to_log
from components.trainer.device import (DeviceDescription, choose_precision, choose_strategy, config_override,
                                       xla_candidates)
from pipeline.config import PipelineConfig
from pipeline.runs.run_guard import LOCKED_EXIT_CODE, RunLockedError, exclusive_run


@dataclass(frozen=True)
class Finding:
    severity: str  # "error" (exit 1) or "warning"
    key: str  # the config key or resource at fault
    message: str


def check_config_against_devices(config: PipelineConfig, device: DeviceDescription, xla_works: bool) -> list[Finding]:
    """Input: the config, the device description, whether an XLA kernel compiled here. Output: findings for
    what the config asks of the hardware that the hardware cannot give."""
    train, findings = config.train, []
    if train.strategy == "tpu" and not device.tpu_cores:
        findings.append(Finding("error", "train.strategy", "tpu asked for, but no TPU is visible"))
    if train.strategy == "multi_worker_mirrored" and device.num_workers < 2:
        findings.append(Finding("error", "train.strategy",
                                "multi_worker_mirrored asked for, but TF_CONFIG names no cluster of 2+ workers"))
    if train.strategy == "mirrored" and len(device.gpus) < 2:
        findings.append(Finding("warning", "train.strategy",
                                f"mirrored with {len(device.gpus)} GPU(s): replicas will be CPU or a single GPU"))
    if train.precision == "mixed_float16" and not device.gpus:
        findings.append(Finding("error", "train.precision",
                                "mixed_float16 asked for, but no GPU is visible (float16 on CPU is slow or fails)"))
    if train.precision == "mixed_bfloat16" and not (device.tpu_cores or device.cpu_bf16 or device.gpus):
        findings.append(Finding("warning", "train.precision",
                                "mixed_bfloat16 without a TPU or a bfloat16 CPU: emulated, slower than float32"))
    if train.xla == "on" and not xla_works:
        findings.append(Finding("error", "train.xla", "XLA asked for, but an XLA kernel does not compile here"))
    if train.gpu_memory_limit_mb and not device.gpus:
        findings.append(Finding("warning", "train.gpu_memory_limit_mb", "a GPU memory limit is set but no GPU is visible"))
    return findings


def check_writable(config: PipelineConfig) -> list[Finding]:
    """Findings when the output directory cannot hold files, a run holds it (a warning), or MLMD's SQLite
    file cannot take a write lock. The run lock is checked before SQLite: a running pipeline keeps MLMD
    busy, which is no fault. Creates the output directory if missing (as a run would); writes nothing else
    that stays."""
    try:
        os.makedirs(config.output_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=config.output_dir, prefix=".doctor-"):
            pass
    except OSError as error:
        return [Finding("error", "output_dir", f"{config.output_dir} is not writable: {error}")]
    try:
        with exclusive_run(config.output_dir):
            return _check_mlmd_writable(config)
    except RunLockedError as error:
        return [Finding("warning", "output_dir", f"a run is in progress; a run started now would exit "
                                                 f"{LOCKED_EXIT_CODE}: {error}")]


def _check_mlmd_writable(config: PipelineConfig) -> list[Finding]:
    """A finding when MLMD's SQLite file exists and cannot take a write lock within a second."""
    if not os.path.exists(config.metadata_path):
        return []
    try:
        connection = sqlite3.connect(config.metadata_path, timeout=1)
        try:
            connection.execute("BEGIN IMMEDIATE")
            connection.rollback()
        finally:
            connection.close()
    except sqlite3.Error as error:
        return [Finding("error", "output_dir", f"MLMD at {config.metadata_path} cannot be written: {error}")]
    return []


def xla_compiles() -> tuple[bool, str]:
    """Compiles and runs a small matmul with jit_compile=True on the default device. Output: (ok, detail)."""
    import tensorflow as tf
    try:
        with native_stderr_to_log("XLA"):
            value = tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x)), jit_compile=True)(tf.ones((8, 8)))
        return float(value) == 512.0, "compiled and ran a jit_compile matmul"
    except Exception as error:  # any failure means XLA is not usable here
        return False, f"{type(error).__name__}: {str(error).splitlines()[0][:200]}"


NVIDIA_SMI_TIMEOUT_S = 30


def gpu_memory_mb() -> tuple[list[str], Finding | None]:
    """Output: total memory per GPU from nvidia-smi ([] when it is not installed or fails), and a warning
    finding when it hangs past NVIDIA_SMI_TIMEOUT_S or cannot be started."""
    if not shutil.which("nvidia-smi"):
        return [], None
    try:
        result = subprocess.run(["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader"],
                                capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return [], Finding("warning", "nvidia-smi", f"did not answer within {NVIDIA_SMI_TIMEOUT_S} s (a hung driver?); "
                                                    "GPU memory is unknown")
    except OSError as error:
        return [], Finding("warning", "nvidia-smi", f"cannot be run: {error}")
    memories = [line.strip() for line in result.stdout.splitlines() if line.strip()]
    return (memories, None) if result.returncode == 0 else ([], None)


def diagnose(config: PipelineConfig) -> tuple[list[str], list[Finding]]:
    """Input: the config. Output: report lines and findings (reads the real machine)."""
    import tensorflow as tf

    from components.trainer.device import TfConfigError, describe_devices

    build = tf.sysconfig.get_build_info()
    findings = []
    try:
        device = describe_devices()
    except TfConfigError as error:
        findings.append(Finding("error", "TF_CONFIG", str(error)))
        device = describe_devices(tf_config="")  # the rest of the machine, as one worker
    xla_ok, xla_detail = xla_compiles()
    memories, nvidia_smi_problem = gpu_memory_mb()
    findings += [nvidia_smi_problem] if nvidia_smi_problem else []
    lines = [f"TensorFlow {tf.__version__}, built with CUDA {build.get('cuda_version', 'none')}, "
             f"cuDNN {build.get('cudnn_version', 'none')}" + ("" if build.get("is_cuda_build") else " (CPU-only build)")]
    if device.gpus:
        for index, gpu in enumerate(device.gpus):
            memory = memories[index] if index < len(memories) else "memory unknown"
            lines.append(f"GPU {index}: {gpu.name}, compute capability {gpu.compute_capability}, {memory}")
    else:
        lines.append("GPUs: none visible")
    lines.append(f"TPU cores: {device.tpu_cores or 'none'}")
    lines.append(f"CPU bfloat16 (avx512_bf16/amx_bf16): {'yes' if device.cpu_bf16 else 'no'}")
    lines.append(f"workers in TF_CONFIG: {device.num_workers}")
    strategy = choose_strategy(device, config_override(config.train.strategy))
    lines.append(f"strategy: {strategy.value} ({strategy.reason})")
    candidates = xla_candidates(device, config.train.xla)
    for xla in candidates:
        precision = choose_precision(device, xla=xla == "on", override=config_override(config.train.precision))
        lines.append(f"precision with XLA {xla}: {precision.value} ({precision.reason})")
    if len(candidates) == 2:
        lines.append(f"xla: auto: the Trainer times the model without XLA on in-memory batches, and with XLA too when "
                     f"training is at least {config.train.xla_min_training_seconds:g} s of compute "
                     f"(xla_min_training_seconds), and keeps the faster")
    lines.append(f"XLA: {'available' if xla_ok else 'NOT available'} ({xla_detail})")
    findings += check_config_against_devices(config, device, xla_ok) + check_writable(config)
    if not any(f.key == "output_dir" for f in findings):
        lines.append(f"output directory {os.path.abspath(config.output_dir)} and MLMD: writable")
    return lines, findings
