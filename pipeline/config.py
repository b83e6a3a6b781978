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
from components.settings import (PROJECT_ROOT, EvaluateConfig, ExportConfig, IngestConfig, PipelineConfig,  # noqa: F401
                                 ResourcesConfig, StepResources, TrainConfig)
from components.trainer.device import POLICIES, STRATEGIES

# What a `train.model` module must define (see models/taxi.py): the names the Trainer and the export read.
MODEL_CONTRACT = ("INPUTS", "LABEL_INPUTS", "LABEL_KEY", "make_label", "build_preprocessing", "build_model")


class ConfigError(ValueError):
    """A config key is unknown, of the wrong type, or out of range; the message names it."""


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
