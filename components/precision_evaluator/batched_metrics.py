"""TFMA's metric computations fed a batch at a time: a TFMA evaluator for batches of labels and predictions.

TFMA computes metrics with one Beam combiner per metric and model, and calls each combiner once per
example and slice (`add_input`): for 3 models, 2 slices and 4 combiners per model that is 24 Python calls
per example, most of a TFMA run (the benchmarks page has the figures). This evaluator keeps TFMA's metric computations (built
from the same EvalConfig by `metric_specs.to_computations`) and replaces only their per-example
`add_input` with numpy sums over every example of a slice in a batch, into the accumulator each TFMA
combiner keeps (example count; cross-entropy sum; binary confusion matrix at each threshold, also one class
against the rest; calibration histogram of 10,000 buckets; multi-class confusion matrix; regression error
sums; label and prediction sums; and the Keras metrics TFMA wraps, updated once per slice and batch). The
combiners' own `extract_output`, TFMA's derived metrics (AUC, accuracy, precision, recall, calibration from
those), diff and validation steps and TFMA's writers then run unchanged, so the output is TFMA's, file for
file.

`unsupported_reason(eval_config)` says why a config needs TFMA's own evaluator instead (a metric whose
combiner has no batched twin here, example weights, confidence intervals, ...); None when this one serves.
"""
from __future__ import annotations

from typing import Any, Iterable, Iterator

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_model_analysis as tfma
from tensorflow_model_analysis.contrib.aggregates import binary_confusion_matrices as bcm_aggregates
from tensorflow_model_analysis.evaluators import metrics_plots_and_validations_evaluator as tfma_evaluator
from tensorflow_model_analysis.evaluators import metrics_validator
from tensorflow_model_analysis.metrics import (binary_confusion_matrices, calibration, calibration_histogram,
                                               cross_entropy_metrics, example_count, mean_regression_error,
                                               metric_specs, metric_types, multi_class_confusion_matrix_metrics,
                                               tf_metric_wrapper)
from tensorflow_model_analysis.slicer import slicer_lib
from tensorflow_model_analysis.utils import model_util

STAGE_NAME = "EvaluateBatchedMetrics"

# TFMA's own steps and types around its combiners: private names of TFMA 0.47.1 (pinned in constraints.txt).
# The tests compare this evaluator with TFMA's on every metric, so an upgrade that moves them fails there.
_filter_and_separate_computations = tfma_evaluator._filter_and_separate_computations
_AddDerivedCrossSliceAndDiffMetrics = tfma_evaluator._AddDerivedCrossSliceAndDiffMetrics
_add_ci_derived_metrics = tfma_evaluator._add_ci_derived_metrics
_remove_private_metrics = tfma_evaluator._remove_private_metrics
_filter_by_key_type = tfma_evaluator._filter_by_key_type
_TWINS_BY_COMBINER = {}  # filled below: TFMA combiner class -> its batched twin


def unsupported_reason(eval_config: tfma.EvalConfig) -> str | None:
    """Input: the eval config. Output: why this evaluator cannot compute it exactly as TFMA would, or None."""
    options = eval_config.options
    if options.compute_confidence_intervals.value:
        return "confidence intervals"
    if options.min_slice_size.value > 1:
        return "min_slice_size"
    if eval_config.cross_slicing_specs:
        return "cross slicing"
    if any(spec.slice_keys_sql for spec in eval_config.slicing_specs):
        return "SQL slices"
    if any(spec.query_key for spec in eval_config.metrics_specs):
        return "query metrics"
    for spec in eval_config.model_specs:
        if (spec.example_weight_key or spec.example_weight_keys or spec.label_keys or spec.prediction_keys
                or spec.model_type not in ("", tfma.constants.TF_GENERIC, tfma.constants.TF_KERAS)):
            return f"model spec {spec.name!r}: example weights, multiple outputs or model type {spec.model_type!r}"
    try:
        for computation in _computations(eval_config).non_derived_computations:
            _twin(computation)
    except _Unsupported as error:
        return str(error)
    return None


