"""A model built from the schema and the label alone: what `python -m pipeline init` configures, so that a
user's own table trains with no code.

`configure(schema_path, task_config)` reads the curated schema and the config's `task` section (type, label,
classes, excluded features, dates, label transform) and returns the model module: every schema feature but
the label and the excluded ones is an input, preprocessed by its kind, the kind decided on the training sample.
The lower-case names below are entries of the task's row of the defaults table (models/defaults.py):
- dates (`task.dates`: int64 seconds since 1970-01-01 UTC): their calendar, models.layers.CalendarFeatures
  (a missing-value indicator, the year and the instant standardized, cycles of the month, day, weekday,
  day of year and time of day), and with date_codes its month, weekday, hour and hour of the week as codes
  (models.layers.CalendarCode) through embeddings;
- numbers (floats, and integers with more than categorical_max distinct values): a missing-value indicator,
  the value robustly scaled and smoothly clipped (models.layers.RobustScale; missing: the median) and its
  piecewise-linear encoding over quantile bins (models.layers.PiecewiseLinear; with tail_bins finer in
  a smooth number's tails, models.layers.RobustScale.edge_quantiles), so that the model can cut a number where
  trees would (part of the preprocessing: the device model computes it in float32 in every variant, where 8
  bits would blur a narrow bin): up to bins bins, one per rows_per_bin training rows, or in the
  finer candidate up to fine_bins, one per fine_rows_per_bin (CANDIDATES: with `train.search` the Trainer
  trains both and serves the one better out of fold);
- strings and integers with few distinct values: a Vocabulary of the values seen (up to max_vocabulary, the
  rest one out-of-vocabulary index, a missing value its own) through an embedding; with target_statistics one
  of more than statistics_min_values values also as the label's smoothed mean per value (CodeStatistics);
- integers read as numbers whose values behave as codes on the training sample (reads_as_code: each value's
  records share a label of their own, neighbouring values do not, as an id's or a school number's): also a
  Vocabulary of their values (up to max_vocabulary; a missing value out of vocabulary) through an embedding
  (and with target_statistics their smoothed label means).
Then a packed ensemble (components/core/packing.py, models/packed.py: TabM's packed form) of
Defaults.members_for(copies) networks (at least members), each with weights of its own (embeddings included; past
shared_kernel_weights, the members of one fold copy share their first layer's kernel over the numbers) and
hidden_units dense layers (128x128, regression 256x256) with dropout, computed together as one network whose every
layer is one batched product over the members; each member's output is a sigmoid (binary), a softmax (multiclass)
or, for regression, a value in the training labels' scale, after `task.label_transform` (log: log(1 + label), for a
positive, heavy-tailed label such as a price), clamped to the training labels' range. Training minimizes the mean
of the members' losses (regression: the absolute error, after the label transform, which the MAE the gates score
rewards); the model serves the members' mean. With `train.folds` k (init writes folds: 8) the members are dealt to
k copies, copy g's trained on the records outside fold g only and scored on fold g out of fold. Every layer is
device-safe (models/layers.py, models/packed.py), so the TFLite device model takes the raw features.

Missing values: an absent float is NaN, an absent integer MISSING_INT, an absent string "": what the
SavedModel parses an absent feature as, and what a device caller passes (the export report lists them).
An infinite float counts as missing too, in training and serving alike. A string input also reads the
config's `task.missing_tokens` (the cells prepare-data read as missing: NA, None, ?, ...) as missing, so a row
sent as the CSV holds it is answered as in training.

Names: any column name works. The dicts keep the columns' own names (INPUTS, the preprocessing's inputs,
which are tf.Example keys); Keras inputs are named components.core.feature_names.internal_names(INPUTS), every
layer derived from a column derived_name(its internal name, part) and every other `tabular.<part>`: names
with a '.', which no internal name holds, so that no layer can be called like a column. The preprocessing's
outputs, the model's inputs, are named by the layers that compute them: `<internal>.scaled`,
`<internal>.piecewise`, `<internal>.missing`, `<internal>.lookup`, `<internal>.code`, `<internal>.calendar`. A
table with more than wide_numbers numeric columns has its numbers encoded together, the same way per column, as
one tensor: `tabular.numbers.missing`, `tabular.numbers.scaled`, `tabular.numbers.piecewise` (a graph of a
few ops whatever the width).

A model module of one's own (components/core/model_module.py) is the way beyond this: models/taxi.py is an example.
"""
from __future__ import annotations

