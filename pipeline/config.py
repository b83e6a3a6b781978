"""Loads the pipeline's config from YAML and checks it; the dataclasses, their defaults and each field's
check live in components/settings.py (re-exported here: `from pipeline.config import TrainConfig, ...`).

YAML mirrors the dataclasses: top-level keys plus the sections `ingest`, `train`, `evaluate`, `export`, `resources`.
Relative paths in the file (data_root, output_dir, artifact_root, serving_dir, schema_path) are relative to the
file's folder; paths given on the command line, to the working directory.
Malformed YAML, unknown keys, wrong types and values failing their field's check raise ConfigError naming the file
and line or the key; so do a `train.model` that does not import or lacks part of components.core.model_module.ModelModule,
a `task.type` of one's own (module:Class) that does not import or is no Task, and a local `schema_path` that is
missing or not a TFMD Schema text proto.
"""
from __future__ import annotations

import dataclasses
import os
import re
import types
import typing

import yaml

from components.settings import (CHECK, PROJECT_ROOT, REQUIRED, EvaluateConfig, ExportConfig, IngestConfig,  # noqa: F401
                                 PipelineConfig, ResourcesConfig, StepResources, TrainConfig)
from components.core.path_operations import local_path
from components.core.tasks import TASK_PATH, PredictionTarget, TaskError, task_named
from components.core.model_module import ModelModuleError, check_task, load_model_module


class ConfigError(ValueError):
    """A config key is unknown, of the wrong type, or out of range; the message names it."""


# The config a run without --config reads: the bundled taxi example's.
DEFAULT_CONFIG = os.path.join(PROJECT_ROOT, "configs", "taxi.yaml")


def read_config(path: str | None = None, **overrides: typing.Any) -> PipelineConfig:
    """Input: a YAML file (None: DEFAULT_CONFIG) and top-level overrides (None values ignored; a section's
    mapping overrides the file's keys of that section, not the whole section). Output: the
    config, each field checked; ConfigError naming the file and line or the key otherwise (a required key
    left out included). Reads the file once and imports no TensorFlow, TFX or Beam (the nothing-new check runs
    on what it returns)."""
    path = path or DEFAULT_CONFIG
    raw = _relative_to(os.path.dirname(os.path.abspath(path)), _read_yaml(path))
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):  # a section: its keys over the file's
            raw[key] = {**raw[key], **value}
        elif value is not None:
            raw[key] = value
    config = _local_paths_as_paths(_build(PipelineConfig, raw, prefix=""))
    check_no_secrets(config)
    _check_required(config, path)
    if config.train.folds > 1 and config.train.validation_share:
        raise ConfigError(f"{path or 'the config'}: train.folds ({config.train.folds}) and train.validation_share "
                          f"({config.train.validation_share:g}) are two ways to validate: give one")
    return config


KUBEFLOW_NAME_PATTERN = r"[a-z0-9][a-z0-9-]{0,62}"  # TFX's Kubeflow compile: lowercase letters, digits and '-'


def check_kubeflow_name(config: PipelineConfig) -> None:
    """Raises ConfigError naming `pipeline_name` when the Kubeflow compile cannot take it (the config's own check
    allows '_' and capitals, which local runs take)."""
    name = config.pipeline_name
    if not re.fullmatch(KUBEFLOW_NAME_PATTERN, name):
        raise ConfigError(f"pipeline_name: {name!r}: Kubeflow Pipelines names a pipeline with lowercase letters, "
                          f"digits and '-' only; give one such as {name.lower().replace('_', '-')!r} to compile "
                          "(a local run's MLMD records its runs under the name it had)")


def with_references_checked(config: PipelineConfig) -> PipelineConfig:
    """Input: what read_config returned. Output: the same config, once `schema_path` parses, a `task.type` of
    one's own imports and `train.model` imports and fits its task; ConfigError naming the key otherwise."""
    check_schema(config.schema_path)
    if config.task.type:
        try:
            task_named(config.task.type)
        except TaskError as error:
            raise ConfigError(f"task.type: {error}") from None
    check_model_module(config)
    return config


def user_code(config: PipelineConfig) -> tuple[str, ...]:
    """Input: a config. Output: the modules of the user's code its steps import by name: `train.model`, and
    the module of a `task.type` of one's own (module:Class)."""
    task_type = config.task.type
    own_task = (task_type.partition(":")[0],) if TASK_PATH.fullmatch(task_type or "") else ()
    return (config.train.model, *own_task)


def load_config(path: str | None = None, check_references: bool = True, **overrides: typing.Any) -> PipelineConfig:
    """read_config, then (`check_references`, the default) its references checked, so that a wrong name fails
    here, naming the key, rather than steps later; `status` skips them."""
    config = read_config(path, **overrides)
    return with_references_checked(config) if check_references else config


