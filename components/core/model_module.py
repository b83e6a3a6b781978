"""What a model module provides (the module `train.model` names, e.g. models.taxi), declared once, and the
one loader every user of a model module goes through.

A new model is one file in models/ that defines the names of `ModelModule`; `load_model_module` imports it
and names whatever is missing or not callable, and `check_task` checks its task and classes (config load
turns either into an error on `train.model`, before any step runs); the Trainer checks the labels' dtype and
the model's output against the task before it trains.
"""
from __future__ import annotations

import importlib
import typing

from components.core.feature_names import internal_names
from components.core.tasks import TASKS, Task, TaskError, task_declared

if typing.TYPE_CHECKING:
    import keras
    import numpy as np
    import tensorflow as tf


class ModelModule(typing.Protocol):
    """The interface of a model module."""

    TASK: str | Task  # a task's name (binary | multiclass | regression, a registered one, or module:Class), or a Task
    CLASSES: tuple[str, ...]  # classification: the class names by label id (binary: negative, positive); regression: ()
    INPUTS: dict[str, tf.io.FixedLenFeature]  # raw serving inputs: name -> how to parse it from a tf.Example
    LABEL_INPUTS: dict[str, tf.io.FixedLenFeature]  # raw features the label is derived from (training data only)
    LABEL_KEY: str  # the label's name in transform_features' output

    @staticmethod
    def make_label(features: dict[str, tf.Tensor]) -> tf.Tensor:
        """Parsed LABEL_INPUTS -> one label per example: float32 0/1 (binary), int64 class id (multiclass),
        float32 value (regression)."""

    @staticmethod
    def build_preprocessing(sample: dict[str, np.ndarray]) -> keras.Model:
        """A sample of training rows (name -> 1-D array of the INPUTS and LABEL_INPUTS features) -> a fitted
        Keras model, raw INPUTS features -> model-ready tensors, built from device-safe layers."""

    @staticmethod
    def build_model(preprocessing: keras.Model) -> keras.Model:
        """The preprocessing model -> an uncompiled Keras model, model-ready tensors -> [N, 1] probability of
        the positive class (binary), [N, K] class probabilities (multiclass) or [N, 1] value (regression).
        With train.folds k > 1 the Trainer builds it once per fold, the copies side by side
        (components/core/packing.py); a module may instead pack its members itself, below.
        Optional beside it: build_packed(preprocessing, copies) -> an uncompiled Keras model, model-ready tensors
        -> [N, M, width], the predictions of M members (a multiple of `copies`; copy g's M / copies members
        contiguous), each the output build_model describes, their weights with a leading member axis
        (models/packed.py's layers), which the Trainer then trains instead of build_model's copies and whose
        members' mean it serves; make_loss() -> a Keras loss, used instead of the task's default; INPUT_NOTES, a dict
        column -> what a caller of the device model passes for it (e.g. a date's unit), which the export
        report shows; DESCRIPTION, a line saying what the model is, which the training report shows;
        CANDIDATES, names of variants of the model (the default first), and candidate(name) -> a new module object
        with that variant (the one it is called on unchanged), which the Trainer trains in turn with
        `train.search`, serving the one best on validation; CALIBRATION_POOL, an int: ModelExport chooses the
        full-int8 calibration rows (the task's calibration_choice) among this many times as many training records
        (default CALIBRATION_POOL below; models/tabular.py takes its task's from models/defaults.py)."""


CONSTANTS = ("TASK", "CLASSES", "INPUTS", "LABEL_INPUTS", "LABEL_KEY")
FUNCTIONS = ("make_label", "build_preprocessing", "build_model")
OPTIONAL_FUNCTIONS = ("make_loss", "build_packed")
CONFIGURE = "configure"  # a schema-driven module's factory: configure(schema_path, task_config) -> ModelModule
# The calibration pool of a module that declares none: wide enough for a task whose calibration_choice spreads the
# rows over the range of the predictions (a value); a task that takes the first rows reads the rest for nothing
CALIBRATION_POOL = 20


class ModelModuleError(ValueError):
    """A model module that does not import, lacks part of ModelModule, or whose task, labels and output do
    not fit; the message names the module. `not_found`: no module of that name was found (a wrong path
    rather than a broken module)."""

    def __init__(self, message: str, not_found: bool = False):
        super().__init__(message)
        self.not_found = not_found


def _names_the_module(missing: str, name: str) -> bool:
    """True when the missing module is `name` itself or one of its parent packages (models in models.taxi)."""
    return name == missing or name.startswith(missing + ".")


