"""What each supervised task means, for every step that asks: binary classification, multi-class
classification and regression, one Task object each (BinaryTask, MulticlassTask, RegressionTask).

A Task says: the label's dtype, which labels a task takes (`label_problem`) and how many classes it needs
(`class_problem`), the loss and the Keras metrics the Trainer compiles, the width and activation of the
model's output, the serving outputs the SavedModel returns (TF Serving's classify convention for
classifiers: `scores` [N, K] and `classes` [N, K]; `predictions` [N, 1] for regression) and the one TFMA and
the device model read, the TFMA metrics the evaluator computes, the primary metric the gates decide on and
its direction, whether tolerances are absolute or relative, the default bar, the trivial predictor a model
must beat, and how a batch of predictions is scored outside TFMA (the TFLite ladder). The Trainer, the
evaluator, ModelExport, the schema-driven model, init, the config and the reports ask the Task; none of
them branches on a task name. A fourth task is one more subclass here, added to TASKS.

Importing this module imports nothing heavy: Keras, TensorFlow and TFMA are imported inside the functions
that need them, so the config can check task names without loading TensorFlow.
"""
from __future__ import annotations

import dataclasses
import math

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

    def improvement(self, value: float, reference: float) -> float:
        """How much better `value` is than `reference` (negative: worse), in the metric's units."""
        return value - reference if self.higher_is_better else reference - value


AUC = Metric("auc", "AUC", True)
BINARY_ACCURACY = Metric("binary_accuracy", "accuracy", True)
BINARY_CROSSENTROPY = Metric("binary_crossentropy", "log loss", False)
ACCURACY = Metric("sparse_categorical_accuracy", "accuracy", True)
CROSSENTROPY = Metric("sparse_categorical_crossentropy", "log loss", False)
MAE = Metric("mean_absolute_error", "MAE", False)
MSE = Metric("mean_squared_error", "MSE", False)
RMSE = Metric("root_mean_squared_error", "RMSE", False)


class Task:
    """One supervised task (the subclasses below). Attributes: name, primary (the metric every gate decides
    on), metrics (what reports show, the primary first; any may be gated on by config), relative_tolerance
    (a tolerance is a fraction of the reference's value), prediction_key (the serving output TFMA, the TFLite
    ladder and the device model read), label_dtype (what make_label returns), validation_metric (the Keras
    metric the training report shows per epoch), output_activation (of the model's last layer), default_bar
    (the absolute bar on the primary metric when the config sets none; None: the config must set one),
    is_classification, reports_confusion_matrix."""

    name: str
    primary: Metric
    metrics: tuple[Metric, ...]
    relative_tolerance: bool = False
    prediction_key: str = ""
    label_dtype: str = "float32"
    validation_metric: str = ""
    output_activation: str = "linear"
    default_bar: float | None = None
    is_classification: bool = True
    reports_confusion_matrix: bool = False

    def __repr__(self) -> str:
        return f"Task({self.name})"

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
        counts = (tuple(int(c) for c in np.bincount(labels.astype(np.int64), minlength=len(classes)))
                  if self.is_classification else ())
        if not len(labels):
            return LabelSummary(0, 0.0, counts)
        return LabelSummary(len(labels), float(labels.mean()), counts)

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


class BinaryTask(Task):
    """Two classes (negative, positive); the model outputs P(positive) [N, 1]; gates on AUC."""
    name = BINARY
    primary = AUC
    metrics = (AUC, BINARY_ACCURACY, BINARY_CROSSENTROPY)
    prediction_key = PROBABILITIES
    validation_metric = "auc"
    output_activation = "sigmoid"
    default_bar = 0.9

    def class_problem(self, classes):
        return "" if len(classes) == 2 else (f"a binary task has exactly 2 (negative, positive) CLASSES, got "
                                             f"{len(classes)}: {classes!r}")

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


class MulticlassTask(Task):
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
        return "" if len(classes) >= 3 else f"a multiclass task has 3 or more CLASSES, got {len(classes)}: {classes!r}"

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
    is_classification = False

    def class_problem(self, classes):
        return f"a regression task has no CLASSES, got {classes!r}" if classes else ""

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
TASK_NAMES = tuple(TASKS)
CLASSIFICATION_MAX_INTS = 20  # an integer label with at most this many distinct values is a class id


def task_named(name: str) -> Task:
    """The Task called `name`; TaskError naming the known tasks otherwise."""
    if name not in TASKS:
        raise TaskError(f"unknown task {name!r} (one of {', '.join(TASK_NAMES)})")
    return TASKS[name]


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