def _check_required(config, path: str, prefix: str = "") -> None:
    """Raises ConfigError naming the first setting with no default (components/settings.py) that `path` and
    the overrides left empty."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(value):
            _check_required(value, path, prefix + field.name + ".")
        elif field.metadata.get(REQUIRED) and not value:
            raise ConfigError(f"{path}: {prefix}{field.name} is required (it has no default); see "
                              f"docs/configuration.md")


# Beam flags whose value is a credential: a compiled job carries every Beam flag in plain text in each step's
# arguments (the job JSON, the Kubeflow and Vertex AI UIs). Refused for local runs too, so that one config
# serves both and no secret sits in a config file.
SECRET_FLAG_WORDS = ("secret", "password", "passwd", "token", "credential", "private_key", "access_key", "api_key")
PATH_KEYS = ("data_root", "output_dir", "artifact_root", "serving_dir", "schema_path")


def secret_flags(args: list[str]) -> list[str]:
    """Input: Beam flags. Output: the names of those that carry a credential (e.g. --s3_secret_access_key)."""
    names = [arg[2:].split("=", 1)[0] for arg in args if arg.startswith("--")]
    return [f"--{name}" for name in names if any(word in name.lower() for word in SECRET_FLAG_WORDS)]


def check_no_secrets(config: PipelineConfig) -> None:
    """Raises ConfigError naming a Beam flag that carries a credential, or a path or URI with a password in it:
    credentials come from the environment (locally) or the pod's secret or identity (Kubeflow, Vertex AI)."""
    flags = secret_flags(config.beam_pipeline_args)
    if flags:
        raise ConfigError(f"beam_pipeline_args: {', '.join(flags)} carries a credential, which would be written in "
                          f"plain text into the compiled job and the run's metadata; leave it out and give the "
                          f"credentials through the environment (AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, "
                          f"GOOGLE_APPLICATION_CREDENTIALS) or, on Kubeflow, the pod's secret or workload identity")
    for key in PATH_KEYS:
        value = getattr(config, key)
        scheme, _, rest = value.partition("://")
        if rest and ":" in rest.split("/", 1)[0].rpartition("@")[0]:
            raise ConfigError(f"{key}: the URI carries a password ({scheme}://user:...@); give the credentials "
                              f"through the environment or the pod's identity instead")


def _relative_to(folder: str, raw: dict) -> dict:
    """The YAML's top-level paths (PATH_KEYS) that are relative local paths, made relative to `folder` (the
    config file's): a config names its schema and data where it sits, whatever the working directory."""
    resolved = dict(raw)
    for key in PATH_KEYS:
        value = raw.get(key)
        if isinstance(value, str) and value and "://" not in value and not os.path.isabs(value):
            resolved[key] = os.path.normpath(os.path.join(folder, value))
    return resolved


def _local_paths_as_paths(config: PipelineConfig) -> PipelineConfig:
    """`file://` URIs become plain paths (os calls and MLMD take them only so); an output directory that is
    not local is a ConfigError: MLMD's SQLite database and the run lock live there."""
    config = dataclasses.replace(config, **{key: local_path(getattr(config, key)) for key in PATH_KEYS})
    if "://" in config.output_dir:
        raise ConfigError(f"output_dir: {config.output_dir!r} must be a local path: MLMD's SQLite database and the "
                          f"run lock live there; put artifacts on an object store with artifact_root "
                          f"(--pipeline-root) and models with serving_dir (--serving-dir)")
    return config


class _DuplicateKey(yaml.YAMLError):
    """A key given twice in one mapping; `line` is the second occurrence's (1-based), `first` the first's."""

    def __init__(self, key: str, line: int, first: int):
        super().__init__(key)
        self.key, self.line, self.first = key, line, first


class _ConfigLoader(yaml.SafeLoader):
    """yaml.SafeLoader for config files only: a key given twice in one mapping is an error rather than the last
    one silently winning, and `1e-3`, `1E6`, `5e-4` (no dot, or an unsigned exponent) are floats as in YAML 1.2,
    where YAML 1.1 reads them as strings. Every other scalar resolves as with yaml.safe_load."""

    def __init__(self, stream):
        super().__init__(stream)
        self._prefixes: dict[int, str] = {}  # id(mapping node) -> its dotted key path ("train."), for messages

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            prefix = self._prefixes.get(id(node), "")
            seen: dict = {}
            for key_node, value_node in node.value:
                if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # `<<: *base` may be overridden; a non-scalar key is refused by SafeLoader itself
                key = self.construct_object(key_node)
                try:
                    first = seen.setdefault(key, key_node)
                except TypeError:  # unhashable: SafeLoader's own error follows
                    continue
                if first is not key_node:
                    raise _DuplicateKey(f"{prefix}{key}", key_node.start_mark.line + 1, first.start_mark.line + 1)
                if isinstance(value_node, yaml.MappingNode):
                    self._prefixes.setdefault(id(value_node), f"{prefix}{key}.")
        return super().construct_mapping(node, deep=deep)


