"""Device description and the hardware-dependent training decisions, as pure functions.

`describe_devices()` reads the machine once into a small, JSON-serializable DeviceDescription;
`choose_strategy()` and `choose_precision()` take only that description, so tests can hand them a
described GPU or TPU on a CPU-only machine.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

from components.core.contract import POLICIES, STRATEGIES

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


def device_from_json(value: dict) -> DeviceDescription:
    """Input: a DeviceDescription as the training report stores it (dataclasses.asdict, through JSON).
    Output: the description again."""
    gpus = tuple(Gpu(gpu["name"], tuple(gpu["compute_capability"]) if gpu.get("compute_capability") else None)
                 for gpu in value.get("gpus", ()))
    return DeviceDescription(gpus=gpus, tpu_cores=value.get("tpu_cores", 0), cpu_bf16=value.get("cpu_bf16", False),
                             num_workers=value.get("num_workers", 1))


@dataclass(frozen=True)
class Choice:
    """A hardware-dependent choice (a strategy, a precision policy, XLA) and why it was made."""
    value: str
    reason: str


def choose_strategy(device: DeviceDescription, override: str | None = None) -> Choice:
    """Input: a device description and an optional override. Output: strategy name and why."""
    if override:
        if override not in STRATEGIES:
            raise ValueError(f"train.strategy: unknown strategy {override!r} (one of {', '.join(STRATEGIES)})")
        return Choice(override, "set in the config")
    if device.tpu_cores:
        return Choice("tpu", f"{device.tpu_cores} TPU cores")
    if device.num_workers > 1:
        return Choice("multi_worker_mirrored", f"TF_CONFIG names {device.num_workers} workers")
    if len(device.gpus) > 1:
        return Choice("mirrored", f"{len(device.gpus)} local GPUs")
    return Choice("one_device", "one GPU" if device.gpus else "no accelerator: one CPU device")


def choose_precision(device: DeviceDescription, xla: bool, override: str | None = None) -> Choice:
    """Input: a device description, whether XLA is on, an optional override. Output: Keras policy and why.

    mixed_float16 on GPUs that all have Tensor Cores (compute capability >= 7.0); mixed_bfloat16 on
    TPUs, and on bf16-capable CPUs only with XLA (without XLA bf16 gains nothing there); else float32.
    """
    if override:
        if override not in POLICIES:
            raise ValueError(f"train.precision: unknown policy {override!r} (one of {', '.join(POLICIES)})")
        return Choice(override, "set in the config")
    if device.tpu_cores:
        return Choice("mixed_bfloat16", "TPU: bfloat16 is native")
    if device.gpus:
        capabilities = [gpu.compute_capability for gpu in device.gpus]
        if all(cc is not None and cc >= TENSOR_CORE_MIN_CC for cc in capabilities):
            return Choice("mixed_float16", f"GPU compute capability {min(capabilities)} has Tensor Cores")
        return Choice("float32", f"a GPU below compute capability 7.0 ({capabilities}): no Tensor Cores")
    if device.cpu_bf16 and xla:
        return Choice("mixed_bfloat16", "CPU with native bfloat16 and XLA on")
    if device.cpu_bf16:
        return Choice("float32", "CPU bfloat16 needs XLA to pay off, and XLA is off")
    return Choice("float32", "no accelerator and no native bfloat16 on this CPU")


def config_override(value: str) -> str | None:
    """A strategy/precision config value as an override of the automatic choice: None for "auto"."""
    return None if value == "auto" else value


def xla_candidates(device: DeviceDescription, wanted: str) -> list[str]:
    """Input: a device description and the `xla` setting (auto | on | off). Output: the XLA settings to try,
    in order: with `auto`, ["on", "off"] (both are timed) on an accelerator, else ["off"] (see
    cpu_without_xla); otherwise the setting itself."""
    if wanted != "auto":
        return [wanted]
    return ["on", "off"] if device.gpus or device.tpu_cores else ["off"]


def cpu_without_xla(device: DeviceDescription) -> str:
    """Why `xla: auto` leaves XLA off on a CPU. A model trained with other numerics than plain float32
    without XLA is checked against an FP32 baseline that the pipeline trains after it, on the same CPU: the
    two trainings take longer than the float32 model alone, whatever XLA and bfloat16 save. (On an
    accelerator mixed precision is chosen either way, so the baseline trains either way.)"""
    if device.cpu_bf16:
        return ("CPU: XLA would bring bfloat16, and the FP32 baseline the pipeline then trains on the same CPU "
                "costs more than they save (xla: on uses them)")
    return "plain CPU: nothing for XLA to gain"


class TfConfigError(ValueError):
    """The TF_CONFIG environment variable is not the JSON object tf.distribute expects; the message says why."""


def parse_tf_config(tf_config: str | None) -> dict:
    """Input: the TF_CONFIG environment value or None. Output: it as a dict ({} when unset or empty).
    Raises TfConfigError naming TF_CONFIG when it is not a JSON object with mapping `cluster` and `task`."""
    if not tf_config or not tf_config.strip():
        return {}
    try:
        parsed = json.loads(tf_config)
    except json.JSONDecodeError as error:
        raise TfConfigError(f"TF_CONFIG is not valid JSON ({error}): {tf_config[:200]!r}") from None
    if not isinstance(parsed, dict):
        raise TfConfigError(f"TF_CONFIG must be a JSON object with 'cluster' and 'task', got {tf_config[:200]!r}")
    for key in ("cluster", "task"):
        if not isinstance(parsed.get(key, {}), dict):
            raise TfConfigError(f"TF_CONFIG: {key!r} must be a JSON object, got {parsed[key]!r}"[:300])
    return parsed


def workers_from_tf_config(tf_config: str | None) -> int:
    """Input: the TF_CONFIG environment value (JSON) or None. Output: chief + worker count (1 when unset).
    Raises TfConfigError naming TF_CONFIG when it is malformed."""
    cluster = parse_tf_config(tf_config).get("cluster", {})
    for role in ("chief", "worker"):
        if not isinstance(cluster.get(role, []), list):
            raise TfConfigError(f"TF_CONFIG: cluster.{role} must be a list of host:port, got {cluster[role]!r}"[:300])
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


def describe_devices(tf_config: str | None = None) -> DeviceDescription:
    """Reads this machine: GPUs with name and compute capability, TPU cores, CPU bf16, and the workers in
    `tf_config` (default: the TF_CONFIG environment variable; TfConfigError when it is malformed)."""
    import tensorflow as tf

    gpus = []
    for device in tf.config.list_physical_devices("GPU"):
        details = tf.config.experimental.get_device_details(device)
        gpus.append(Gpu(details.get("device_name", device.name), details.get("compute_capability")))
    tpu_cores = len(tf.config.list_physical_devices("TPU"))  # physical: listing logical ones starts the runtime
    return DeviceDescription(gpus=tuple(gpus), tpu_cores=tpu_cores, cpu_bf16=cpu_has_bf16(),
                             num_workers=workers_from_tf_config(
                                 os.environ.get("TF_CONFIG") if tf_config is None else tf_config))
