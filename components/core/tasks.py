"""What each supervised task means, for every step that asks: binary classification, multi-class
classification and regression, one Task object each (BinaryTask, MulticlassTask, RegressionTask).

A Task says: the label's dtype, which labels a task takes (`label_problem`) and how many classes it needs
(`class_problem`), the loss and the Keras metrics the Trainer compiles, the width and activation of the
model's output, the serving outputs the SavedModel returns (TF Serving's classify convention for
classifiers: `scores` [N, K] and `classes` [N, K]; `predictions` [N, 1] for regression) and the one TFMA and
the device model read, the TFMA metrics the evaluator computes, the primary metric the gates decide on and
its direction, whether tolerances are absolute or relative, the trivial predictor a model
must beat, and how a batch of predictions is scored outside TFMA (the TFLite ladder). The Trainer, the
evaluator, ModelExport, the schema-driven model, init, the config and the reports ask the Task; none of
them branches on a task name or asks which kind of task it is. A Task also builds the schema-driven model's
label parsing, output head and loss (`parse_label`, `output_layer`, `training_loss`), takes settings of its
own from the config's `task` section (`configured`; regression: `label_transform`) and proposes them to
`init` (`propose_settings`). A fourth task is one more subclass, here or in a user's own module, made known
with `register_task`.

Importing this module imports nothing heavy: Keras, TensorFlow and TFMA are imported inside the functions
that need them, so the config can check task names without loading TensorFlow.
"""
from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import re

import numpy as np

BINARY, MULTICLASS, REGRESSION = "binary", "multiclass", "regression"

# Serving output names (the SavedModel's signatures and the device model).
PROBABILITIES = "probabilities"  # binary: P(positive class), [N, 1]
SCORES = "scores"  # classification: one probability per class, [N, K]
CLASSES = "classes"  # classification: the class names, [N, K] strings
PREDICTIONS = "predictions"  # regression: the predicted value, [N, 1]


class TaskError(ValueError):
    """The task, the labels and the model do not fit together; the message names the key, feature or value."""


@dataclasses.dataclass(frozen=True)
class Metric:
    name: str  # as TFMA names it in the evaluation output (and the TFLite ladder, the reports)
    label: str  # as the summary and the reports print it
    higher_is_better: bool
    best: float | None = None  # the best value any model can score (1 for AUC and accuracy), None: unbounded

    def improvement(self, value: float, reference: float) -> float:
        """How much better `value` is than `reference` (negative: worse), in the metric's units."""
        return value - reference if self.higher_is_better else reference - value

    def bar_problem(self, bar: float) -> str:
        """Why no model can meet `bar` on this metric ("" when one can): beyond the metric's best value."""
        if self.best is None or (bar <= self.best if self.higher_is_better else bar >= self.best):
            return ""
        return (f"{bar:g} is beyond what any model scores on {self.label}, at best {self.best:g}, so that no model "
                f"would ever be blessed; {self.label} lies between 0 and 1 (0.85, not 85)")


AUC = Metric("auc", "AUC", True, best=1.0)
BINARY_ACCURACY = Metric("binary_accuracy", "accuracy", True, best=1.0)
BINARY_CROSSENTROPY = Metric("binary_crossentropy", "log loss", False)
ACCURACY = Metric("sparse_categorical_accuracy", "accuracy", True, best=1.0)
CROSSENTROPY = Metric("sparse_categorical_crossentropy", "log loss", False)
MAE = Metric("mean_absolute_error", "MAE", False)
MSE = Metric("mean_squared_error", "MSE", False)
RMSE = Metric("root_mean_squared_error", "RMSE", False)