def load_model_module(name: str, task_config=None, schema_path: str | None = None) -> ModelModule:
    """Input: a module path (models.taxi), the config's `task` section (components.settings.TaskConfig; None:
    not given) and the curated schema's path. Output: the model module, checked against ModelModule: the
    imported module, or for a schema-driven module (one that defines configure(schema_path, task_config), such as
    models.tabular) what configure returns. Raises ModelModuleError naming the module and what it lacks, or
    the `task` field that disagrees with what the module declares."""
    problem = not_a_model_module(name)
    if problem:
        raise ModelModuleError(problem)
    try:
        module = importlib.import_module(name)
    except ModuleNotFoundError as error:
        if not _names_the_module(error.name or "", name):  # the module was found; one of its own imports was not
            raise ModelModuleError(f"importing {name!r} failed: {type(error).__name__}: {error}") from None
        raise ModelModuleError(f"cannot import {name!r}: {error}", not_found=True) from None
    except Exception as error:  # noqa: BLE001 - whatever the module raised while importing
        raise ModelModuleError(f"importing {name!r} failed: {type(error).__name__}: {error}") from None
    configured = hasattr(module, CONFIGURE)
    if configured:
        if task_config is None or not schema_path:
            raise ModelModuleError(f"{name!r} is built from the schema and the config's task section, and was "
                                   "given neither")
        try:
            module = module.configure(schema_path, task_config)
        except (TaskError, OSError) as error:
            raise ModelModuleError(f"{name!r}: {error}") from None
    missing = [attribute for attribute in CONSTANTS + FUNCTIONS if not _has(module, attribute)]
    not_callable = [attribute for attribute in FUNCTIONS + OPTIONAL_FUNCTIONS
                    if _has(module, attribute) and not callable(getattr(module, attribute))]
    if missing or not_callable:
        problems = ([f"lacks {', '.join(missing)}"] if missing else []) + (
            [f"{', '.join(not_callable)} not callable"] if not_callable else [])
        raise ModelModuleError(f"{name!r} ({getattr(module, '__file__', '?')}) {'; '.join(problems)}; "
                               f"a model module defines {', '.join(CONSTANTS + FUNCTIONS)}")
    if task_config is not None and not configured:
        _check_agreement(module, name, task_config)
    return typing.cast(ModelModule, module)