def evaluator(eval_config: tfma.EvalConfig, run_after: str) -> tfma.evaluators.Evaluator:
    """Input: the eval config; the stage whose extracts carry labels and predictions (see batch_scoring.py).
    Output: a TFMA evaluator producing TFMA's metrics, plots, attributions and validations."""
    reason = unsupported_reason(eval_config)
    if reason:
        raise ValueError(f"the batched evaluator does not support this EvalConfig: {reason}")
    return tfma.evaluators.Evaluator(stage_name=STAGE_NAME, run_after=run_after,
                                     ptransform=_EvaluateBatches(eval_config))


class _Unsupported(Exception):
    pass


def _computations(eval_config: tfma.EvalConfig):
    # The same computations, de-duplicated and ordered, that TFMA's MetricsPlotsAndValidationsEvaluator runs.
    return _filter_and_separate_computations(
        metric_specs.to_computations(eval_config.metrics_specs, eval_config=eval_config))


@beam.ptransform_fn
def _EvaluateBatches(extracts: beam.PCollection, eval_config: tfma.EvalConfig) -> dict:  # noqa: N802
    """Input: batched extracts with labels and predictions per model. Output: TFMA's Evaluation dict."""
    computations = _computations(eval_config)
    twins = [_twin(computation) for computation in computations.non_derived_computations]
    baseline = model_util.get_baseline_model_spec(eval_config)
    sliced = (
        extracts
        | "AccumulatePerSliceInBatch" >> beam.ParDo(_AccumulateBatchFn(list(eval_config.slicing_specs), twins))
        | "CombinePerSlice" >> beam.CombinePerKey(_TwinsCombineFn(twins))
        | "AddDerivedCrossSliceAndDiffMetrics" >> _AddDerivedCrossSliceAndDiffMetrics(
            computations.derived_computations, computations.cross_slice_computations,
            list(eval_config.cross_slicing_specs), baseline.name if baseline else None)
        | "AddCIDerivedMetrics" >> beam.Map(_add_ci_derived_metrics, computations.ci_derived_computations)
        | "RemovePrivateMetrics" >> beam.MapTuple(_remove_private_metrics))
    by_type = {key: sliced | f"FilterBy{name}" >> beam.Map(_filter_by_key_type, key_type)
               for key, name, key_type in ((tfma.constants.METRICS_KEY, "Metrics", metric_types.MetricKey),
                                           (tfma.constants.PLOTS_KEY, "Plots", metric_types.PlotKey),
                                           (tfma.constants.ATTRIBUTIONS_KEY, "Attributions",
                                            metric_types.AttributionsKey))}
    by_type[tfma.constants.VALIDATIONS_KEY] = (by_type[tfma.constants.METRICS_KEY]
                                               | "ValidateMetrics" >> beam.Map(metrics_validator.validate_metrics,
                                                                               eval_config))
    return by_type


# --- Slicing a batch -----------------------------------------------------------------------------------------

