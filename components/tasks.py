"""What each supervised task means, for every step that asks: binary classification, multi-class
classification and regression.

One Task per kind says: the label's dtype, the loss and the Keras metrics the Trainer compiles, the
serving outputs the SavedModel returns (TF Serving's classify convention for classifiers: `scores` [N, K]
and `classes` [N, K]; `predictions` [N, 1] for regression) and the one TFMA and the device model read, the
TFMA metrics the evaluator computes, the primary metric the gates decide on and its direction, whether
tolerances are absolute or relative, the trivial predictor a model must beat, and how a batch of
predictions is scored outside TFMA (the TFLite ladder). The Trainer, the evaluator, ModelExport, the run
facts and the reports ask this module; none of them branches on a task name of its own.

Importing this module imports nothing heavy: Keras, TensorFlow and TFMA are imported inside the functions
that need them, so the config can check task names without loading TensorFlow.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

BINARY, MULTICLASS, REGRESSION = "binary", "multiclass", "regression"
TASK_NAMES = (BINARY, MULTICLASS, REGRESSION)

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


@dataclasses.dataclass(frozen=True)
class Task:
    name: str
    primary: Metric  # what every gate decides on
    metrics: tuple[Metric, ...]  # what reports show, the primary first; any of them may be gated on by config
    relative_tolerance: bool  # True: a tolerance is a fraction of the reference's value (regression)
    prediction_key: str  # the serving output TFMA, the TFLite ladder and the device model read
    label_dtype: str  # what make_label returns: float32 (0/1 or a value) or int64 (a class index)
    validation_metric: str  # the Keras metric the training report shows per epoch (its history key, without val_)

    @property
    def is_classification(self) -> bool:
        return self.name != REGRESSION

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


TASKS = {
    BINARY: Task(BINARY, AUC, (AUC, BINARY_ACCURACY, BINARY_CROSSENTROPY), False, PROBABILITIES, "float32", "auc"),
    MULTICLASS: Task(MULTICLASS, ACCURACY, (ACCURACY, CROSSENTROPY), False, SCORES, "int64", "accuracy"),
    REGRESSION: Task(REGRESSION, MAE, (MAE, RMSE, MSE), True, PREDICTIONS, "float32", "mae"),
}


def task_named(name: str) -> Task:
    """The Task called `name`; TaskError naming the known tasks otherwise."""
    if name not in TASKS:
        raise TaskError(f"unknown task {name!r} (one of {', '.join(TASK_NAMES)})")
    return TASKS[name]


# ------------------------------------------------------------------------------------------- training

def loss(task: Task):
    """The Keras loss the Trainer compiles unless the model module brings its own (make_loss)."""
    import keras

    return {BINARY: keras.losses.BinaryCrossentropy, MULTICLASS: keras.losses.SparseCategoricalCrossentropy,
            REGRESSION: keras.losses.MeanSquaredError}[task.name]()


def keras_metrics(task: Task) -> list:
    """The Keras metrics the Trainer reports per epoch (named as in the training report's history)."""
    import keras

    if task.name == BINARY:
        return [keras.metrics.AUC(name="auc"), keras.metrics.BinaryAccuracy(name="binary_accuracy")]
    if task.name == MULTICLASS:
        return [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
    return [keras.metrics.MeanAbsoluteError(name="mae"), keras.metrics.RootMeanSquaredError(name="rmse")]


def expected_output_width(task: Task, classes: tuple[str, ...]) -> int:
    """The width of the model's output: 1 (a probability, a value) or K class probabilities."""
    return len(classes) if task.name == MULTICLASS else 1


# ------------------------------------------------------------------------------------------- serving

def serving_outputs(task: Task, output, classes: tuple[str, ...]) -> dict:
    """Input: the model's float32 output tensor ([N, 1] or [N, K]) and the class names. Output: the
    signature's outputs: binary {probabilities, scores, classes}; multiclass {scores, classes}; regression
    {predictions}."""
    import tensorflow as tf

    if task.name == REGRESSION:
        return {PREDICTIONS: output}
    scores = tf.concat([1.0 - output, output], axis=1) if task.name == BINARY else output
    names = tf.constant([list(classes)], tf.string)
    result = {SCORES: scores, CLASSES: tf.tile(names, [tf.shape(scores)[0], 1])}
    if task.name == BINARY:
        result[PROBABILITIES] = output
    return result


def output_description(task: Task, classes: tuple[str, ...]) -> str:
    """What the device model returns, for the export report."""
    if task.name == MULTICLASS:
        return f"{SCORES}: float32 [1, {len(classes)}], one probability per class ({', '.join(classes)})"
    if task.name == BINARY:
        return f"{PROBABILITIES}: float32 [1, 1], the probability of {classes[1]!r}"
    return f"{PREDICTIONS}: float32 [1, 1]"


# ----------------------------------------------------------------------------------------- evaluation

def tfma_metrics_specs(task: Task, model_names: list[str], num_classes: int) -> list:
    """The TFMA MetricsSpecs the evaluator computes for every model. Multiclass: per-class recall in a spec
    of its own (binarize applies to every metric of its spec) and the confusion matrix as a plot."""
    import tensorflow_model_analysis as tfma

    def spec(names, **kwargs):
        return tfma.MetricsSpec(metrics=[tfma.MetricConfig(class_name=name) for name in names],
                                model_names=model_names, **kwargs)

    if task.name == BINARY:
        return [spec(["ExampleCount", "BinaryCrossEntropy", "BinaryAccuracy", "AUC", "Precision", "Recall"])]
    if task.name == MULTICLASS:
        return [spec(["ExampleCount", "SparseCategoricalAccuracy", "SparseCategoricalCrossentropy",
                      "MultiClassConfusionMatrixPlot"]),
                spec(["Recall"], binarize=tfma.BinarizationOptions(class_ids={"values": list(range(num_classes))}))]
    return [spec(["ExampleCount", "MeanSquaredError", "MeanAbsoluteError", "MeanLabel", "MeanPrediction",
                  "Calibration"])]


def derived_metrics(task: Task, metrics: dict[str, float | None]) -> dict[str, float | None]:
    """TFMA's metrics of one model and slice plus what the reports derive from them (regression: RMSE)."""
    if task.name == REGRESSION and metrics.get(MSE.name) is not None:
        return {**metrics, RMSE.name: math.sqrt(metrics[MSE.name])}
    return dict(metrics)


def score(task: Task, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    """Input: labels [N] and the prediction_key output ([N] or [N, 1] for binary and regression, [N, K] for
    multiclass). Output: the task's metrics, computed exactly in numpy (the TFLite ladder, the gates)."""
    labels = np.asarray(labels).reshape(-1)
    predictions = np.asarray(predictions, np.float64)
    if task.name == MULTICLASS:
        return {ACCURACY.name: float(per_example(task, ACCURACY, labels, predictions).mean()),
                CROSSENTROPY.name: float(per_example(task, CROSSENTROPY, labels, predictions).mean())}
    predictions = predictions.reshape(-1)
    if task.name == BINARY:
        return {AUC.name: auc(labels, predictions),
                BINARY_ACCURACY.name: float(per_example(task, BINARY_ACCURACY, labels, predictions).mean()),
                BINARY_CROSSENTROPY.name: float(per_example(task, BINARY_CROSSENTROPY, labels, predictions).mean())}
    mse = float(per_example(task, MSE, labels, predictions).mean())
    return {MAE.name: float(per_example(task, MAE, labels, predictions).mean()), MSE.name: mse,
            RMSE.name: math.sqrt(mse)}


def per_example(task: Task, metric: Metric, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
    """Per-example values whose mean is `metric` (every metric but AUC): what paired comparisons resample."""
    labels = np.asarray(labels).reshape(-1)
    predictions = np.asarray(predictions, np.float64)
    epsilon = 1e-7  # Keras's clipping of probabilities inside its cross-entropies
    if metric is ACCURACY:
        return (predictions.argmax(axis=1) == labels).astype(np.float64)
    if metric is CROSSENTROPY:
        clipped = np.clip(predictions, epsilon, 1 - epsilon)
        return -np.log(clipped[np.arange(len(labels)), labels.astype(np.int64)] / clipped.sum(axis=1))
    predictions = predictions.reshape(-1)
    if metric is BINARY_ACCURACY:
        return ((predictions > 0.5) == (labels > 0.5)).astype(np.float64)
    if metric is BINARY_CROSSENTROPY:
        clipped = np.clip(predictions, epsilon, 1 - epsilon)
        return -(labels * np.log(clipped) + (1 - labels) * np.log(1 - clipped))
    if metric is MAE:
        return np.abs(labels - predictions)
    if metric is MSE:
        return (labels - predictions) ** 2
    raise TaskError(f"{metric.name} is not an average over examples in a {task.name} task")


def gateable(task: Task) -> tuple[Metric, ...]:
    """The metrics a paired comparison can decide on: AUC, and every average over examples (not RMSE: gate
    on MSE, its square)."""
    return tuple(metric for metric in task.metrics if metric is not RMSE)


def auc(labels: np.ndarray, scores: np.ndarray) -> float:
    """The exact ROC AUC (Mann-Whitney, ties counted half); 0.5 when one class is absent."""
    from scipy.stats import rankdata

    labels = np.asarray(labels).reshape(-1) > 0.5
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if not positives or not negatives:
        return 0.5
    ranks = rankdata(np.asarray(scores, np.float64).reshape(-1))
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


# ------------------------------------------------------------------------------------ trivial predictor

@dataclasses.dataclass(frozen=True)
class LabelSummary:
    """The labels of one split, as the Trainer counted them: the trivial predictor is built from the
    training split's."""
    examples: int
    mean: float  # the mean label (binary: the share of positives)
    median: float = 0.0  # the median label (regression: the best constant under MAE)
    class_counts: tuple[int, ...] = ()  # classification: examples per class id

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, value: dict) -> "LabelSummary":
        return cls(int(value["examples"]), float(value["mean"]), float(value.get("median", value["mean"])),
                   tuple(value.get("class_counts", ())))


def summarize_labels(task: Task, labels: np.ndarray, classes: tuple[str, ...]) -> LabelSummary:
    """Input: every label of a split. Output: its LabelSummary."""
    labels = np.asarray(labels).reshape(-1)
    counts = ()
    if task.is_classification:
        counts = tuple(int(c) for c in np.bincount(labels.astype(np.int64), minlength=len(classes)))
    if not len(labels):
        return LabelSummary(0, 0.0, 0.0, counts)
    return LabelSummary(len(labels), float(labels.mean()), float(np.median(labels)), counts)


def trivial_predictions(task: Task, training: LabelSummary, examples: int) -> np.ndarray:
    """What a model that learned nothing predicts for `examples` examples, in the prediction_key's shape: the
    best constant on the training split under the task's primary metric. Binary: the share of positives (any
    constant has AUC 0.5); multiclass: certainty on the majority class; regression: the median label (the
    constant with the lowest MAE; the mean has the lowest MSE but a larger MAE on skewed labels)."""
    if task.name == MULTICLASS:
        predictions = np.zeros((examples, len(training.class_counts)))
        predictions[:, int(np.argmax(training.class_counts))] = 1.0
        return predictions
    return np.full(examples, training.median if task.name == REGRESSION else training.mean)


def trivial_description(task: Task, training: LabelSummary, classes: tuple[str, ...]) -> str:
    if task.name == MULTICLASS:
        return f"always {classes[int(np.argmax(training.class_counts))]!r}, the training split's majority class"
    if task.name == BINARY:
        return f"a constant ({training.mean:.4f}, the training share of positives): AUC 0.5"
    return f"always {training.median:.6g}, the training split's median label (the best constant under MAE)"


def invalid_labels(task: Task, labels: np.ndarray, classes: tuple[str, ...]) -> np.ndarray:
    """True for each label the task and its classes do not allow: a class id outside 0..K-1 (a value the
    model module maps to none of its classes), a NaN or infinite value."""
    labels = np.asarray(labels).reshape(-1)
    if task.is_classification:
        return ~np.isin(labels, np.arange(len(classes)))
    return ~np.isfinite(labels)


def check_labels(task: Task, labels: np.ndarray, classes: tuple[str, ...], where: str) -> None:
    """Raises TaskError naming `where` when a label is not one the task and its classes allow (invalid_labels)."""
    labels = np.asarray(labels).reshape(-1)
    bad = labels[invalid_labels(task, labels, classes)]
    if not bad.size:
        return
    if task.is_classification:
        declared = ", ".join(f"{i} {name!r}" for i, name in enumerate(classes))
        raise TaskError(f"{where}: label {bad[0]!r} is outside the declared classes ({declared}); "
                        f"{bad.size} example(s) have such labels")
    raise TaskError(f"{where}: {bad.size} label(s) are NaN or infinite")
