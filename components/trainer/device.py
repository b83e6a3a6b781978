"""Device description and the hardware-dependent training decisions, as pure functions.

`describe_devices()` reads the machine once into a small, JSON-serializable DeviceDescription;
`choose_strategy()` and `choose_precision()` take only that description, so tests can hand them a
described GPU or TPU on a CPU-only machine.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")
TENSOR_CORE_MIN_CC = (7, 0)  # Volta and newer: float16 matmuls on Tensor Cores


@dataclass(frozen=True)
class Gpu:
    name: str
    compute_capability: tuple[int, int] | None = None


@dataclass(frozen=True)
class DeviceDescription:
    gpus: tuple[Gpu, ...] = ()
    tpu_cores: int = 0
    cpu_bf16: bool = False  # the CPU has native bfloat16 instructions (AVX512_BF16 or AMX-BF16)
    num_workers: int = 1  # from TF_CONFIG's cluster: chief + workers


@dataclass(frozen=True)
class Decision:
    value: str
    reason: str


def choose_strategy(device: DeviceDescription, override: str | None = None) -> Decision:
    """Input: a device description and an optional override. Output: strategy name and why."""
    if override:
        if override not in STRATEGIES:
            raise ValueError(f"train.strategy: unknown strategy {override!r} (one of {', '.join(STRATEGIES)})")
        return Decision(override, "set in the config")
    if device.tpu_cores:
        return Decision("tpu", f"{device.tpu_cores} TPU cores")
    if device.num_workers > 1:
        return Decision("multi_worker_mirrored", f"TF_CONFIG names {device.num_workers} workers")
    if len(device.gpus) > 1:
        return Decision("mirrored", f"{len(device.gpus)} local GPUs")
    return Decision("one_device", "one GPU" if device.gpus else "no accelerator: one CPU device")


def choose_precision(device: DeviceDescription, xla: bool, override: str | None = None) -> Decision:
    """Input: a device description, whether XLA is on, an optional override. Output: Keras policy and why.

    mixed_float16 on GPUs that all have Tensor Cores (compute capability >= 7.0); mixed_bfloat16 on
    TPUs, and on bf16-capable CPUs only with XLA (without XLA bf16 gains nothing there); else float32.
    """
    if override:
        if override not in POLICIES:
            raise ValueError(f"train.precision: unknown policy {override!r} (one of {', '.join(POLICIES)})")
        return Decision(override, "set in the config")
    if device.tpu_cores:
        return Decision("mixed_bfloat16", "TPU: bfloat16 is native")
    if device.gpus:
        capabilities = [gpu.compute_capability for gpu in device.gpus]
        if all(cc is not None and cc >= TENSOR_CORE_MIN_CC for cc in capabilities):
            return Decision("mixed_float16", f"GPU compute capability {min(capabilities)} has Tensor Cores")
        return Decision("float32", f"a GPU below compute capability 7.0 ({capabilities}): no Tensor Cores")
    if device.cpu_bf16 and xla:
        return Decision("mixed_bfloat16", "CPU with native bfloat16 and XLA on")
    if device.cpu_bf16:
        return Decision("float32", "CPU bfloat16 needs XLA to pay off, and XLA is off")
    return Decision("float32", "no accelerator and no native bfloat16 on this CPU")


def config_override(value: str) -> str | None:
    """A strategy/precision config value as an override of the automatic choice: None for "auto"."""
    return None if value == "auto" else value


def xla_candidates(device: DeviceDescription, wanted: str) -> list[str]:
    """Input: a device description and the `xla` setting (auto | on | off). Output: the XLA settings to try,
    in order: with `auto`, ["on", "off"] (both are timed) where XLA may gain (an accelerator or a bf16 CPU),
    else ["off"]; otherwise the setting itself."""
    if wanted != "auto":
        return [wanted]
    return ["on", "off"] if device.gpus or device.tpu_cores or device.cpu_bf16 else ["off"]


def workers_from_tf_config(tf_config: str | None) -> int:
    """Input: the TF_CONFIG environment value (JSON) or None. Output: chief + worker count (1 when unset)."""
    if not tf_config:
        return 1
    cluster = json.loads(tf_config).get("cluster", {})
    return max(1, len(cluster.get("chief", [])) + len(cluster.get("worker", [])))


def cpu_has_bf16(cpuinfo_path: str = "/proc/cpuinfo") -> bool:
    """Output: True when the CPU flags include avx512_bf16 or amx_bf16."""
    try:
        with open(cpuinfo_path) as handle:
            for line in handle:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        pass
    return False


def describe_devices() -> DeviceDescription:
    """Reads this machine: GPUs with name and compute capability, TPU cores, CPU bf16, TF_CONFIG workers."""
    import tensorflow as tf

    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        gpus.append(Gpu(details.get("device_name", device.name), details.get("compute_capability")))
    tpu_cores = len(tf.config.list_physical_devices("TPU"))  # physical: listing logical ones starts the runtime
    return DeviceDescription(gpus=tuple(gpus), tpu_cores=tpu_cores, cpu_bf16=cpu_has_bf16(),
                             num_workers=workers_from_tf_config(os.environ.get("TF_CONFIG")))