import copy
import math
import warnings

import keras
import numpy as np
import tensorflow as tf

from components.core.packing import MembersMean
from components.core.feature_names import derived_name, internal_names
from components.core.missing_values import spellings
from components.core.tasks import Task, TaskError, task_named
from models.defaults import Defaults, defaults_for
from models.packed import PackedDense, PackedEmbedding
from models.layers import (MISSING_INT, CalendarCode, CalendarFeatures, PiecewiseLinear, PiecewiseLinearColumns, RobustScale,
                           RobustScaleColumns, Vocabulary, keras_dtype)

DATE_NOTE = "int64 seconds since 1970-01-01 UTC (a date alone: its midnight UTC)"
_LAYER = "tabular.{}"  # the name of a layer derived from no column: a '.' keeps it apart from every column's


def configure(schema_path: str, task_config) -> "SchemaModel":
    """Input: the curated schema's path and the config's `task` section (components.settings.TaskConfig).
    Output: the model module (components.core.model_module.ModelModule) for that schema and label. TaskError names what
    is missing or wrong: the task type, the label, the classes the task needs, a task setting it does not take,
    or a date that is not an int64 feature of the schema."""
    if not task_config.type:
        raise TaskError("models.tabular needs task.type in the config (binary, multiclass or regression)")
    if not task_config.label:
        raise TaskError("models.tabular needs task.label in the config: the label column")
    task = task_named(task_config.type).configured(task_config)
    classes = tuple(task.class_names(list(task_config.classes)))
    problem = task.class_problem(classes)
    if problem:
        raise TaskError(f"models.tabular needs task.classes for a {task.name} task, the class names in label "
                        f"order: {problem}")
    model = SchemaModel(schema_path, task, task_config.label, classes, tuple(task_config.exclude),
                        tuple(task_config.dates), tuple(task_config.missing_tokens), defaults_for(task.name))
    if model.dates or "://" not in schema_path:  # the label, task.exclude and task.dates checked against the
        if not model.INPUTS:                      # schema the user edited now, not when training starts
            features = sorted(set(model._schema_features()) - {task_config.label})
            raise TaskError(f"the model has no feature to read: the schema {schema_path} holds the label "
                            f"{task_config.label!r} and " + (f"{', '.join(map(repr, features))}, every one in "
                                                            "task.exclude" if features else "no other feature"))
    return model