def slice_groups(slicing_specs: list, batch, transformed: dict[str, dict[str, np.ndarray]]) -> dict[tuple, np.ndarray]:
    """Input: the SlicingSpecs, an Arrow RecordBatch of raw features, {model: transformed features}. Output:
    {TFMA slice key: indices of the batch's examples in that slice}.

    TFMA's own slicer decides each example's slice keys: it runs once per distinct combination of the
    slicing columns' values in the batch, looking a column up among the models' transformed features first,
    then among the raw features, as TFMA's SliceKeyExtractor does."""
    specs = [slicer_lib.SingleSliceSpec(spec=spec) for spec in slicing_specs] or [slicer_lib.SingleSliceSpec()]
    rows = batch.num_rows
    columns = sorted({column for spec in slicing_specs for column in spec.feature_keys}
                     | {column for spec in slicing_specs for column in spec.feature_values})
    if not columns:
        keys = {key for spec in specs for key in spec.generate_slices(_Accessor({}))}
        return {key: np.arange(rows) for key in keys}
    per_column = [_column_values(column, batch, transformed) for column in columns]
    combination_ids = np.empty(rows, dtype=np.int64)
    combinations: dict[tuple, int] = {}
    for row in range(rows):
        combination = tuple(tuple(values[row]) if values[row] else () for values, _ in per_column)
        combination_ids[row] = combinations.setdefault(combination, len(combinations))
    order = np.argsort(combination_ids, kind="stable")
    members_of = np.split(order, np.cumsum(np.bincount(combination_ids, minlength=len(combinations)))[:-1])
    parts: dict[tuple, list[np.ndarray]] = {}
    for combination, combination_id in combinations.items():
        features = {column: np.asarray(values, dtype=dtype)
                    for column, values, (_, dtype) in zip(columns, combination, per_column) if values}
        for key in {key for spec in specs for key in spec.generate_slices(_Accessor(features))}:
            parts.setdefault(key, []).append(members_of[combination_id])
    return {key: np.sort(np.concatenate(members)) for key, members in parts.items()}


class _Accessor:
    """The two calls TFMA's SingleSliceSpec.generate_slices makes on its SliceAccessor, on one example's
    values: has_key, and get (distinct values, as Python scalars, like SliceAccessor.get)."""

    def __init__(self, features: dict[str, np.ndarray]):
        self._features = features

    def has_key(self, key: str) -> bool:
        return key in self._features

    def get(self, key: str) -> list:
        return np.unique(self._features[key]).tolist()


def _column_values(column: str, batch, transformed: dict[str, dict[str, np.ndarray]]) -> tuple[list, Any]:
    """One slicing column of a batch: (per example the list of its values, the numpy dtype of the values)."""
    found = [features[column] for features in transformed.values() if features.get(column) is not None]
    if found:  # transformed features of every model that has the column, as SliceAccessor concatenates them
        arrays = [np.asarray(values).reshape(batch.num_rows, -1) for values in found]
        per_row = [sum((array[row].tolist() for array in arrays), []) for row in range(batch.num_rows)]
        return per_row, arrays[0].dtype
    index = batch.schema.get_field_index(column)
    if index < 0:
        return [None] * batch.num_rows, object
    array = batch.column(index)
    dtype = array.flatten().to_numpy(zero_copy_only=False).dtype if hasattr(array, "flatten") else object
    return array.to_pylist(), dtype


# --- Batched twins of TFMA's combiners ---------------------------------------------------------------------

def _twin(computation) -> "_Twin":
    """The batched twin of a TFMA metric computation's combiner; _Unsupported when there is none."""
    combiner = computation.combiner
    # TFMA's plain input filter (which extracts a combiner sees) changes no value; any other preprocessor would.
    if any(type(p) is not metric_types.StandardMetricInputsPreprocessor for p in computation.preprocessors or ()):
        raise _Unsupported(f"{type(combiner).__name__} with preprocessors")
    twin = _TWINS_BY_COMBINER.get(type(combiner))
    if twin is None:
        raise _Unsupported(f"no batched twin for TFMA combiner {type(combiner).__name__}")
    return twin(combiner)