def not_a_model_module(name: str) -> str:
    """Why the module `name` is no model module, found from its source without running it (importing a module
    runs its code: `this` prints a poem, a script of the working folder does its work): a built-in or compiled
    module, a package or file whose top level defines neither configure nor any of FUNCTIONS. "" when it may be
    one, or when it cannot be found (importing it then says why)."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)  # imports the packages `name` sits in, not `name` itself
    except (ImportError, ValueError):
        return ""
    if spec is None:
        return ""
    wanted = f"a model module defines {', '.join(CONSTANTS + FUNCTIONS)}, or {CONFIGURE}(schema_path, task_config)"
    origin = spec.origin or ""
    if not origin.endswith(".py"):
        what = "a module built into Python" if origin in ("built-in", "frozen") else (
            f"a package with no Python source ({', '.join(spec.submodule_search_locations or [])})"
            if not origin else f"a compiled module ({origin})")
        return f"{name!r} is not a model module: {what}; {wanted}"
    try:
        tree = ast.parse(spec.loader.get_source(name) or "", origin)  # the source, read as the import would
    except (ImportError, OSError, SyntaxError, ValueError, AttributeError):
        return ""  # importing it says what is wrong
    defined = _top_level_names(tree)
    if "*" in defined or defined & {CONFIGURE, *FUNCTIONS}:
        return ""
    return (f"{name!r} ({origin}) is not a model module: it defines none of {CONFIGURE}, {', '.join(FUNCTIONS)} "
            f"(it was not imported); {wanted}")


def _top_level_names(tree) -> set[str]:
    """The names a module's top level binds (definitions, assignments, imports; "*" for a star import), in
    conditional and try blocks too."""
    import ast

    names: set[str] = set()
    statements = list(tree.body)
    while statements:
        node = statements.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(alias.asname or alias.name).split(".")[0] for alias in node.names}
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {name.id for target in targets for name in ast.walk(target) if isinstance(name, ast.Name)}
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            for field in ("body", "orelse", "finalbody", "handlers"):
                statements += getattr(node, field, [])
        elif isinstance(node, ast.ExceptHandler):
            statements += node.body
    return names


def _has(module, attribute: str) -> bool:
    """hasattr without evaluating a property (a schema-driven module reads its schema on first use)."""
    return hasattr(type(module), attribute) or hasattr(module, attribute)


def _check_agreement(module, name: str, task_config) -> None:
    """Raises ModelModuleError naming the `task` field that disagrees with what a hand-written module declares."""
    declared = {"type": _task_name(getattr(module, "TASK", None)), "label": getattr(module, "LABEL_KEY", None),
                "classes": list(getattr(module, "CLASSES", ()))}
    for field, value in declared.items():
        given = getattr(task_config, field)
        if given and given != value:
            raise ModelModuleError(f"task.{field} is {given!r}, but {name!r} declares {value!r}; leave task.{field} "
                                   "out of the config, or make them agree")
    if task_config.exclude:
        raise ModelModuleError(f"task.exclude applies to schema-driven models; {name!r} chooses its own inputs "
                               "(leave task.exclude out)")


def check_task(module: ModelModule, name: str) -> None:
    """Raises ModelModuleError naming the module when its TASK is unknown or its CLASSES do not fit the task.
    What needs TensorFlow to run (the label's dtype, the model's output) is checked by the Trainer
    (check_label_dtype, check_output_width): running TensorFlow here would start its runtime in the process
    before the Trainer sets devices and distribution up."""
    try:
        task = task_of(module)
    except ModelModuleError as error:
        known = f"is not one of {', '.join(TASKS)}" if ":" not in str(module.TASK) else str(error)
        raise ModelModuleError(f"{name!r}: TASK {module.TASK!r} {known}") from None
    problem = task.class_problem(tuple(module.CLASSES))
    if problem:
        raise ModelModuleError(f"{name!r}: {problem}")


def check_label_dtype(module: ModelModule, dtype) -> None:
    """Raises TaskError when make_label's labels (of numpy `dtype`) are not what the module's task needs:
    strings anywhere, floats for class ids."""
    import numpy as np

    task = task_of(module)
    kind = np.dtype(dtype).kind
    if kind in "OSU":
        raise TaskError(f"label {module.LABEL_KEY!r}: make_label returns strings; a {task.name} task needs "
                        f"{task.label_dtype} labels{task.string_label_advice()}")
    if task.label_dtype == "int64" and kind != "i":
        raise TaskError(f"label {module.LABEL_KEY!r}: make_label returns {np.dtype(dtype).name}; a {task.name} task "
                        "needs int64 class ids")


def check_output_width(module: ModelModule, model) -> None:
    """Raises TaskError when the packed model's output (components/core/packing.py: [batch, members, width]) is
    not 1 (binary, regression) or K (multiclass) wide as the task needs: each member is what build_model returns
    (batch, width), or build_packed (batch, members, width)."""
    task = task_of(module)
    width = task.output_width(tuple(module.CLASSES))
    shape = tuple(model.output.shape)
    if len(shape) != 3 or shape[2] != width:
        if hasattr(module, "build_packed"):
            raise TaskError(f"a {task.name} task needs members' outputs of shape (batch, members, {width}); "
                            f"build_packed's output has shape {shape}")
        raise TaskError(f"a {task.name} task needs a model output of shape (batch, {width}); build_model's "
                        f"output has shape {(shape[0], *shape[2:])}")


def task_of(module: ModelModule) -> Task:
    """The Task the module declares (components/core/tasks.py): its TASK when that is a Task (a schema-driven
    module's, configured with the task section's settings), else the task of that name; ModelModuleError for
    an unknown one."""
    try:
        return task_declared(module.TASK)
    except TaskError as error:
        raise ModelModuleError(str(error)) from None


def _task_name(declared) -> str | None:
    """The name of a declared TASK (a Task or a name), or the declaration itself when it names no task."""
    try:
        return task_declared(declared).name
    except TaskError:
        return declared


def raw_signature_spec(inputs: dict, batch_size: int | None = None) -> dict:
    """Input: a model module's INPUTS (column -> tf.io.FixedLenFeature) and the batch size (None: any).
    Output: the input signature of a raw-feature signature (serving_raw, preprocess; the device model's
    serving_default is built alike, components/model_export/tflite.py): a dict keyed by column name, as
    the preprocessing model takes it, whose TensorSpecs are named by the columns' internal names
    (components/core/feature_names.py), which the signature's arguments are called (a column's own name may not
    be a valid argument name, and two that differ only in case collide). A column whose name already is
    valid keeps it."""
    import tensorflow as tf

    names = internal_names(list(inputs))
    return {column: tf.TensorSpec([batch_size], feature.dtype, name=names[column])
            for column, feature in inputs.items()}


def raw_signature_arguments(inputs: dict, features: dict) -> dict:
    """Input: a model module's INPUTS and raw features keyed by column name (any subset of INPUTS). Output:
    the same values keyed by the raw-feature signatures' argument names (the columns' internal names), to be
    passed as `signature(**arguments)`."""
    names = internal_names(list(inputs))
    return {names[column]: value for column, value in features.items()}