class SchemaModel:
    """The ModelModule of one schema and label (see the module docstring)."""

    def __init__(self, schema_path: str, task: Task, label: str, classes: tuple[str, ...],
                 exclude: tuple[str, ...], dates: tuple[str, ...] = (), missing_tokens: tuple[str, ...] = (),
                 defaults: Defaults | None = None):
        self.TASK, self.LABEL_KEY, self.CLASSES = task, label, classes
        self.task = task  # configured from the task section: its settings (a label transform) apply
        self.defaults = defaults or defaults_for(task.name)  # the task's row of models/defaults.py
        self.CALIBRATION_POOL = self.defaults.calibration_pool
        self._schema_path, self._exclude = schema_path, set(exclude)
        self.dates = tuple(dates)  # int64 features holding seconds since 1970-01-01 UTC
        self.missing_tokens = tuple(missing_tokens)
        self.missing_spellings = spellings(missing_tokens)  # a served string input reads these as missing
        self._features = None  # name -> schema dtype, read on first use
        self._training_labels = np.zeros(0)  # the training sample's labels, which the task's output layer fits
        self._encoding = self.CANDIDATES[0]  # the number encoding: the default one
        self._codes: tuple[str, ...] = ()  # the integer columns build_preprocessing read as codes too
        self.DESCRIPTION = self._description()

    @property
    def CANDIDATES(self) -> tuple[str, ...]:  # noqa: N802 - the model contract's name
        """The number encodings the Trainer may try (train.search), the default first: "16 bins", "48 bins"."""
        return tuple(self._encodings())

    def candidate(self, name: str) -> "SchemaModel":
        """Input: one of CANDIDATES. Output: this model module with that number encoding (a copy). ValueError
        names the candidates for any other name."""
        if name not in self._encodings():
            raise ValueError(f"models.tabular has no candidate {name!r}: its candidates are "
                             f"{', '.join(self.CANDIDATES)}")
        chosen, before = copy.copy(self), self._description()
        chosen._encoding = name
        chosen._redescribe(before)
        return chosen

    def _redescribe(self, before: str) -> None:
        """Input: this module's own description as it was before a change. DESCRIPTION then says what the module
        is now, in place of `before` (a module of the user's own built on this one keeps its words around it)."""
        self.DESCRIPTION = self.DESCRIPTION.replace(before, self._description())

    def _encodings(self) -> dict[str, tuple[int, int]]:
        """The number encodings by candidate name, the default first: name -> (bins at most, training rows per
        bin)."""
        row = self.defaults
        return {f"{row.bins} bins": (row.bins, row.rows_per_bin),
                f"{row.fine_bins} bins": (row.fine_bins, row.fine_rows_per_bin)}

    def _description(self) -> str:
        bins, rows = self._encodings()[self._encoding]
        units = self.defaults.hidden_units
        codes = f" (here: {', '.join(self._codes)})" if self._codes else ""
        tails = ", finer in a smooth number's tails" if self.defaults.tail_bins else ""
        return (f"numbers: robust scale, smooth clip and piecewise-linear encoding over up to {bins} quantile bins "
                f"(one per {rows} training rows{tails}); categories and integers whose values behave as codes{codes}: "
                f"embeddings; a packed ensemble of {self.defaults.members} networks of {'x'.join(map(str, units))} "
                "hidden units "
                f"(bagged over folds: each fold's copy its own networks, every record trained on by all but one)"
                f"{self.task.head_description()}")

    def _schema_features(self) -> dict[str, tf.dtypes.DType]:
        if self._features is None:
            from google.protobuf import text_format
            from tensorflow_metadata.proto.v0 import schema_pb2

            with tf.io.gfile.GFile(self._schema_path) as handle:  # as TFDV's load_schema_text, without importing it
                schema = text_format.Parse(handle.read(), schema_pb2.Schema())
            types = {schema_pb2.FLOAT: tf.float32, schema_pb2.INT: tf.int64, schema_pb2.BYTES: tf.string}
            self._features = {feature.name: types[feature.type] for feature in schema.feature
                              if feature.type in types}
            if self.LABEL_KEY not in self._features:
                raise TaskError(f"task.label: {self.LABEL_KEY!r} is not a feature of the schema {self._schema_path}")
            unknown = sorted(self._exclude - set(self._features))
            if unknown:
                raise TaskError(f"task.exclude: {', '.join(unknown)} not feature(s) of the schema {self._schema_path}")
            for date in self.dates:
                if date not in self._features:
                    raise TaskError(f"task.dates: {date!r} is not a feature of the schema {self._schema_path}")
                if self._features[date] != tf.int64 or date == self.LABEL_KEY:
                    raise TaskError(f"task.dates: {date!r} is not an INT input feature of the schema "
                                    f"{self._schema_path} (a date is int64 seconds since 1970-01-01 UTC)")
        return self._features

    @property
    def INPUTS(self) -> dict[str, tf.io.FixedLenFeature]:  # noqa: N802 - the model contract's name
        return {name: tf.io.FixedLenFeature([], dtype, default_value=_missing_value(dtype))
                for name, dtype in self._schema_features().items()
                if name != self.LABEL_KEY and name not in self._exclude}

    @property
    def INPUT_NOTES(self) -> dict[str, str]:  # noqa: N802 - the model contract's name
        """What a caller of the device model passes for a date, and what a string input reads as missing (the
        export report lists them)."""
        missing = (f'missing: "" or a missing token ({", ".join(self.missing_tokens)}; lower case, UPPER case '
                   "or Capitalized)")
        return {name: DATE_NOTE if name in self.dates else missing for name, spec in self.INPUTS.items()
                if name in self.dates or (spec.dtype == tf.string and self.missing_tokens)}

    @property
    def LABEL_INPUTS(self) -> dict[str, tf.io.FixedLenFeature]:  # noqa: N802
        dtype = self._schema_features()[self.LABEL_KEY]
        return {self.LABEL_KEY: tf.io.FixedLenFeature([], dtype, default_value=_missing_value(dtype))}

    def make_label(self, features: dict[str, tf.Tensor]) -> tf.Tensor:
        """The task's label of the label column's value (Task.parse_label): a class id among CLASSES (-1 for
        any other value, which the Trainer reports), or the value as float32."""
        return self.task.parse_label(features[self.LABEL_KEY], self.CLASSES)

    def build_preprocessing(self, sample: dict[str, np.ndarray]) -> keras.Model:
        """Input: training rows (name -> 1-D array) of the inputs and the label. Output: a Keras model, raw
        features (a dict keyed by the columns' names) -> model-ready tensors (module docstring)."""
        if self.LABEL_KEY in sample:
            self._training_labels = np.asarray(sample[self.LABEL_KEY])
        specs = self.INPUTS
        internal = internal_names(specs)
        inputs = {name: keras.Input(shape=(), name=internal[name], dtype=keras_dtype(spec.dtype))
                  for name, spec in specs.items()}
        rows = len(next(iter(sample.values()))) if sample else 0
        row = self.defaults
        most, rows_per_bin = self._encodings()[self._encoding]
        bins = max(2, min(most, rows // rows_per_bin))
        outputs = {}

        def output(layer: keras.layers.Layer, tensor) -> None:  # a model-ready tensor, named by its layer
            outputs[layer.name] = layer(tensor)

        categories = {name for name, spec in specs.items() if name not in self.dates and (
            spec.dtype == tf.string or (
                spec.dtype == tf.int64 and len(np.unique(sample[name])) <= row.categorical_max))}
        numbers = [name for name in specs if name not in self.dates and name not in categories]
        integers = [name for name in numbers if specs[name].dtype == tf.int64]
        labelled = self.LABEL_KEY in sample and len(self._training_labels) == rows
        profile = self.task.label_profile(self._training_labels) if labelled and (
            integers or row.target_statistics) else None
        before = self._description()
        self._codes = tuple(name for name in integers  # in the columns' order, as the description names them
                            if profile is not None and reads_as_code(np.asarray(sample[name]), profile, row))
        self._redescribe(before)  # the training report names them
        tails = row.tail_bins
        together = len(numbers) > row.wide_numbers  # one tensor for all numbers: a few ops, not a few per column
        for name, spec in specs.items():  # in the columns' order, which the model's inputs keep
            values, column = np.asarray(sample[name]), internal[name]
            if name in self.dates:
                output(CalendarFeatures.fitted(values, name=derived_name(column, "calendar")), inputs[name])
                for part in date_codes(values) if row.date_codes else ():
                    output(CalendarCode(part, name=derived_name(column, part)), inputs[name])
            elif name in categories:
                missing = self.missing_spellings if spec.dtype == tf.string else ()
                lookup = Vocabulary.adapted(values, row.max_vocabulary, name=derived_name(column, "lookup"),
                                            missing_spellings=missing)
                output(lookup, inputs[name])
                if (row.target_statistics and profile is not None
                        and lookup.vocabulary_size() > row.statistics_min_values):
                    output(CodeStatistics.fitted(lookup(tf.constant(values)).numpy(), profile,
                                                 lookup.vocabulary_size(), row.statistics_prior,
                                                 name=derived_name(column, "statistics")),
                           outputs[lookup.name])
            elif not together:
                present = values[_present(values)].astype(np.float64)
                fill = float(np.median(present)) if present.size else 0.0
                filled = FillMissing(fill, name=derived_name(column, "filled"))(inputs[name])
                output(MissingIndicator(name=derived_name(column, "missing")), inputs[name])
                scale = RobustScale.fitted(present, bins, name=derived_name(column, "scaled"), tails=tails)
                output(scale, filled)
                if len(scale.edges) > 1:
                    output(PiecewiseLinear(scale.edges, name=derived_name(column, "piecewise")), outputs[scale.name])
            if name in self._codes:
                seen = values[_present(values)]
                code = Vocabulary.adapted(seen, row.max_vocabulary, name=derived_name(column, "code"))
                output(code, inputs[name])
                if row.target_statistics and profile is not None:
                    output(CodeStatistics.fitted(code(tf.constant(values)).numpy(), profile, code.vocabulary_size(),
                                                 row.statistics_prior, name=derived_name(column, "statistics")),
                           outputs[code.name])
        if together:
            shared_bins = max(2, min(bins, row.wide_bins_total // len(numbers)))  # bounded for all the columns
            self._encode_numbers_together(numbers, sample, inputs, shared_bins, tails, output)
        with warnings.catch_warnings():  # Keras asks for dict keys equal to the inputs' names: here they are not
            warnings.filterwarnings("ignore", "When providing `inputs` as a dict", UserWarning)
            return keras.Model(inputs, outputs, name=_LAYER.format("preprocessing"))

    @staticmethod
    def _encode_numbers_together(numbers: list[str], sample: dict, inputs: dict, bins: int, tails: bool,
                                 output) -> None:
        """A wide table's numbers as one [batch, columns] tensor (in the order of `numbers`), encoded as each
        column alone would be: a missing-value indicator, the value (missing: the median) robustly scaled and
        smoothly clipped, and its piecewise-linear encoding over up to `bins` bins per column."""
        present = [np.asarray(sample[name])[_present(np.asarray(sample[name]))].astype(np.float64)
                   for name in numbers]
        stacked = StackColumns(name=_LAYER.format("numbers"))([inputs[name] for name in numbers])
        output(MissingIndicator(name=_LAYER.format("numbers.missing")), stacked)
        fills = [float(np.median(values)) if values.size else 0.0 for values in present]
        filled = FillMissing(fills, name=_LAYER.format("numbers.filled"))(stacked)
        scale = RobustScaleColumns.fitted(present, bins, name=_LAYER.format("numbers.scaled"), tails=tails)
        output(scale, filled)
        if any(len(edges) > 1 for edges in scale.edges):
            output(PiecewiseLinearColumns(scale.edges, name=_LAYER.format("numbers.piecewise")),
                   scale(filled))

    def build_packed(self, preprocessing: keras.Model, copies: int) -> keras.Model:
        """Input: the model from build_preprocessing and the copies the Trainer bags over (1: none). Output: an
        uncompiled packed network (components/core/packing.py) of Defaults.members_for(copies) members, model-ready
        tensors -> the members' task outputs [N, M, width], float32 whatever precision policy the trainer sets.
        Each input is named by the preprocessing layer that computes it, which tells its kind: a Vocabulary's
        index goes through an embedding per member (the columns of one width looked up together), a float tensor
        in as it is, shared by the members (through one kernel per fold copy that its members share, each member
        scaling its inputs, when the members' own kernels would pass the defaults' shared_kernel_weights: with
        one member per copy, each keeps its kernel and scales its inputs, a product that reads the kernel once)."""
        inputs = {name: keras.Input(shape=tensor.shape[1:], name=name, dtype=tensor.dtype)
                  for name, tensor in preprocessing.output.items()}
        row = self.defaults
        members = row.members_for(copies)
        shared, by_width = [], {}  # by_width: embedding width -> [(index tensor, vocabulary size)]
        for name, tensor in inputs.items():
            layer = preprocessing.get_layer(name)
            # (a Discretization comes from a model served by older code: it builds, so that the warm start
            # can tell its weights do not fit and train from scratch)
            if isinstance(layer, (Vocabulary, CalendarCode, keras.layers.Discretization)):
                size = layer.num_bins + 1 if isinstance(layer, keras.layers.Discretization) else layer.vocabulary_size()
                by_width.setdefault(min(row.embedding_width, 1 + math.ceil(math.log2(size))), []).append(
                    (tensor, size))
            elif len(tensor.shape) == 1:
                shared.append(keras.layers.Reshape((1,), name=derived_name(name, "column"))(tensor))
            else:
                shared.append(tensor)
        own = [PackedEmbedding([size for _, size in columns], width, members,
                               name=_LAYER.format(f"embeddings.{width}"))([tensor for tensor, _ in columns])
               for width, columns in sorted(by_width.items())]  # one lookup per width, whatever the columns
        widths = row.hidden_units
        first = []  # the first layer: one product over the shared features, one batched over each member's own
        for part, features in (("numbers", shared), ("codes", own)):
            if features:
                joined = features[0] if len(features) == 1 else keras.layers.Concatenate(
                    name=_LAYER.format(f"features.{part}"))(features)
                grouped = part == "numbers" and (members * int(joined.shape[-1]) * widths[0]
                                                 > row.shared_kernel_weights)
                first.append(PackedDense(members, widths[0], use_bias=not first, input_scale=True,
                                         kernel_groups=max(1, copies) if grouped else 0,
                                         name=_LAYER.format(f"hidden_1.{part}"))(joined))
        hidden = first[0] if len(first) == 1 else keras.layers.Add(name=_LAYER.format("hidden_1"))(first)
        hidden = keras.layers.Activation("relu", name=_LAYER.format("relu_1"))(hidden)
        hidden = keras.layers.Dropout(row.dropout, name=_LAYER.format("dropout_1"))(hidden)
        for depth, width in enumerate(widths[1:], 2):
            hidden = PackedDense(members, width, activation="relu", name=_LAYER.format(f"hidden_{depth}"))(hidden)
            hidden = keras.layers.Dropout(row.dropout, name=_LAYER.format(f"dropout_{depth}"))(hidden)
        return keras.Model(inputs, self.head(hidden, members), name=_LAYER.format("model"))

    def build_model(self, preprocessing: keras.Model) -> keras.Model:
        """Input: the model from build_preprocessing. Output: the model served without bagging, an uncompiled
        Keras model: model-ready tensors -> the members' mean of the task's output (components/core/model_module.py)."""
        network = self.build_packed(preprocessing, 1)
        return keras.Model(network.input, MembersMean(name=_LAYER.format("mean"))(network.output),
                           name=_LAYER.format("served"))

    def head(self, hidden, members: int):
        """Input: the last hidden tensor, [M, N, H] (member-major), and M. Output: each member's task output in
        float32, [N, M, width] (Task.output_layer: class probabilities, the probability of the positive class,
        or the prediction in the label's units)."""
        outputs = PackedDense(members, self.task.output_width(self.CLASSES), batch_major=True,
                              kernel_limit=int(hidden.shape[-1]) ** -0.5, dtype="float32",
                              name=_LAYER.format("output"))(hidden)
        return self.task.output_layer(self._training_labels, _LAYER.format(self.task.head_name))(outputs)

    def make_loss(self):
        """The training loss, each member's prediction against the label: the task's (Task.training_loss:
        binary or categorical cross-entropy; for regression the absolute error after the label transform)."""
        return self.task.training_loss()


def reads_as_code(values: np.ndarray, profile: np.ndarray, rule: Defaults) -> bool:
    """Input: an integer column's training values (MISSING_INT: missing), Task.label_profile of the same rows and
    the defaults' code_* thresholds. Output: whether its values predict the label as codes do: reliably, each
    value its own way, neighbouring values no more alike than any two."""
    present = _present(values)
    distinct, ids, counts = np.unique(values[present], return_inverse=True, return_counts=True)
    profile = profile[present]
    sums = np.stack([np.bincount(ids, weights=profile[:, j], minlength=len(distinct))
                     for j in range(profile.shape[1])], 1)
    kept = counts >= rule.code_least_rows
    if kept.sum() < 3:
        return False
    deviations = sums[kept] / counts[kept][:, None] - profile.mean(0)
    between = (counts[kept][:, None] * deviations ** 2).sum() / counts[kept].sum()
    noise = profile.var(0).sum() * kept.sum() / counts[kept].sum()  # what sampling alone would spread
    if between <= 0:
        return False
    reliability = 1 - noise / between
    left, right = deviations[:-1], deviations[1:]
    norm = np.sqrt((left ** 2).sum() * (right ** 2).sum())
    neighbours = (left * right).sum() / norm if norm > 0 else 0.0
    return bool(reliability >= rule.code_reliability and neighbours <= rule.code_neighbour_ratio * reliability)


def date_codes(seconds: np.ndarray) -> tuple[str, ...]:
    """The calendar parts a date column's training values get as codes (CalendarCode): its month and weekday,
    and where the times of day differ, its hour and hour of the week."""
    present = np.asarray(seconds, np.int64)
    present = present[present != MISSING_INT]
    timed = present.size and len(np.unique(present % 86_400)) > 1
    return ("month", "weekday", "hour", "hour_of_week") if timed else ("month", "weekday")


def _missing_value(dtype: tf.dtypes.DType):
    return {tf.float32: float("nan"), tf.int64: MISSING_INT, tf.string: ""}[dtype]


def _present(values: np.ndarray) -> np.ndarray:
    """True where a sample value is not missing: not the missing value of its dtype, and finite (in float32,
    as the model receives it)."""
    if values.dtype.kind == "f":
        with np.errstate(over="ignore"):
            return np.isfinite(values.astype(np.float32))
    return values != MISSING_INT


def _missing(x) -> tf.Tensor:
    """True where x is missing: an integer's MISSING_INT, a float's NaN, inf or -inf. NaN is the one value
    not equal to itself, and an infinity the only one larger in size than its dtype's largest (NOT_EQUAL, ABS,
    GREATER and LOGICAL_OR are TFLite builtins; is-NaN and is-inf ops are not)."""
    if not x.dtype.is_floating:
        return tf.equal(x, tf.constant(MISSING_INT, x.dtype))
    return tf.logical_or(tf.not_equal(x, x), tf.greater(tf.abs(x), tf.constant(x.dtype.max, x.dtype)))


@keras.saving.register_keras_serializable(package="models.tabular")
class CodeStatistics(keras.layers.Layer):
    """A Vocabulary's int64 index [batch] -> float32 [batch, D]: row `index` of a table fitted on the training
    sample, the label's mean profile (Task.label_profile: a class's share, or a regression label's mean rank)
    over the records of each index, smoothed toward the overall mean (GATHER: a builtin TFLite op)."""

    def __init__(self, table, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.table = [[float(value) for value in row] for row in table]

    @classmethod
    def fitted(cls, indices: np.ndarray, profile: np.ndarray, size: int, prior: float,
               name: str) -> "CodeStatistics":
        """Input: the sample's indices, its label profile [N, D] (a binary task's second column alone), the
        vocabulary size and the prior's weight in records. Output: the layer, each index's (sum + prior x overall
        mean) / (count + prior)."""
        profile = np.asarray(profile, np.float64)
        profile = profile[:, 1:] if profile.shape[1] == 2 else profile
        indices = np.asarray(indices, np.int64).reshape(-1)
        counts = np.bincount(indices, minlength=size)[:, None]
        sums = np.stack([np.bincount(indices, weights=profile[:, j], minlength=size)
                         for j in range(profile.shape[1])], 1)
        table = (sums + prior * profile.mean(0)) / (counts + prior)
        return cls(table.astype(np.float32).tolist(), name=name)

    def call(self, index):
        return tf.gather(tf.constant(self.table, tf.float32), tf.cast(index, tf.int32))

    def compute_output_spec(self, index):
        return keras.KerasTensor((*index.shape, len(self.table[0])), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "table": self.table}


@keras.saving.register_keras_serializable(package="models.tabular")
class MissingIndicator(keras.layers.Layer):
    """1.0 where the value is missing (NaN, inf or -inf, or MISSING_INT for integers), else 0.0, as float32."""

    def call(self, x):
        return tf.cast(_missing(x), tf.float32)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="float32")


@keras.saving.register_keras_serializable(package="models.tabular")
class StackColumns(keras.layers.Layer):
    """Numbers of many columns -> one float32 tensor [batch, columns], a missing integer (MISSING_INT) as NaN
    (PACK, SELECT_V2 and CAST are builtins)."""

    def call(self, columns):
        def as_float(x):
            if x.dtype.is_floating:
                return tf.cast(x, tf.float32)
            return tf.where(_missing(x), tf.constant(float("nan"), tf.float32), tf.cast(x, tf.float32))
        return tf.stack([as_float(x) for x in columns], axis=1)

    def compute_output_spec(self, columns):
        return keras.KerasTensor((columns[0].shape[0], len(columns)), dtype="float32")


@keras.saving.register_keras_serializable(package="models.tabular")
class FillMissing(keras.layers.Layer):
    """The value as float32, `fill` (the training median) where it is missing; for [batch, columns] values a
    fill per column."""

    def __init__(self, fill, **kwargs):
        super().__init__(**kwargs)
        self.fill = [float(f) for f in fill] if isinstance(fill, (list, tuple)) else float(fill)

    def call(self, x):
        return tf.where(_missing(x), tf.constant(self.fill, tf.float32), tf.cast(x, tf.float32))

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="float32")

    def get_config(self):
        return {**super().get_config(), "fill": self.fill}