class Task:
    """One supervised task (the subclasses below). Attributes: name, primary (the metric every gate decides
    on), metrics (what reports show, the primary first; any may be gated on by config), relative_tolerance
    (a tolerance is a fraction of the reference's value), prediction_key (the serving output TFMA, the TFLite
    ladder and the device model read), label_dtype (what make_label returns), validation_metric (the Keras
    metric the training report shows per epoch), output_activation (of the model's last layer),
    reports_confusion_matrix, settings (the config's `task` fields this task reads, with their defaults:
    `configured` returns the task carrying the config's values), float_device_output (the full-int8 device
    model keeps its last layer in float32: a value's 256 int8 levels over the calibration range would be
    too coarse, where a probability's fixed 1/256 scale is not) and head_name (the schema-driven model's output
    layer is tabular.<head_name>). How the schema-driven model is tuned for a task (its widths, weight decay,
    plan, calibration pool) is no part of the task: models/defaults.py holds it."""

    name: str
    primary: Metric
    metrics: tuple[Metric, ...]
    relative_tolerance: bool = False
    prediction_key: str = ""
    label_dtype: str = "float32"
    validation_metric: str = ""
    output_activation: str = "linear"
    reports_confusion_matrix: bool = False
    settings: dict = {}
    head_name: str = "output"
    float_device_output: bool = False

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:  # a task of one's own: named by its module:Class path, which task_named takes
            cls.name = f"{cls.__module__}:{cls.__qualname__}"

    def __init__(self, **settings):
        unknown = sorted(set(settings) - set(self.settings))
        if unknown:
            raise TaskError(f"{', '.join(unknown)}: not a setting of a {self.name} task")
        for name, value in {**self.settings, **settings}.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        return f"Task({self.name})"

    # -------------------------------------------------------------------------------------- settings
    def configured(self, task_config) -> "Task":
        """Input: the config's `task` section (components.settings.TaskConfig). Output: this task carrying the
        section's values of its own settings. TaskError names a task setting the section sets (away from its
        default) that this task does not take, or a value it does not allow."""
        for task in TASKS.values():
            for name, default in task.settings.items():
                value = getattr(task_config, name, default)
                if name not in self.settings and value not in (None, "", default):
                    raise TaskError(f"task.{name}: {value!r} applies to a {task.name} task, not a {self.name} one")
        configured = copy.copy(self)  # the same name, for a task known by its module:Class path too
        for name, default in self.settings.items():
            value = getattr(task_config, name, None)
            setattr(configured, name, default if value in (None, "") else value)
        configured.check_settings()
        return configured

    def check_settings(self) -> None:
        """Raises TaskError naming a setting whose value this task does not allow."""

    def propose_settings(self, label_numbers: "LabelNumbers | None") -> dict[str, tuple[object, str]]:
        """Input: the label's numbers in init's sample (None: none). Output: setting name -> (value, why), what
        init writes into the config's `task` section for this task."""
        return {}

    def metric(self, name: str) -> Metric:
        """The metric of this task called `name`; TaskError naming the task's metrics otherwise."""
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise TaskError(f"{name!r} is not a metric of a {self.name} task (its metrics: "
                        f"{', '.join(metric.name for metric in self.metrics)})")

    def tolerance(self, tolerance: float, reference: float) -> float:
        """A configured tolerance in the metric's units: as it is, or times |reference| when relative."""
        return tolerance * abs(reference) if self.relative_tolerance else tolerance

    def gateable(self) -> tuple[Metric, ...]:
        """The metrics a paired comparison can decide on: AUC, and every average over examples (not RMSE:
        gate on MSE, its square)."""
        return tuple(metric for metric in self.metrics if metric is not RMSE)

    # ------------------------------------------------------------------------------- labels and classes
    def class_problem(self, classes: tuple[str, ...]) -> str:
        """Why `classes` do not fit this task ("" when they do)."""
        raise NotImplementedError

    def label_problem(self, kind: str, distinct: int, whole: bool) -> str:
        """Why a label column of this `kind` (int | float | string) with `distinct` values (all whole
        numbers: `whole`) cannot serve this task ("" when it can)."""
        raise NotImplementedError

    def output_width(self, classes: tuple[str, ...]) -> int:
        """The width of the model's output: 1 (a probability, a value) or K class probabilities."""
        return 1

    def invalid_labels(self, labels: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
        """True for each label the task and its classes do not allow: a class id outside 0..K-1 (a value the
        model module maps to none of its classes), a NaN or infinite value."""
        labels = np.asarray(labels).reshape(-1)
        return ~np.isin(labels, np.arange(len(classes)))

    def check_labels(self, labels: np.ndarray, classes: tuple[str, ...], where: str) -> None:
        """Raises TaskError naming `where` when a label is not one the task and its classes allow."""
        labels = np.asarray(labels).reshape(-1)
        bad = labels[self.invalid_labels(labels, classes)]
        if bad.size:
            declared = ", ".join(f"{i} {name!r}" for i, name in enumerate(classes))
            raise TaskError(f"{where}: label {bad[0]!r} is outside the declared classes ({declared}); "
                            f"{bad.size} example(s) have such labels")

    def summarize_labels(self, labels: np.ndarray, classes: tuple[str, ...]) -> LabelSummary:
        """Input: every label of a split. Output: its LabelSummary."""
        labels = np.asarray(labels).reshape(-1)
        counts = self.class_counts(labels, classes)
        if not len(labels):
            return LabelSummary(0, 0.0, counts)
        return LabelSummary(len(labels), float(labels.mean()), counts)

    def class_counts(self, labels: np.ndarray, classes: tuple[str, ...]) -> tuple[int, ...]:
        """Examples per class id (() for a task without classes)."""
        return ()

    def class_names(self, values: list) -> list[str]:
        """Input: a label column's distinct values (sorted; whole floats as whole numbers). Output: the task's
        CLASSES for them, label id 0, 1, ... in this order ([] for a task without classes)."""
        return []

    def label_advice(self) -> str:
        """What to do about labels the task does not allow (ends an error message)."""
        return "leave those records out"

    def string_label_advice(self) -> str:
        """What to do when a model module's make_label returns strings (ends an error message)."""
        return ""

    # ---------------------------------------------------------------- the schema-driven model (models.tabular)
    def parse_label(self, value, classes: tuple[str, ...]):
        """Input: the label column's parsed tensor [N] and the CLASSES. Output: the label make_label returns,
        in label_dtype."""
        raise NotImplementedError

    def label_profile(self, labels: np.ndarray) -> np.ndarray:
        """Input: training labels as read. Output: [N, D] float64 whose means over a group of records show how
        the label varies between groups: classification one column per label value (1 where the record has
        it), regression the label's rank / (N + 1) (a heavy tail weighs no more than its rank)."""
        raise NotImplementedError

    def output_layer(self, training_labels: np.ndarray, name: str):
        """Input: the training sample's labels (as parse_label returns them) and the layer's name. Output: the
        Keras layer that turns each packed member's raw output [N, M, width] into the task's output, float32
        whatever the precision policy."""
        raise NotImplementedError

    def training_loss(self):
        """The loss the schema-driven model trains each member with (after any label transform)."""
        return self.loss()

    def head_description(self) -> str:
        """What the schema-driven model's head and loss are, beyond the task's defaults ("" for none)."""
        return ""

    # ---------------------------------------------------------------------------------- device model
    def output_difference_scale(self, reference: np.ndarray) -> float:
        """What a device model's output differences are divided by, so one tolerance serves any label scale:
        1 for probabilities."""
        return 1.0

    def calibration_choice(self, pool_rows: int, predictions, rows: int) -> np.ndarray:
        """Input: how many training records the calibration pool holds (the model module's CALIBRATION_POOL x
        `rows` at most), a function that returns the SavedModel's predictions on them (called only by a task
        that needs them), and `rows`. Output: the positions of the full-int8 calibration rows in the pool (the
        first `rows`)."""
        return np.arange(min(rows, pool_rows))

    # --------------------------------------------------------------------------------------- training
    def loss(self):
        """The Keras loss the Trainer compiles unless the model module brings its own (make_loss)."""
        raise NotImplementedError

    def keras_metrics(self) -> list:
        """The Keras metrics the Trainer reports per epoch (named as in the training report's history)."""
        raise NotImplementedError

    # ---------------------------------------------------------------------------------------- serving
    def serving_outputs(self, output, classes: tuple[str, ...]) -> dict:
        """Input: the model's float32 output tensor ([N, 1] or [N, K]) and the class names. Output: the
        signature's outputs."""
        raise NotImplementedError

    def output_description(self, classes: tuple[str, ...]) -> str:
        """What the device model returns, for the export report."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------- evaluation
    def tfma_metrics(self, num_classes: int) -> list[tuple[tuple[str, ...], tuple[int, ...]]]:
        """The TFMA metrics the evaluator computes for every model, as (TFMA metric class names, class ids
        to binarize them by: () for none) per MetricsSpec."""
        raise NotImplementedError

    def derived_metrics(self, metrics: dict[str, float | None]) -> dict[str, float | None]:
        """TFMA's metrics of one model and slice plus what the reports derive from them."""
        return dict(metrics)

    def score(self, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
        """Input: labels [N] and the prediction_key output ([N] or [N, 1]; [N, K] for multiclass). Output:
        the task's metrics, computed exactly in numpy (the TFLite ladder, the gates)."""
        raise NotImplementedError

    def per_example(self, metric: Metric, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
        """Per-example values whose mean is `metric` (every metric but AUC): what paired comparisons resample."""
        raise TaskError(f"{metric.name} is not an average over examples in a {self.name} task")

    # ------------------------------------------------------------------------------ trivial predictor
    # The trivial predictor is the best constant on the eval labels themselves, chosen in hindsight: no model
    # that predicts one value for every example can beat it, whichever constant it learned (a constant fitted
    # on the training split can land nearer the eval split's best one and beat it by a hair).
    def trivial_predictions(self, labels: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
        """Input: the eval labels, the task's classes. Output: what a model that learned nothing predicts for
        each of them, in the prediction_key's shape: the best constant on these labels under the primary
        metric."""
        raise NotImplementedError

    def trivial_description(self, labels: np.ndarray, classes: tuple[str, ...]) -> str:
        """The trivial predictor in words, for the reports."""
        raise NotImplementedError


_EPSILON = 1e-7  # Keras's clipping of probabilities inside its cross-entropies


class ClassificationTask(Task):
    """What binary and multi-class classification share: named classes, a label that is a class id, a model
    whose output is probabilities."""
    head_name = "probabilities"

    def class_problem(self, classes):
        if len(set(classes)) != len(classes) or not all(isinstance(name, str) and name for name in classes):
            return f"CLASSES must be distinct, non-empty names, got {classes!r}"
        return ""

    def class_counts(self, labels, classes):
        return tuple(int(c) for c in np.bincount(np.asarray(labels).astype(np.int64), minlength=len(classes)))

    def class_names(self, values):
        return [str(value) for value in values]

    def label_profile(self, labels):
        _, ids = np.unique(np.asarray(labels), return_inverse=True)
        return np.eye(ids.max() + 1 if ids.size else 1)[ids.reshape(-1)]

    def label_advice(self):
        return "add such a class to task.classes in the config (in label order), or leave those records out"

    def string_label_advice(self):
        return " (map the class names to their ids)"

    def parse_label(self, value, classes):
        """The class id of the label's value among `classes` (-1 for any other value, which the Trainer
        reports). A float column (pandas writes class ids as 0.0, 1.0) is compared as numbers."""
        import tensorflow as tf

        if value.dtype.is_floating:
            names = [float(name) if _is_number(name) else float("nan") for name in classes]
            matches = tf.equal(tf.expand_dims(value, -1), tf.constant(names, value.dtype))
        else:
            text = value if value.dtype == tf.string else tf.strings.as_string(value)
            matches = tf.equal(tf.expand_dims(text, -1), tf.constant(list(classes)))
        class_id = tf.where(tf.reduce_any(matches, axis=-1), tf.argmax(tf.cast(matches, tf.int64), axis=-1),
                            tf.constant(-1, tf.int64))
        return tf.cast(class_id, self.label_dtype)

    def output_layer(self, training_labels, name):
        """A sigmoid (binary) or a softmax (multiclass) per member."""
        import keras
        return keras.layers.Activation(self.output_activation, dtype="float32", name=name)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


class BinaryTask(ClassificationTask):
    """Two classes (negative, positive); the model outputs P(positive) [N, 1]; gates on AUC."""
    name = BINARY
    primary = AUC
    metrics = (AUC, BINARY_ACCURACY, BINARY_CROSSENTROPY)
    prediction_key = PROBABILITIES
    validation_metric = "auc"
    output_activation = "sigmoid"

    def class_problem(self, classes):
        return super().class_problem(classes) or (
            "" if len(classes) == 2 else (f"a binary task has exactly 2 (negative, positive) CLASSES, got "
                                          f"{len(classes)}: {classes!r}"))

    def label_problem(self, kind, distinct, whole):
        if kind == "float" and not whole:
            return "holds fractional numbers; a class label holds strings or whole numbers"
        return "" if distinct == 2 else f"has {distinct} distinct values, not 2"

    def loss(self):
        import keras
        return keras.losses.BinaryCrossentropy()

    def keras_metrics(self):
        import keras
        return [keras.metrics.AUC(name="auc"), keras.metrics.BinaryAccuracy(name="binary_accuracy")]

    def serving_outputs(self, output, classes):
        import tensorflow as tf
        scores = tf.concat([1.0 - output, output], axis=1)
        names = tf.tile(tf.constant([list(classes)], tf.string), [tf.shape(scores)[0], 1])
        return {SCORES: scores, CLASSES: names, PROBABILITIES: output}

    def output_description(self, classes):
        return f"{PROBABILITIES}: float32 [1, 1], the probability of {classes[1]!r}"

    def tfma_metrics(self, num_classes):
        return [(("ExampleCount", "BinaryCrossEntropy", "BinaryAccuracy", "AUC", "Precision", "Recall"), ())]

    def score(self, labels, predictions):
        labels = np.asarray(labels).reshape(-1)
        predictions = np.asarray(predictions, np.float64).reshape(-1)
        return {AUC.name: auc(labels, predictions),
                BINARY_ACCURACY.name: float(self.per_example(BINARY_ACCURACY, labels, predictions).mean()),
                BINARY_CROSSENTROPY.name: float(self.per_example(BINARY_CROSSENTROPY, labels, predictions).mean())}

    def per_example(self, metric, labels, predictions):
        labels = np.asarray(labels).reshape(-1)
        predictions = np.asarray(predictions, np.float64).reshape(-1)
        if metric is BINARY_ACCURACY:
            return ((predictions > 0.5) == (labels > 0.5)).astype(np.float64)
        if metric is BINARY_CROSSENTROPY:
            clipped = np.clip(predictions, _EPSILON, 1 - _EPSILON)
            return -(labels * np.log(clipped) + (1 - labels) * np.log(1 - clipped))
        return super().per_example(metric, labels, predictions)

    def trivial_predictions(self, labels, classes):
        labels = np.asarray(labels, np.float64).reshape(-1)
        return np.full(len(labels), labels.mean() if len(labels) else 0.5)  # any constant has AUC 0.5

    def trivial_description(self, labels, classes):
        share = float(np.mean(labels)) if len(labels) else 0.5
        return f"a constant ({share:.4f}, the eval split's share of positives): AUC 0.5"


class MulticlassTask(ClassificationTask):
    """Three or more classes; the model outputs K class probabilities [N, K]; gates on accuracy."""
    name = MULTICLASS
    primary = ACCURACY
    metrics = (ACCURACY, CROSSENTROPY)
    prediction_key = SCORES
    label_dtype = "int64"
    validation_metric = "accuracy"
    output_activation = "softmax"
    reports_confusion_matrix = True

    def class_problem(self, classes):
        return super().class_problem(classes) or (
            "" if len(classes) >= 3 else f"a multiclass task has 3 or more CLASSES, got {len(classes)}: {classes!r}")

    def label_problem(self, kind, distinct, whole):
        if kind == "float" and not whole:
            return "holds fractional numbers; a class label holds strings or whole numbers"
        return "" if distinct >= 3 else f"has {distinct} distinct values; a multi-class label has 3 or more"

    def output_width(self, classes):
        return len(classes)

    def loss(self):
        import keras
        return keras.losses.SparseCategoricalCrossentropy()

    def keras_metrics(self):
        import keras
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]

    def serving_outputs(self, output, classes):
        import tensorflow as tf
        names = tf.tile(tf.constant([list(classes)], tf.string), [tf.shape(output)[0], 1])
        return {SCORES: output, CLASSES: names}

    def output_description(self, classes):
        return f"{SCORES}: float32 [1, {len(classes)}], one probability per class ({', '.join(classes)})"

    def tfma_metrics(self, num_classes):
        """Per-class recall in a spec of its own (binarize applies to every metric of its spec) and the
        confusion matrix as a plot."""
        return [(("ExampleCount", "SparseCategoricalAccuracy", "SparseCategoricalCrossentropy",
                  "MultiClassConfusionMatrixPlot"), ()),
                (("Recall",), tuple(range(num_classes)))]

    def score(self, labels, predictions):
        return {ACCURACY.name: float(self.per_example(ACCURACY, labels, predictions).mean()),
                CROSSENTROPY.name: float(self.per_example(CROSSENTROPY, labels, predictions).mean())}

    def per_example(self, metric, labels, predictions):
        labels = np.asarray(labels).reshape(-1)
        predictions = np.asarray(predictions, np.float64)
        if metric is ACCURACY:
            return (predictions.argmax(axis=1) == labels).astype(np.float64)
        if metric is CROSSENTROPY:
            clipped = np.clip(predictions, _EPSILON, 1 - _EPSILON)
            return -np.log(clipped[np.arange(len(labels)), labels.astype(np.int64)] / clipped.sum(axis=1))
        return super().per_example(metric, labels, predictions)

    def trivial_predictions(self, labels, classes):
        predictions = np.zeros((len(np.reshape(labels, -1)), len(classes)))
        predictions[:, _majority(labels, classes)] = 1.0  # certainty on the majority class
        return predictions

    def trivial_description(self, labels, classes):
        return f"always {classes[_majority(labels, classes)]!r}, the eval split's majority class"


def _majority(labels: np.ndarray, classes: tuple[str, ...]) -> int:
    """The most frequent class id among `labels` (the first of the tied ones; 0 when there are none)."""
    labels = np.asarray(labels).reshape(-1).astype(np.int64)
    return int(np.argmax(np.bincount(labels, minlength=len(classes)))) if len(labels) else 0


class RegressionTask(Task):
    """A value; the model outputs it [N, 1]; gates on MAE, tolerances relative to the reference's MAE."""
    name = REGRESSION
    primary = MAE
    metrics = (MAE, RMSE, MSE)
    relative_tolerance = True
    prediction_key = PREDICTIONS
    validation_metric = "mae"
    # label_transform (schema-driven model): "log" trains and predicts log(1 + label), for a label >= 0 with a
    # long right tail such as a price; "none" the label as it is
    settings = {"label_transform": "none"}
    head_name = "prediction"
    float_device_output = True
    LABEL_TRANSFORMS = ("none", "log")
    # init proposes the log transform for a label >= 0 from this skewness, Pearson's (3 (mean - median) / std) or
    # the deciles' ((q90 + q10 - 2 median) / (q90 - q10)): a far tail inflates the std, so Pearson's stays low
    # for a count that is 0 in half the records and in the thousands in a few; the deciles', blind to the far
    # tail, does not
    LOG_LABEL_SKEW = 0.5

    def class_problem(self, classes):
        return f"a regression task has no CLASSES, got {classes!r}" if classes else ""

    def label_profile(self, labels):
        labels = np.asarray(labels, dtype=np.float64)
        return (np.argsort(np.argsort(labels, kind="stable"), kind="stable") + 1.0)[:, None] / (len(labels) + 1)

    def check_settings(self):
        if self.label_transform not in self.LABEL_TRANSFORMS:
            raise TaskError(f"task.label_transform: {self.label_transform!r} is not one of "
                            f"{', '.join(self.LABEL_TRANSFORMS)}")

    def propose_settings(self, label_numbers):
        """log for a label >= 0 with a long right tail (Pearson's or the deciles' skewness at least
        LOG_LABEL_SKEW), else none."""
        if label_numbers is None:
            return {"label_transform": ("none", "no statistics of the label")}
        numbers = label_numbers
        skew = 3 * (numbers.mean - numbers.median) / numbers.std if numbers.std > 0 else 0.0
        facts = f"least {numbers.least:g}, median {numbers.median:g}, mean {numbers.mean:g}, skewness {skew:.2f}"
        decile_skew = numbers.decile_skewness()
        if decile_skew is not None:
            facts += f", deciles' skewness {decile_skew:.2f}"
        if numbers.least >= 0 and max(skew, decile_skew or 0.0) >= self.LOG_LABEL_SKEW:
            return {"label_transform": ("log", f"a label >= 0 with a long right tail: {facts}")}
        return {"label_transform": ("none", facts)}

    def parse_label(self, value, classes):
        import tensorflow as tf
        return tf.cast(value, tf.float32)

    def output_layer(self, training_labels, name):
        """The value in the label's units (task_layers.LabelOutput): the members' outputs scaled to the
        transformed training labels' spread and clamped to their range."""
        from components.core.task_layers import LabelOutput, label_range
        return LabelOutput(*label_range(training_labels, self.label_transform), log=self.label_transform == "log",
                           dtype="float32", name=name)

    def training_loss(self):
        """The absolute error after the label transform, which the MAE the gates score rewards."""
        from components.core.task_layers import TransformedAbsoluteError
        return TransformedAbsoluteError(log=self.label_transform == "log")

    def head_description(self):
        return (f"; label transform {self.label_transform}, absolute-error loss, predictions clamped to the "
                "training labels' range")

    def output_difference_scale(self, reference):
        """The spread of the SavedModel's predictions (their mean absolute deviation)."""
        reference = np.asarray(reference, np.float64)
        return max(float(np.abs(reference - reference.mean()).mean()), 1e-12)

    def calibration_choice(self, pool_rows, predictions, rows):
        """`rows` records spread evenly over the range of the predictions, extremes included: every int8
        activation range then spans what the model predicts on its training data."""
        order = np.argsort(np.asarray(predictions()).reshape(-1), kind="stable")
        return np.unique(order[np.linspace(0, len(order) - 1, min(rows, len(order))).round().astype(int)])

    def label_problem(self, kind, distinct, whole):
        return "holds strings; choose binary or multiclass, or another label" if kind == "string" else ""

    def invalid_labels(self, labels, classes):
        return ~np.isfinite(np.asarray(labels).reshape(-1))

    def check_labels(self, labels, classes, where):
        bad = self.invalid_labels(labels, classes)
        if bad.any():
            raise TaskError(f"{where}: {int(bad.sum())} label(s) are NaN or infinite")

    def loss(self):
        import keras
        return keras.losses.MeanSquaredError()

    def keras_metrics(self):
        import keras
        return [keras.metrics.MeanAbsoluteError(name="mae"), keras.metrics.RootMeanSquaredError(name="rmse")]

    def serving_outputs(self, output, classes):
        return {PREDICTIONS: output}

    def output_description(self, classes):
        return f"{PREDICTIONS}: float32 [1, 1]"

    def tfma_metrics(self, num_classes):
        return [(("ExampleCount", "MeanSquaredError", "MeanAbsoluteError", "MeanLabel", "MeanPrediction",
                  "Calibration"), ())]

    def derived_metrics(self, metrics):
        if metrics.get(MSE.name) is not None:
            return {**metrics, RMSE.name: math.sqrt(metrics[MSE.name])}
        return dict(metrics)

    def score(self, labels, predictions):
        predictions = np.asarray(predictions, np.float64).reshape(-1)
        mse = float(self.per_example(MSE, labels, predictions).mean())
        return {MAE.name: float(self.per_example(MAE, labels, predictions).mean()), MSE.name: mse,
                RMSE.name: math.sqrt(mse)}

    def per_example(self, metric, labels, predictions):
        labels = np.asarray(labels).reshape(-1)
        predictions = np.asarray(predictions, np.float64).reshape(-1)
        if metric is MAE:
            return np.abs(labels - predictions)
        if metric is MSE:
            return (labels - predictions) ** 2
        return super().per_example(metric, labels, predictions)

    def trivial_predictions(self, labels, classes):
        # The median label is the constant with the lowest MAE (the mean has the lowest MSE but a larger MAE
        # on skewed labels).
        labels = np.asarray(labels, np.float64).reshape(-1)
        return np.full(len(labels), np.median(labels) if len(labels) else 0.0)

    def trivial_description(self, labels, classes):
        median = float(np.median(labels)) if len(labels) else 0.0
        return f"always {median:.6g}, the eval split's median label (the best constant under MAE)"


TASKS = {task.name: task for task in (BinaryTask(), MulticlassTask(), RegressionTask())}
TASK_NAMES = tuple(TASKS)  # the tasks that ship with the pipeline (register_task adds to TASKS)
CLASSIFICATION_MAX_INTS = 20  # an integer label with at most this many distinct values is a class id


def register_task(task: Task) -> Task:
    """Makes a Task of one's own known by its name (config checks, reports, every step in this process), as
    the three above are; returns it. TaskError when another task holds the name."""
    known = TASKS.get(task.name)
    if known is not None and type(known) is not type(task):
        raise TaskError(f"a task named {task.name!r} is known already ({type(known).__name__})")
    TASKS[task.name] = task
    return task


TASK_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")  # a task of one's own: module:Class


def task_named(name: str) -> Task:
    """Input: a known task's name, or a task of one's own as a `module:Class` path (TASK_PATH). Output: the Task;
    a path's class is imported, must subclass Task, and is made known under the path, which is then its name in
    every record (any process resolves it again). TaskError naming the known tasks, or what the path lacks."""
    if name in TASKS:
        return TASKS[name]
    if not isinstance(name, str) or not TASK_PATH.fullmatch(name):
        raise TaskError(f"unknown task {name!r} (one of {', '.join(TASKS)}, or a task of your own as module:Class)")
    module_name, _, class_name = name.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - whatever importing the user's module raised
        raise TaskError(f"task {name!r}: importing {module_name!r} failed: {type(error).__name__}: {error}") from None
    kind = getattr(module, class_name, None)
    if not (isinstance(kind, type) and issubclass(kind, Task)):
        raise TaskError(f"task {name!r}: {module_name} defines no Task subclass {class_name} "
                        "(components.core.tasks.Task)")
    task = kind()
    task.name = name
    TASKS[name] = task
    return task


def task_declared(declared: "Task | str") -> Task:
    """Input: what a model module declares as its TASK: a Task, or a name task_named takes. Output: the Task;
    TaskError for an unknown name."""
    return declared if isinstance(declared, Task) else task_named(declared)


@dataclasses.dataclass(frozen=True)
class LabelNumbers:
    """A numeric label's statistics in init's sample, what propose_settings decides from; the 10th and 90th
    percentiles None where unknown."""
    least: float
    median: float
    mean: float
    std: float
    tenth: float | None = None
    ninetieth: float | None = None

    def decile_skewness(self) -> float | None:
        """(q90 + q10 - 2 median) / (q90 - q10), in [-1, 1]: 0 for a symmetric label, towards 1 the longer the right
        tail beyond the median; None without the percentiles or when they are equal."""
        if self.tenth is None or self.ninetieth is None or self.ninetieth <= self.tenth:
            return None
        return (self.ninetieth + self.tenth - 2 * self.median) / (self.ninetieth - self.tenth)


def task_for_label(kind: str, distinct: int, whole: bool) -> Task:
    """The task a label column suggests (init's choice when no task is asked for): strings, integers with at
    most CLASSIFICATION_MAX_INTS values and floats with two whole values are classes (binary with two,
    multiclass with more); other numbers are a regression."""
    classes = kind == "string" or (kind == "int" and distinct <= CLASSIFICATION_MAX_INTS) or (whole and distinct == 2)
    if not classes:
        return TASKS[REGRESSION]
    return TASKS[BINARY] if distinct == 2 else TASKS[MULTICLASS]


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The exact ROC AUC (Mann-Whitney, ties counted half); 0.5 when one class is absent."""
    from scipy.stats import rankdata

    labels = np.asarray(labels).reshape(-1) > 0.5
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return 0.5
    ranks = rankdata(np.asarray(scores, np.float64).reshape(-1))
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


@dataclasses.dataclass(frozen=True)
class LabelSummary:
    """The labels of one split, as the Trainer counted them (recorded in the model's facts)."""
    examples: int
    mean: float  # the mean label (binary: the share of positives)
    class_counts: tuple[int, ...] = ()  # classification: examples per class id

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: dict) -> "LabelSummary":
        return cls(int(value["examples"]), float(value["mean"]), tuple(value.get("class_counts", ())))


LEGACY_TASK = BINARY  # a report or model from before reports named their task: the binary taxi model of its day


@dataclasses.dataclass(frozen=True)
class PredictionTarget:
    """What the models of a run predict: the label key, the task and the class names (from the model module),
    and the features the label is read from that the model does not read: what the eval split, the folds and
    the validation holdout leave out of a record's hash (components.core.record_keys)."""
    label_key: str
    task_name: str
    classes: tuple[str, ...] = ()
    label_sources: tuple[str, ...] = ()

    @property
    def task(self) -> Task:
        return task_named(self.task_name)

    @classmethod
    def of(cls, module) -> "PredictionTarget":
        """What a model module's models predict (components.core.model_module.ModelModule); TaskError for a TASK
        that names no task."""
        sources = tuple(sorted(set(module.LABEL_INPUTS) - set(module.INPUTS)))
        return cls(module.LABEL_KEY, task_declared(module.TASK).name, tuple(module.CLASSES), sources)

    def to_json(self) -> dict:
        return {"label_key": self.label_key, "task": self.task_name, "classes": list(self.classes),
                "label_sources": list(self.label_sources)}

    @classmethod
    def from_json(cls, value: dict) -> "PredictionTarget":
        return cls(value["label_key"], value.get("task", LEGACY_TASK), tuple(value.get("classes", ())),
                   tuple(value.get("label_sources", ())))

    def mismatch(self, facts) -> str:
        """Why a model described by `facts` (components.core.records.ModelFacts) cannot be compared with this
        target's models ("" when it can)."""
        if facts.legacy:
            return "" if self.task_name == facts.task_name else (
                f"it predates model facts (a {facts.task_name} model); the candidate is {self.task_name}")
        if facts.task_name != self.task_name or tuple(facts.classes) != tuple(self.classes):
            return (f"it predicts a {facts.task_name} task with classes {list(facts.classes)}, the candidate a "
                    f"{self.task_name} task with classes {list(self.classes)}")
        if facts.label and facts.label != self.label_key:
            return f"it predicts the label {facts.label!r}, the candidate {self.label_key!r}"
        return ""