# YAML 1.2's exponent floats that YAML 1.1 lacks: digits with an optional fraction, or a bare fraction, then an
# exponent whose sign is optional (1e-3, 1E6, 2.5e3, .5e-2). Those with a dot and a signed exponent already match.
_ConfigLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _read_yaml(path: str) -> dict:
    """Input: a YAML file. Output: its top-level mapping; ConfigError naming the file and line when malformed
    or when a key appears twice in one mapping (at any level)."""
    with open(path) as handle:
        try:
            raw = yaml.load(handle, Loader=_ConfigLoader) or {}
        except _DuplicateKey as error:
            raise ConfigError(f"{path}: line {error.line}: duplicate key {error.key} (first given at line "
                              f"{error.first}); give each key once") from None
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "somewhere"
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ConfigError(f"{path}: {where}: not valid YAML: {problem}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping of config keys at the top level")
    return raw


# What each model module checked in this process predicts, by _module_key: the wiring reads it here rather than
# loading the module a second time.
_CHECKED_TARGETS: dict[tuple, PredictionTarget] = {}


def _module_key(config: PipelineConfig) -> tuple:
    """What a model module's loading depends on: its name, the `task` section and the schema file (its path, and
    for a local file its size and modification time)."""
    schema = config.schema_path
    stat = os.stat(schema) if "://" not in schema and os.path.exists(schema) else None
    return (config.train.model, repr(config.task), schema, stat and (stat.st_size, stat.st_mtime_ns))


def with_schema_moved(config: PipelineConfig, schema_path: str) -> PipelineConfig:
    """Input: a checked config and where its schema is copied to (a staged copy, written later). Output: the
    config reading the copy, its prediction target the one checked against the schema where it is now."""
    target = prediction_target(config)
    moved = dataclasses.replace(config, schema_path=schema_path)
    _CHECKED_TARGETS[_module_key(moved)] = target
    return moved


def prediction_target(config: PipelineConfig) -> PredictionTarget:
    """What the config's model module predicts: checked and remembered by check_model_module (loaded here only
    when this process has not checked it)."""
    return _CHECKED_TARGETS.get(_module_key(config)) or check_model_module(config)


def check_model_module(config: PipelineConfig) -> PredictionTarget:
    """Output: what the model module predicts (its task, label and classes). Raises ConfigError naming `train.model` when the model module does not
    import, lacks part of components.core.model_module.ModelModule, or its task and classes do not fit (the message names
    the module and what is wrong), or the `task` section disagrees with it; naming `evaluate.gate_metrics`
    when a metric there is not one of the task's, and `evaluate.absolute_bar` when no model can meet it."""
    name, gate_metrics = config.train.model, config.evaluate.gate_metrics
    try:
        module = load_model_module(name, config.task, config.schema_path)
        check_task(module, name)
    except ModelModuleError as error:
        where = (f" (a module path such as models.taxi, importable from {PROJECT_ROOT} or the PYTHONPATH)"
                 if error.not_found else "")
        raise ConfigError(f"train.model: {error}{where}") from None
    target = PredictionTarget.of(module)
    task = target.task
    bar = config.evaluate.absolute_bar
    if bar is not None and (problem := task.primary.bar_problem(bar)):
        raise ConfigError(f"evaluate.absolute_bar: {problem}")
    allowed = [metric.name for metric in task.gateable()]
    for metric in gate_metrics:
        if metric not in allowed:
            raise ConfigError(f"evaluate.gate_metrics: {metric!r} is not a metric a {task.name} task can be gated "
                              f"on (one of {', '.join(allowed)})")
    _CHECKED_TARGETS[_module_key(config)] = target
    return target


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
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(raw) - set(fields))
    if unknown:
        raise ConfigError(f"unknown config key(s): {', '.join(prefix + key for key in unknown)} "
                          f"(known: {', '.join(sorted(prefix + key for key in fields))})")
    values = {}
    for name, value in raw.items():
        key, hint = prefix + name, hints[name]
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{key}: expected a mapping, got {type(value).__name__}")
            values[name] = _build(hint, value, prefix=key + ".", base=getattr(base, name))
            continue
        values[name] = _check_type(key, value, hint)
        check = fields[name].metadata.get(CHECK)
        if check is not None and not check.holds(values[name]):
            raise ConfigError(f"{key}: {check.message}, got {value!r}")
    return dataclasses.replace(base, **values)


def _check_type(key: str, value, hint):
    origin = typing.get_origin(hint)
    arguments = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType) and type(None) in arguments:  # `float | None`: null allowed
        if value is None:
            return None
        (hint,) = [argument for argument in arguments if argument is not type(None)]
    if origin is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"{key}: expected a list of strings, got {value!r}")
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, bool) or not isinstance(value, hint):
        raise ConfigError(f"{key}: expected {hint.__name__}, got {type(value).__name__} {value!r}")
    return value