class _Twin:
    """Input to `add`: one model's labels ([n]) and predictions ([n], or [n, K] class probabilities) for the
    examples of one slice in one batch. Accumulators are numpy arrays that add up; `output` hands TFMA's
    combiner its own accumulator type and returns what the combiner's extract_output returns."""

    def __init__(self, combiner):
        self.combiner = combiner
        key = getattr(combiner, "_key", None) or getattr(combiner, "_metric_key", None)
        self.model_name = key.model_name if key is not None else combiner._model_name
        sub_key = key.sub_key if key is not None else getattr(combiner, "_sub_key", None)
        self.class_id = sub_key.class_id if sub_key is not None else None
        if sub_key is not None and (sub_key.top_k is not None or sub_key.k is not None or self.class_id is None):
            raise _Unsupported(f"{type(combiner).__name__} with a top_k or k sub key ({key})")
        if key is not None and (key.output_name or key.aggregation_type):
            raise _Unsupported(f"{type(combiner).__name__} with output name or aggregation ({key})")
        if getattr(combiner, "_example_weighted", False):
            raise _Unsupported(f"{type(combiner).__name__} with example weights")
        if getattr(combiner, "_class_weights", None) or getattr(combiner, "_aggregation_type", None):
            raise _Unsupported(f"{type(combiner).__name__} with class weights or aggregation")

    def binary(self, labels: np.ndarray, predictions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The (label, prediction) pairs a binary metric sees, as TFMA's select_class_id gives them: with a
        class id, label == class id against that class's probability; else one value per example."""
        if self.class_id is None:
            if predictions.ndim == 2 and predictions.shape[1] > 1:
                raise ValueError(f"{type(self.combiner).__name__} of {self.model_name}: {predictions.shape[1]} "
                                 "predictions per example need a class id (binarize)")
            return labels.reshape(-1), predictions.reshape(-1)
        if predictions.ndim != 2 or self.class_id >= predictions.shape[1]:
            raise ValueError(f"{type(self.combiner).__name__} of {self.model_name}: class_id {self.class_id} out of "
                             f"range for predictions of shape {predictions.shape}")
        return (labels.reshape(-1) == self.class_id).astype(np.float64), predictions[:, self.class_id]

    def add(self, labels: np.ndarray, predictions: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def output(self, accumulator: np.ndarray) -> dict:
        raise NotImplementedError


class _ExampleCount(_Twin):
    def add(self, labels, predictions):
        return np.array(float(len(predictions)))

    def output(self, accumulator):
        return self.combiner.extract_output(float(accumulator))


class _BinaryCrossEntropy(_Twin):
    def add(self, labels, predictions):
        labels, predictions = self.binary(labels, predictions)
        # TFMA adds _cross_entropy(label, prediction) per example: a mean, elementwise before it. float64
        # labels make the terms and their mean float64 (the logs stay in the predictions' dtype, as in TFMA).
        mean = self.combiner._cross_entropy(labels.astype(np.float64), predictions)
        return np.array([float(mean) * len(predictions), float(len(predictions))])

    def output(self, accumulator):
        total = cross_entropy_metrics._CrossEntropyAccumulator(
            total_cross_entropy=float(accumulator[0]), total_example_weights=float(accumulator[1]))
        return self.combiner.extract_output(total)


def _check_fractional(labels: np.ndarray, what: str) -> None:
    if np.any(~((labels >= 0.0) & (labels <= 1.0))):  # NaN fails too, as in TFMA's _yield_fractional_labels
        bad = labels[~((labels >= 0.0) & (labels <= 1.0))][0]
        raise ValueError(f"{what}: label must be within [0, 1]: label={bad}")


class _ConfusionMatrices(_Twin):
    """tp, tn, fp, fn at each threshold: prediction > threshold is positive; a label counts as label x positive
    and (1 - label) x negative with fractional labels (TFMA's default), else label > threshold is positive."""

    def __init__(self, combiner):
        super().__init__(combiner)
        if combiner._example_id_key:
            raise _Unsupported("confusion matrices with example ids")
        matrices = combiner._binary_confusion_matrices
        self.thresholds = list(matrices._thresholds)
        self.fractional = matrices._enable_fractional_labels

    def add(self, labels, predictions):
        labels, predictions = self.binary(labels, predictions)
        labels = labels.astype(np.float64)
        predictions = predictions.astype(np.float64)
        if self.fractional:
            _check_fractional(labels, f"confusion matrices of {self.model_name}")
        result = np.zeros((len(self.thresholds), 4))
        for i, threshold in enumerate(self.thresholds):
            above = predictions > threshold
            positive = labels if self.fractional else (labels > threshold).astype(np.float64)
            negative = 1.0 - positive
            result[i] = (positive[above].sum(), negative[~above].sum(), negative[above].sum(), positive[~above].sum())
        return result

    def output(self, accumulator):
        entries = {threshold: bcm_aggregates._ThresholdEntry(
            bcm_aggregates.Matrix(tp=float(tp), tn=float(tn), fp=float(fp), fn=float(fn)),
            tp_examples=[], tn_examples=[], fp_examples=[], fn_examples=[])
            for threshold, (tp, tn, fp, fn) in zip(self.thresholds, accumulator)}
        return self.combiner.extract_output(entries)


class _CalibrationHistogram(_Twin):
    """Per bucket: sum of weighted labels, of weighted predictions, of weights, and how many (label,
    prediction, weight) tuples fell in it (TFMA keeps only buckets that received one). Bucket index as in
    TFMA's _bucket_index: int((value - left) / range * num_buckets + 1), clamped to [0, num_buckets + 1]."""

    def __init__(self, combiner):
        super().__init__(combiner)
        self.num_buckets = combiner._num_buckets
        self.left = combiner._left
        self.range = combiner._range
        self.by_prediction = combiner._prediction_based_bucketing
        self.fractional = combiner._fractional_labels

    def add(self, labels, predictions):
        labels, predictions = self.binary(labels, predictions)
        labels = labels.astype(np.float64)
        predictions = predictions.astype(np.float64)
        if self.fractional:  # (0, p, 1 - label) and (1, p, label); TFMA drops tuples of weight 0
            _check_fractional(labels, f"calibration histogram of {self.model_name}")
            tuple_labels = np.concatenate([np.zeros_like(labels), np.ones_like(labels)])
            tuple_predictions = np.concatenate([predictions, predictions])
            weights = np.concatenate([1.0 - labels, labels])
            keep = weights != 0.0
            tuple_labels, tuple_predictions, weights = tuple_labels[keep], tuple_predictions[keep], weights[keep]
        else:
            tuple_labels, tuple_predictions, weights = labels, predictions, np.ones_like(labels)
        values = tuple_predictions if self.by_prediction else tuple_labels
        if np.isnan(values).any():
            what = "prediction" if self.by_prediction else "label"
            raise ValueError(f"calibration histogram of {self.model_name}: NaN {what}")
        index = (values - self.left) / self.range * self.num_buckets + 1
        buckets = np.where(index < 0, 0, np.where(index >= self.num_buckets + 1, self.num_buckets + 1,
                                                  np.trunc(np.clip(index, 0, self.num_buckets + 1)))).astype(np.int64)
        size = self.num_buckets + 2
        return np.stack([np.bincount(buckets, weights=tuple_labels * weights, minlength=size),
                         np.bincount(buckets, weights=tuple_predictions * weights, minlength=size),
                         np.bincount(buckets, weights=weights, minlength=size),
                         np.bincount(buckets, minlength=size).astype(np.float64)])

    def output(self, accumulator):
        present = np.flatnonzero(accumulator[3])
        histogram = {int(i): calibration_histogram.Bucket(int(i), float(accumulator[0, i]), float(accumulator[1, i]),
                                                          float(accumulator[2, i])) for i in present}
        return self.combiner.extract_output(histogram)


class _MultiClassConfusionMatrices(_Twin):
    """Per threshold, examples per (actual class, predicted class): the predicted class is the most probable
    one, or none (-1) once its probability is at or below a threshold, which holds for every later
    threshold too (TFMA's order). Accumulator [thresholds, K, K + 1], the last column for none."""

    def __init__(self, combiner):
        super().__init__(combiner)
        self.thresholds = list(combiner._thresholds)

    def add(self, labels, predictions):
        if predictions.ndim != 2 or predictions.shape[1] < 2:
            raise ValueError(f"multi-class confusion matrix of {self.model_name}: predictions shape must be > 1, "
                             f"got {predictions.shape}")
        classes = predictions.shape[1]
        actual = labels.reshape(-1).astype(np.int64)
        if np.any((actual < 0) | (actual >= classes)):
            raise ValueError(f"multi-class confusion matrix of {self.model_name}: a label outside 0..{classes - 1}")
        predicted = predictions.argmax(axis=1)
        best = predictions[np.arange(len(predicted)), predicted]
        result = np.zeros((len(self.thresholds), classes, classes + 1))
        none = np.zeros(len(predicted), dtype=bool)
        for i, threshold in enumerate(self.thresholds):
            none |= best <= threshold
            np.add.at(result[i], (actual, np.where(none, classes, predicted)), 1.0)
        return result

    def output(self, accumulator):
        matrices = multi_class_confusion_matrix_metrics.Matrices()
        no_prediction = accumulator.shape[2] - 1
        for threshold, counts in zip(self.thresholds, accumulator):
            matrices[threshold] = {
                multi_class_confusion_matrix_metrics.MatrixEntryKey(
                    int(a), multi_class_confusion_matrix_metrics.NO_PREDICTED_CLASS_ID if p == no_prediction else int(p)):
                float(counts[a, p]) for a, p in zip(*np.nonzero(counts))}
        return self.combiner.extract_output(matrices)


class _MeanRegressionError(_Twin):
    """Sum of the combiner's per-example error (absolute, squared, ...) and the count, NaN errors left out of
    both, as TFMA does."""

    def add(self, labels, predictions):
        labels, predictions = self.binary(labels, predictions)
        difference = np.abs(labels.astype(predictions.dtype) - predictions)  # in the inputs' dtype, as TFMA
        if isinstance(self.combiner, mean_regression_error._MeanAbsoluteErrorCombiner):
            errors = difference.astype(np.float64)
        elif isinstance(self.combiner, mean_regression_error._MeanSquaredErrorCombiner):
            errors = difference.astype(np.float64) ** 2
        else:
            raise ValueError(f"no batched twin for {type(self.combiner).__name__}")
        kept = ~np.isnan(errors)
        return np.array([errors[kept].sum(), float(kept.sum())])

    def output(self, accumulator):
        total = mean_regression_error._MeanRegressionErrorAccumulator()
        total.total_regression_error, total.total_example_weights = float(accumulator[0]), float(accumulator[1])
        return self.combiner.extract_output(total)


class _WeightedLabelsPredictions(_Twin):
    """Sums of labels, of predictions and of examples (MeanLabel, MeanPrediction, Calibration)."""

    def add(self, labels, predictions):
        labels, predictions = self.binary(labels, predictions)
        return np.array([labels.astype(np.float64).sum(), predictions.astype(np.float64).sum(), float(len(labels))])

    def output(self, accumulator):
        total = calibration._WeightedLabelsPredictionsExamples()
        total.total_weighted_labels, total.total_weighted_predictions, total.total_weighted_examples = (
            float(value) for value in accumulator)
        return self.combiner.extract_output(total)


class _KerasMetrics(_Twin):
    """The Keras metrics TFMA wraps (SparseCategoricalAccuracy, SparseCategoricalCrossentropy, ...), updated
    once per slice and batch; the accumulator is their summed weights, as TFMA's own batches sum them."""

    def __init__(self, combiner):
        super().__init__(combiner)
        if combiner._output_names != [""] or combiner._sub_key_in_config:
            raise _Unsupported("Keras metrics with output names or a top_k in their config")
        self._shapes = None  # per metric, the shapes of its weights (known after the first update)

    def _metrics(self) -> list:
        self.combiner.setup()  # deserializes the Keras metrics on first use, in the worker
        return self.combiner._metrics[""]

    # Run eagerly as plain Python: autograph would convert each update_state call's code (its first call in a
    # process about a second; later ones five times slower than without).
    @tf.autograph.experimental.do_not_convert
    def add(self, labels, predictions):
        rows = len(labels)
        labels = labels.reshape(rows, 1)
        predictions = predictions.reshape(rows, -1)
        weights, shapes = [], []
        for metric in self._metrics():
            metric.reset_states()
            metric.update_state(labels, predictions, np.ones((rows, 1), np.float32))
            values = metric.get_weights()
            shapes.append([np.shape(value) for value in values])
            weights += [np.ravel(value).astype(np.float64) for value in values]
        self._shapes = shapes
        return np.concatenate(weights)

    def output(self, accumulator):
        metrics = self._metrics()
        if self._shapes is None:  # this worker saw no batch: the shapes of freshly reset weights
            self._shapes = [[np.shape(value) for value in metric.get_weights()] for metric in metrics]
        total = self.combiner.create_accumulator()
        offset = 0
        for index, shapes in enumerate(self._shapes):
            values = []
            for shape in shapes:
                size = int(np.prod(shape))
                values.append(accumulator[offset:offset + size].reshape(shape).astype(np.float32))
                offset += size
            total.add_weights(0, index, values)
        return self.combiner.extract_output(total)


_TWINS_BY_COMBINER.update({
    example_count._ExampleCountCombiner: _ExampleCount,
    cross_entropy_metrics._BinaryCrossEntropyCombiner: _BinaryCrossEntropy,
    binary_confusion_matrices._BinaryConfusionMatrixCombiner: _ConfusionMatrices,
    calibration_histogram._CalibrationHistogramCombiner: _CalibrationHistogram,
    multi_class_confusion_matrix_metrics._MultiClassConfusionMatrixCombiner: _MultiClassConfusionMatrices,
    mean_regression_error._MeanAbsoluteErrorCombiner: _MeanRegressionError,
    mean_regression_error._MeanSquaredErrorCombiner: _MeanRegressionError,
    calibration._WeightedLabelsPredictionsExamplesCombiner: _WeightedLabelsPredictions,
    tf_metric_wrapper._CompilableMetricsCombiner: _KerasMetrics,
})


# --- Beam ----------------------------------------------------------------------------------------------------

class _AccumulateBatchFn(beam.DoFn):
    """Input: one batched extract. Output: (slice key, one accumulator per twin) for each slice in the batch."""

    def __init__(self, slicing_specs: list, twins: list[_Twin]):
        self._slicing_specs = slicing_specs
        self._twins = twins

    def process(self, extracts: dict) -> Iterator[tuple]:
        labels = extracts[tfma.constants.LABELS_KEY]
        predictions = extracts[tfma.constants.PREDICTIONS_KEY]
        groups = slice_groups(self._slicing_specs, extracts[tfma.constants.ARROW_RECORD_BATCH_KEY],
                              extracts.get(tfma.constants.TRANSFORMED_FEATURES_KEY) or {})
        for slice_key, members in groups.items():
            chosen = {name: (labels[name][members], predictions[name][members]) for name in predictions}
            yield slice_key, tuple(twin.add(*_for_model(chosen, twin.model_name)) for twin in self._twins)


def _for_model(per_model: dict, model_name: str):
    # TFMA names a lone model "" in its metric keys, whatever its ModelSpec's name.
    if model_name not in per_model and not model_name and len(per_model) == 1:
        (value,) = per_model.values()
        return value
    return per_model[model_name]


class _TwinsCombineFn(beam.CombineFn):
    """Sums the twins' accumulators per slice; extract_output is TFMA's combiners' output for the slice."""

    def __init__(self, twins: list[_Twin]):
        self._twins = twins

    def create_accumulator(self):
        return None

    def add_input(self, accumulator, element):
        return element if accumulator is None else tuple(a + b for a, b in zip(accumulator, element))

    def merge_accumulators(self, accumulators: Iterable):
        result = None
        for accumulator in accumulators:
            result = self.add_input(result, accumulator) if accumulator is not None else result
        return result

    def extract_output(self, accumulator) -> dict:
        result: dict = {}
        for twin, value in zip(self._twins, accumulator):
            result.update(twin.output(value))
        return result
