"""The pipeline's one typed config: every default lives here. Load overrides from YAML with `load_config`.

YAML mirrors the dataclasses: top-level keys plus the sections `ingest`, `train`, `evaluate`, `export`, `resources`.
Malformed YAML, unknown keys, wrong types and impossible values raise ConfigError naming the file and line or
the key; so do a `train.model` that does not import or lacks the model contract, and a local `schema_path`
that is missing or not a TFMD Schema text proto.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
import typing
from dataclasses import dataclass, field

import yaml

from components.model_export.variants import TFLITE_VARIANTS
from components.trainer.device import POLICIES, STRATEGIES

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# What a `train.model` module must define (see models/taxi.py): the names the Trainer and the export read.
MODEL_CONTRACT = ("INPUTS", "LABEL_INPUTS", "LABEL_KEY", "make_label", "build_preprocessing", "build_model")


class ConfigError(ValueError):
    """A config key is unknown, of the wrong type, or out of range; the message names it."""


@dataclass
class IngestConfig:
    eval_fraction: float = 1 / 3  # share of records hashed into the eval split (TFX's default 2:1)
    span_window: int = 1  # how many of the latest span-N folders one run reads together (1 = the latest)


@dataclass
class TrainConfig:
    model: str = "models.taxi"  # module with INPUTS, LABEL_INPUTS, make_label, build_preprocessing, build_model
    batch_size: int = 256  # per replica; the global batch is this times the replicas in sync
    epochs: int = 10  # passes over the training data
    learning_rate: float = 0.003  # for one replica's batch; scaled linearly with replicas x accumulation
    warmup_steps: int = 20  # linear learning-rate warmup from 0
    gradient_accumulation_steps: int = 1  # >1: apply gradients once per this many batches
    shuffle_buffer: int = 10_000
    cache_max_mb: int = 1024  # keep the records in memory after the first pass when they fit in this
    steps_per_execution: int = 10  # train steps per call into the device (less host overhead per step)
    strategy: str = "auto"  # auto | one_device | mirrored | multi_worker_mirrored | tpu
    precision: str = "auto"  # auto | float32 | mixed_float16 | mixed_bfloat16
    xla: str = "auto"  # auto (on for GPUs, TPUs and bf16 CPUs, when the model compiles) | on | off
    gpu_memory_growth: bool = True
    gpu_memory_limit_mb: int = 0  # per GPU; 0 = no limit
    checkpoint_every_steps: int = 0  # training interval, a checkpoint at its end; 0 = one pass over the data
    checkpoint_min_seconds: float = 30.0  # skip an interval's checkpoint until this long after the last one
    input_probe_steps: int = 200  # steps on in-memory batches to measure input wait; 0 = skip
    profile_from_step: int = 10  # TensorBoard profiler trace window start...
    profile_steps: int = 0  # ...and length in steps; 0 = no trace
    seed: int = 0  # weights init and shuffle order
    warm_start: bool = True  # start from the latest blessed model (its preprocessing and weights) when there is one


@dataclass
class EvaluateConfig:
    slice_feature: str = "payment_type"  # metrics are also reported per value of this feature ("" = none)
    min_auc: float = 0.9  # absolute bar a model must clear to be blessed
    max_auc_drop_vs_fp32: float = 0.005  # how far below the FP32 baseline's AUC the candidate may fall
    max_accuracy_drop_vs_fp32: float = 0.005  # ...and its binary accuracy
    max_auc_drop_vs_production: float = 0.01  # how far below the latest blessed model's AUC a model may fall
    max_accuracy_drop_vs_production: float = 0.01  # ...and its binary accuracy
    fallback_to_fp32: bool = True  # candidate fails FP32 parity, baseline passes the rest: bless the baseline


@dataclass
class ExportConfig:
    tflite_variants: list[str] = field(default_factory=lambda: list(TFLITE_VARIANTS))  # converted and evaluated
    max_tflite_auc_drop: float = 0.01  # a variant whose AUC falls further below the SavedModel's is rejected
    representative_examples: int = 300  # training examples that calibrate full-int8 quantization
    latency_examples: int = 300  # single-example invocations timed per variant (median reported)


@dataclass
class StepResources:
    cpu: float = 2.0  # vCPUs, requested and limited
    memory_gb: float = 8.0  # GB, requested and limited
    accelerator: str = ""  # e.g. NVIDIA_TESLA_T4 (Vertex AI) or nvidia.com/gpu (Kubeflow); "" = none
    accelerator_count: int = 0


@dataclass
class ResourcesConfig:
    """Per-step resources in the Kubeflow compile (the local runner uses this machine as it is)."""
    data: StepResources = field(default_factory=StepResources)  # ingest, statistics, validation, push
    training: StepResources = field(default_factory=lambda: StepResources(  # both Trainers
        cpu=8.0, memory_gb=32.0, accelerator="NVIDIA_TESLA_T4", accelerator_count=1))
    evaluation: StepResources = field(default_factory=lambda: StepResources(  # TFMA and the TFLite ladder
        cpu=4.0, memory_gb=16.0))
    # Multi-worker training (Kubeflow compile only): >1 runs each Trainer as a Vertex AI CustomJob of this many
    # replicas (a chief and workers, each with `training`'s accelerators on `training_machine_type`); Vertex
    # sets TF_CONFIG on each, and the Trainer picks MultiWorkerMirroredStrategy from it.
    training_workers: int = 1
    training_machine_type: str = "n1-standard-8"
    vertex_project: str = ""  # required when training_workers > 1
    vertex_region: str = "us-central1"


@dataclass
class PipelineConfig:
    pipeline_name: str = "taxi-accel"
    data_root: str = "data/taxi"  # TFRecord files, or span-N/ folders of them (see ingest.span_window)
    output_dir: str = "output"  # local: MLMD (SQLite), the run lock and reports; by default artifacts and serving too
    artifact_root: str = ""  # pipeline root, where artifacts live: a path or a URI (gs://, s3://); default <output_dir>/pipeline
    serving_dir: str = ""  # where blessed models are pushed, a path or a URI; default <output_dir>/serving
    schema_path: str = os.path.join(PROJECT_ROOT, "schemas", "taxi", "schema.pbtxt")
    enable_cache: bool = True
    beam_pipeline_args: list[str] = field(default_factory=lambda: ["--direct_running_mode=in_memory"])
    ingest: IngestConfig = field(default_factory=IngestConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)

    @property
    def pipeline_root(self) -> str:
        return self.artifact_root or os.path.join(self.output_dir, "pipeline")

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.output_dir, "metadata.sqlite")

    @property
    def push_dir(self) -> str:
        return self.serving_dir or os.path.join(self.output_dir, "serving")


_RULES = {
    "ingest.eval_fraction": (lambda v: 0 < v < 1, "must be between 0 and 1 (exclusive)"),
    "ingest.span_window": (lambda v: v >= 1, "must be at least 1"),
    "train.batch_size": (lambda v: v > 0, "must be positive"),
    "train.epochs": (lambda v: v > 0, "must be positive"),
    "train.learning_rate": (lambda v: v > 0, "must be positive"),
    "train.warmup_steps": (lambda v: v >= 0, "must not be negative"),
    "train.gradient_accumulation_steps": (lambda v: v >= 1, "must be at least 1"),
    "train.shuffle_buffer": (lambda v: v >= 0, "must not be negative"),
    "train.cache_max_mb": (lambda v: v >= 0, "must not be negative"),
    "train.steps_per_execution": (lambda v: v >= 1, "must be at least 1"),
    "train.strategy": (lambda v: v in ("auto",) + STRATEGIES, "must be auto or one of " + ", ".join(STRATEGIES)),
    "train.precision": (lambda v: v in ("auto",) + POLICIES, "must be auto or one of " + ", ".join(POLICIES)),
    "train.xla": (lambda v: v in ("auto", "on", "off"), "must be auto, on or off"),
    "train.gpu_memory_limit_mb": (lambda v: v >= 0, "must not be negative"),
    "train.checkpoint_every_steps": (lambda v: v >= 0, "must not be negative"),
    "train.input_probe_steps": (lambda v: v >= 0, "must not be negative"),
    "train.checkpoint_min_seconds": (lambda v: v >= 0, "must not be negative"),
    "train.profile_from_step": (lambda v: v >= 1, "must be at least 1"),
    "train.profile_steps": (lambda v: v >= 0, "must not be negative"),
    "evaluate.min_auc": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "evaluate.max_auc_drop_vs_fp32": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "evaluate.max_accuracy_drop_vs_fp32": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "evaluate.max_auc_drop_vs_production": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "evaluate.max_accuracy_drop_vs_production": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "export.tflite_variants": (lambda v: v and set(v) <= set(TFLITE_VARIANTS),
                               "must list one or more of " + ", ".join(TFLITE_VARIANTS)),
    "export.max_tflite_auc_drop": (lambda v: 0 <= v <= 1, "must be between 0 and 1"),
    "export.representative_examples": (lambda v: v >= 1, "must be at least 1"),
    "export.latency_examples": (lambda v: v >= 1, "must be at least 1"),
    "resources.training_workers": (lambda v: v >= 1, "must be at least 1"),
    **{f"resources.{step}.{key}": rule for step in ("data", "training", "evaluation") for key, rule in {
        "cpu": (lambda v: v > 0, "must be positive"),
        "memory_gb": (lambda v: v > 0, "must be positive"),
        "accelerator_count": (lambda v: v >= 0, "must not be negative")}.items()},
}


def load_config(path: str | None = None, check_references: bool = True, **overrides: typing.Any) -> PipelineConfig:
    """Input: an optional YAML file and top-level overrides (None values ignored). Output: a checked config.

    With `check_references` (the default), `train.model` is imported and `schema_path` parsed now, so that a
    wrong name fails here, naming the key, rather than steps later; `status` skips this.
    """
    raw: dict = {}
    if path:
        raw = _read_yaml(path)
    raw.update({key: value for key, value in overrides.items() if value is not None})
    config = _build(PipelineConfig, raw, prefix="")
    if check_references:
        check_model_module(config.train.model)
        check_schema(config.schema_path)
    return config


def _read_yaml(path: str) -> dict:
    """Input: a YAML file. Output: its top-level mapping; ConfigError naming the file and line when malformed."""
    with open(path) as handle:
        try:
            raw = yaml.safe_load(handle) or {}
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ConfigError(f"{path}: {where}: not valid YAML: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    return raw


def check_model_module(name: str) -> None:
    """Raises ConfigError naming `train.model` when module `name` does not import or lacks part of
    MODEL_CONTRACT (INPUTS, LABEL_INPUTS, LABEL_KEY, make_label, build_preprocessing, build_model)."""
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise ConfigError(f"train.model: cannot import {name!r}: {error} (a module path such as models.taxi, "
                          f"importable from {PROJECT_ROOT} or the PYTHONPATH)") from None
    except Exception as error:  # noqa: BLE001 - whatever the module raised while importing
        raise ConfigError(f"train.model: importing {name!r} failed: {type(error).__name__}: {error}") from None
    missing = [attribute for attribute in MODEL_CONTRACT if not hasattr(module, attribute)]
    not_callable = [attribute for attribute in MODEL_CONTRACT[3:]
                    if hasattr(module, attribute) and not callable(getattr(module, attribute))]
    if missing or not_callable:
        problems = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"{', '.join(not_callable)} not callable"] if not_callable else [])
        raise ConfigError(f"train.model: {name!r} ({getattr(module, '__file__', '?')}) {'; '.join(problems)}; "
                          f"a model module defines {', '.join(MODEL_CONTRACT)}")


def check_schema(path: str) -> None:
    """Raises ConfigError naming `schema_path` when the local file `path` is missing, does not parse as a
    TFMD Schema text proto, or holds no feature. A URI (gs://, s3://...) is read only by the step that
    imports it, where it may be reachable when it is not from here."""
    if "://" in path:
        return
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"schema_path: {path}: cannot be read: {error}") from None
    schema = schema_pb2.Schema()
    try:
        text_format.Parse(text, schema)
    except text_format.ParseError as error:
        where = f"line {error.GetLine()}, column {error.GetColumn()}: " if error.GetLine() else ""
        message = str(error).split(" : ", 1)[-1]
        raise ConfigError(f"schema_path: {path}: {where}not a TFMD Schema text proto: {message}") from None
    if not schema.feature:
        raise ConfigError(f"schema_path: {path}: a TFMD Schema with no feature")


def _build(cls, raw: dict, prefix: str, base=None):
    """Input: a dataclass, its raw YAML mapping, the key prefix, and the instance whose values the mapping
    overrides (the class defaults when None). Output: the checked instance."""
    base = cls() if base is None else base
    hints = typing.get_type_hints(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(prefix + key for key in unknown)} "
                          f"(known: {', '.join(sorted(prefix + key for key in known))})")
    values = {}
    for name, value in raw.items():
        key, hint = prefix + name, hints[name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
            values[name] = _build(hint, value, prefix=key + ".", base=getattr(base, name))
            continue
        values[name] = _check_type(key, value, hint)
        rule = _RULES.get(key)
        if rule and not rule[0](values[name]):
            raise ConfigError(f"{key}: {rule[1]}, got {value!r}")
    return dataclasses.replace(base, **values)


def _check_type(key: str, value, hint):
    origin = typing.get_origin(hint)
    if origin is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, bool) or not isinstance(value, hint):
        raise ConfigError(f"{key}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
    return value
