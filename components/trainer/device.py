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


def choose_precision(device: DeviceDescription, xla: bool, override: str | None = None,
                     auto_xla: bool = False) -> Choice:
    """Input: a device description, whether XLA is on, an optional override, and whether `xla: auto` chose XLA
    (not the config). Output: Keras policy and why.

    mixed_float16 on GPUs that all have Tensor Cores (compute capability >= 7.0); mixed_bfloat16 on
    TPUs, and on bf16-capable CPUs only with XLA set on in the config (without XLA bf16 gains nothing there,
    and XLA chosen by auto keeps float32: see auto_xla_on_cpu); else float32.
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
    if device.cpu_bf16 and xla and auto_xla:
        return Choice("float32", "CPU: XLA chosen by xla: auto keeps float32 (bfloat16 would need the FP32 "
                                 "baseline trained after it; xla: on brings bfloat16)")
    if device.cpu_bf16 and xla:
        return Choice("mixed_bfloat16", "CPU with native bfloat16 and XLA on")
    if device.cpu_bf16:
        return Choice("float32", "CPU bfloat16 needs XLA to pay off, and XLA is off")
    return Choice("float32", "no accelerator and no native bfloat16 on this CPU")


def config_override(value: str) -> str | None:
    """A strategy/precision config value as an override of the automatic choice: None for "auto"."""
    return None if value == "auto" else value


def xla_candidates(device: DeviceDescription, wanted: str, planned_steps: int | None = None,
                   cpu_min_steps: int = 0) -> list[str]:
    """Input: a device description, the `xla` setting (auto | on | off), and for a CPU the training plan's
    steps (None: not known yet) and `xla_min_steps_cpu`. Output: the XLA settings to try, in order: with
    `auto`, ["on", "off"] on an accelerator (both are timed); on a CPU ["on", "off"] (XLA, the other only
    should the model not compile) for a plan of at least `cpu_min_steps` steps or one not known yet, else
    ["off"] (see auto_xla_on_cpu); otherwise the setting itself."""
    if wanted != "auto":
        return [wanted]
    if device.gpus or device.tpu_cores or planned_steps is None or planned_steps >= cpu_min_steps:
        return ["on", "off"]
    return ["off"]


def auto_xla_on_cpu(planned_steps: int, cpu_min_steps: int) -> str:
    """Why `xla: auto` turns XLA on or leaves it off on a CPU, for a plan of `planned_steps` training steps.
    XLA fuses a step's many small ops into a few kernels, which saves milliseconds per step on a table's
    model, and its compile costs about a second more than TensorFlow's own graph: it repays that only over
    enough steps. The choice follows from the plan, not from a timing, so the same data and config train
    the same model whatever the machine's load. XLA chosen so keeps float32 (choose_precision): the model's
    numerics stay plain float32, and no FP32 baseline is trained after it."""
    if planned_steps >= cpu_min_steps:
        return (f"CPU: a plan of {planned_steps:,} steps, at least xla_min_steps_cpu {cpu_min_steps:,}: XLA fuses "
                f"each step's ops, in float32")
    return (f"CPU: a plan of {planned_steps:,} steps, under xla_min_steps_cpu {cpu_min_steps:,}: too few to repay "
            f"XLA's compile")


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
