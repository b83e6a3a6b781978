"""Device-safe Keras layers for model modules' preprocessing, and small helpers to build models with them.

ModelExport converts a model's preprocessing with TFLite's builtin kernels only (no Flex), so preprocessing
is built from layers whose ops have builtin kernels and convert exactly:
- arithmetic and elementwise math (`ClippedLog1p`, `Standardize` here): RELU, ADD, LOG, SUB, MUL, ...;
- `keras.layers.Discretization` (BUCKETIZE);
- `Vocabulary` here, for integer and string categories (EQUAL, SELECT_V2, REDUCE_MAX);
- `CalendarFeatures` here, for dates as int64 seconds since the epoch, years 1 to 9999: int64 comparisons and
  subtractions, then int32 FLOOR_DIV and FLOOR_MOD (an int64 FloorDiv has no builtin kernel; parsing date
  strings needs ops TFLite lacks), SIN, COS.
Not device-safe: `keras.layers.Hashing` (string hashing has no builtin kernel, and of a number it first
formats the number as a string), `keras.layers.IntegerLookup` (an int64 -> int64 hash table, which
TFLite's builtin tables do not support; one such table in a graph also stops the converter from
lowering any other table), anything that adds tf.strings ops or mutable tables. `StringLookup`'s static
string table does convert (HASHTABLE_FIND), but `Vocabulary` needs no table initialization inside the
file. The SavedModel and the device model run the same layers, so a layer the device cannot run is
replaced in both, never only on the device.
"""
from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from components.core.contract import DATE_RANGE, DATE_RANGE_TEXT


@keras.saving.register_keras_serializable(package="models.layers")  # saved with the preprocessing (warm start)
class ClippedLog1p(keras.layers.Layer):
    """log(1 + max(x, 0)) as float32: tames the long tails of fares, distances and durations."""

    def call(self, x):
        return keras.ops.log1p(keras.ops.maximum(keras.ops.cast(x, "float32"), 0.0))


@keras.saving.register_keras_serializable(package="models.layers")
class Standardize(keras.layers.Layer):
    """(x - mean) * scale in float32: Keras's Normalization with its two constants fixed at construction.

    `fitted` rounds both to float16 precision where that moves the standardized values by at most 0.01 of
    a standard deviation, so every TFLite variant holds them exactly: the float16 variant stores all float
    constants in half precision, and a value already representable there survives unchanged. Where
    rounding would move them more (a mean of 41.89 with a spread of 0.04, say) or overflow float16 (a
    timestamp), both stay float32, and a float16 variant that cannot hold them is rejected by its output
    check at export.
    """

    def __init__(self, mean: float, scale: float, **kwargs):
        super().__init__(**kwargs)
        self.mean, self.scale = float(mean), float(scale)

    @classmethod
    def fitted(cls, values: np.ndarray, name: str) -> "Standardize":
        """Input: sample values. Output: the layer that maps them to mean 0 and standard deviation ~1."""
        return cls(*standardization(values), name=name)

    def call(self, x):
        return (keras.ops.cast(x, "float32") - np.float32(self.mean)) * np.float32(self.scale)

    def get_config(self):
        return {**super().get_config(), "mean": self.mean, "scale": self.scale}


def standardization(values: np.ndarray) -> tuple[float, float]:
    """Input: sample values. Output: (mean, scale) that map them to mean 0 and standard deviation ~1, both
    rounded to float16 precision where that moves the standardized values by at most 0.01 of a standard
    deviation (see Standardize)."""
    values = np.asarray(values, np.float64)
    mean, std = (float(values.mean()), float(values.std())) if values.size else (0.0, 1.0)
    return half_precision_safe(mean, 1.0 / max(std, 1e-3))


def half_precision_safe(center: float, scale: float) -> tuple[float, float]:
    """Input: the constants of (x - center) * scale. Output: both rounded to float16 precision where that moves
    the result by at most 0.01 (see Standardize), else both as they were."""
    with np.errstate(over="ignore"):
        center16, scale16 = float(np.float16(center)), float(np.float16(scale))
    if (np.isfinite(center16) and np.isfinite(scale16) and abs(center16 - center) * scale <= 0.01
            and abs(scale16 / scale - 1) <= 1e-3):
        return center16, scale16
    return center, scale


SMOOTH_CLIP = 3.0  # RobustScale's bound: a scaled value of size far above this comes out near +-SMOOTH_CLIP


@keras.saving.register_keras_serializable(package="models.layers")
class RobustScale(keras.layers.Layer):
    """A number robustly scaled and smoothly clipped, float32: z = (x - median) * scale, where scale maps the
    sample's 25th-75th percentile range to about one (its spread when that range is empty), then
    z / sqrt(1 + (z / SMOOTH_CLIP)^2): about z near the middle, never beyond +-SMOOTH_CLIP, so an outlier cannot
    dominate (RealMLP's robust scale and smooth clip). Builtins only (SUB, MUL, MINIMUM, MAXIMUM, ADD, RSQRT).

    `edges`: the sample's quantiles after this scaling (distinct, increasing; with `tails`, finer in the tails
    of a smooth number, see edge_quantiles): the bins of the model's piecewise-linear encoding
    (PiecewiseLinear), fitted with the rest of the preprocessing and saved with it.
    """

    LARGE = 1e4  # z is clipped to +-LARGE first (where the smooth clip is within 1e-7 of +-SMOOTH_CLIP)
    TAILS_DISTINCT = 4  # a number with this many distinct values per bin (and no spike) gets finer tail bins

    def __init__(self, center: float, scale: float, edges=(), **kwargs):
        super().__init__(**kwargs)
        self.center, self.scale = float(center), float(scale)
        self.edges = [float(edge) for edge in edges]

    @classmethod
    def fitted(cls, values: np.ndarray, bins: int, name: str, tails: bool = False) -> "RobustScale":
        """Input: present sample values, the number of quantile bins wanted and whether a smooth number's
        tails get finer bins. Output: the fitted layer (see fit)."""
        return cls(*cls.fit(values, bins, tails), name=name)

    @classmethod
    def fit(cls, values: np.ndarray, bins: int, tails: bool = False) -> tuple[float, float, list[float]]:
        """Input: present sample values, the number of quantile bins wanted and whether a smooth number's tails
        get finer bins. Output: (center, scale, edges), the edges at most bins + 1 distinct quantiles of the
        scaled sample (fewer for a number of few values), at the levels edge_quantiles gives."""
        values = np.asarray(values, np.float64)
        if not values.size:
            return 0.0, 1.0, []
        low, median, high = np.quantile(values, [0.25, 0.5, 0.75])
        spread = high - low if high > low else values.std()
        center, scale = half_precision_safe(float(median), 1.0 / max(float(spread), 1e-6))
        scaled = cls.scaled(values, center, scale)
        edges = np.unique(np.quantile(scaled, cls.edge_quantiles(values, bins, tails)).astype(np.float32))
        return center, scale, [float(edge) for edge in edges] if edges.size > 1 else []

    @classmethod
    def edge_quantiles(cls, values: np.ndarray, bins: int, tails: bool) -> np.ndarray:
        """Input: present sample values, the number of bins and whether a smooth number's tails get finer bins.
        Output: the bins + 1 quantile levels of the edges, 0 to 1: evenly spaced, i / bins, except with `tails`
        for a smooth number (at least TAILS_DISTINCT x bins distinct values, none in more than 1/bins of the
        rows): (1 - cos(pi i / bins)) / 2, for 16 bins the 1st, 4th, 8th, 15th... percentiles, so that where its
        extremes are each bin holds few rows. A spike (mostly 0) or few values keep even levels: no bin is spent
        inside one value."""
        levels = np.linspace(0.0, 1.0, bins + 1)
        if not tails:
            return levels
        _, counts = np.unique(values, return_counts=True)
        if counts.size >= cls.TAILS_DISTINCT * bins and counts.max() <= values.size / bins:
            return (1.0 - np.cos(np.pi * levels)) / 2.0
        return levels

    @classmethod
    def scaled(cls, values: np.ndarray, center, scale) -> np.ndarray:
        """The layer's function in numpy (float64), for fitting."""
        z = np.clip((np.asarray(values, np.float64) - center) * scale, -cls.LARGE, cls.LARGE)
        return z / np.sqrt(1.0 + (z / SMOOTH_CLIP) ** 2)

    def call(self, x):
        z = (keras.ops.cast(x, "float32") - np.float32(self.center)) * np.float32(self.scale)
        z = keras.ops.clip(z, -self.LARGE, self.LARGE)  # its square stays finite
        return z * keras.ops.rsqrt(1.0 + keras.ops.square(z * np.float32(1.0 / SMOOTH_CLIP)))

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="float32")

    def get_config(self):
        return {**super().get_config(), "center": self.center, "scale": self.scale, "edges": self.edges}


@keras.saving.register_keras_serializable(package="models.layers")
class RobustScaleColumns(RobustScale):
    """RobustScale of many numbers at once: float32 [batch, columns] -> [batch, columns], each column with its
    own center, scale and edges (a wide table's numbers as one tensor: a few ops, however many columns)."""

    def __init__(self, center, scale, edges=(), **kwargs):
        keras.layers.Layer.__init__(self, **kwargs)
        self.center, self.scale = [float(c) for c in center], [float(s) for s in scale]
        self.edges = [[float(edge) for edge in column] for column in edges]

    @classmethod
    def fitted(cls, columns: list, bins: int, name: str, tails: bool = False) -> "RobustScaleColumns":
        """Input: each column's present sample values, the number of quantile bins wanted and whether a smooth
        number's tails get finer bins. Output: the fitted layer (per column what RobustScale.fit fits); its call
        is RobustScale's, broadcast over columns."""
        centers, scales, edges = zip(*(RobustScale.fit(values, bins, tails) for values in columns))
        return cls(centers, scales, edges, name=name)


@keras.saving.register_keras_serializable(package="models.layers")
class PiecewiseLinear(keras.layers.Layer):
    """Piecewise-linear encoding of a number over bins (Gorishniy et al., "On Embeddings for Numerical Features
    in Tabular Deep Learning", 2022): [batch] -> float32 [batch, bins], where `edges` (increasing) bound the
    bins. Bin t reads 0 below its left edge, 1 above its right edge and the position in between; the first bin
    goes on below 0 and the last above 1, so values beyond the edges stay apart. A dense layer on this cuts the
    number where trees would. Float32 whatever the precision policy (it subtracts close numbers). Builtins
    only (SUB, MUL, MAXIMUM, MINIMUM)."""

    OPEN = 1e4  # the bound of the first bin below and of the last above (float16 holds it)

    def __init__(self, edges, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.edges = [float(edge) for edge in edges]
        self._left, self._inverse_width, self._low, self._high = self.bounds(self.edges, self.name)

    @classmethod
    def bounds(cls, edges: list[float], name: str) -> tuple[np.ndarray, ...]:
        """Input: two or more increasing edges (ValueError naming `name` otherwise). Output: float32 arrays over
        the bins: each bin's left edge, its inverse width, and the lower and upper bounds of its reading."""
        if len(edges) < 2 or any(b <= a for a, b in zip(edges, edges[1:])):
            raise ValueError(f"{name}: needs two or more increasing edges, got {edges}")
        edges = np.asarray(edges, np.float64)
        bins = len(edges) - 1
        return (edges[:-1].astype(np.float32), (1.0 / np.diff(edges)).astype(np.float32),
                np.where(np.arange(bins) == 0, -cls.OPEN, 0.0).astype(np.float32),
                np.where(np.arange(bins) == bins - 1, cls.OPEN, 1.0).astype(np.float32))

    def call(self, x):
        position = (keras.ops.expand_dims(keras.ops.cast(x, "float32"), -1) - self._left) * self._inverse_width
        return keras.ops.minimum(keras.ops.maximum(position, self._low), self._high)

    def compute_output_spec(self, x):
        return keras.KerasTensor((*x.shape, len(self._left)), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "edges": self.edges}


@keras.saving.register_keras_serializable(package="models.layers")
class PiecewiseLinearColumns(keras.layers.Layer):
    """PiecewiseLinear of many numbers at once: float32 [batch, columns] -> [batch, columns x bins], each
    column over its own `edges` (a column with fewer bins than the widest reads 0 in the rest, as does one
    with fewer than two edges). Builtins only (SUB, MUL, MAXIMUM, MINIMUM, RESHAPE)."""

    def __init__(self, edges, **kwargs):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.edges = [[float(edge) for edge in column] for column in edges]
        self.bins = max([len(column) - 1 for column in self.edges] + [1])
        shape = (len(self.edges), self.bins)
        self._left, self._inverse_width = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        self._low, self._high = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
        for row, column in enumerate(self.edges):
            if len(column) >= 2:
                count = len(column) - 1
                (self._left[row, :count], self._inverse_width[row, :count], self._low[row, :count],
                 self._high[row, :count]) = PiecewiseLinear.bounds(column, f"{self.name} column {row}")

    def call(self, x):
        position = (keras.ops.expand_dims(keras.ops.cast(x, "float32"), -1) - self._left) * self._inverse_width
        encoded = keras.ops.minimum(keras.ops.maximum(position, self._low), self._high)
        return keras.ops.reshape(encoded, (-1, len(self.edges) * self.bins))

    def compute_output_spec(self, x):
        return keras.KerasTensor((x.shape[0], len(self.edges) * self.bins), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "edges": self.edges}


@keras.saving.register_keras_serializable(package="models.layers")
class Vocabulary(keras.layers.Layer):
    """int64 or string value -> int64 index: 1 + its position in `vocabulary`, 0 for any other value.

    The answers of Keras's IntegerLookup / StringLookup with one out-of-vocabulary index, computed by
    comparing the value with every vocabulary entry: EQUAL, SELECT_V2 and REDUCE_MAX, builtin TFLite ops
    that run exactly in every variant, 11-digit census tracts included (IntegerLookup's int64 -> int64 hash
    table has no TFLite kernel), with no table to initialize inside the file. Meant for vocabularies of
    up to a few thousand values: each example is compared with all of them.

    `missing_spellings` (strings only): values that mean a missing value (prepare-data's missing tokens, as a
    client may send a CSV cell): each gets the index of "" (the missing string), or 0 when "" is not in the
    vocabulary, as "" itself would.
    """

    def __init__(self, vocabulary, missing_spellings=(), **kwargs):
        super().__init__(**kwargs)
        vocabulary = list(vocabulary)
        self.is_string = bool(vocabulary) and isinstance(vocabulary[0], str)
        self.vocabulary = [str(v) for v in vocabulary] if self.is_string else [int(v) for v in vocabulary]
        if not self.vocabulary or len(set(self.vocabulary)) != len(self.vocabulary):
            raise ValueError(f"{self.name}: the vocabulary must be non-empty and without repeats")
        self.missing_spellings = [str(v) for v in missing_spellings if str(v) not in self.vocabulary] \
            if self.is_string else []

    @classmethod
    def adapted(cls, values: np.ndarray, max_size: int, name: str, missing_spellings=()) -> "Vocabulary":
        """Input: sample values (int64, or bytes for strings) and, for strings, the spellings that mean missing.
        Output: the layer whose vocabulary is the `max_size` most frequent of the values, most frequent first
        (ties: smaller value first)."""
        values = np.asarray(values)
        if values.dtype.kind in "OSU":  # strings: kept as text (a value that is not UTF-8 stays out of vocabulary)
            values = np.array([_text(v) for v in values if _text(v) is not None], dtype=object)
        return cls(most_frequent(values, max_size), missing_spellings, name=name)

    def call(self, x):
        """Input: values of shape [batch]. Output: their int64 indices, shape [batch]."""
        if x.shape.rank != 1:
            raise ValueError(f"{self.name}: expects values of shape [batch], got {x.shape}")
        if self.is_string:
            keys = self.vocabulary + self.missing_spellings
            vocabulary, x = tf.constant(keys, tf.string), tf.convert_to_tensor(x, tf.string)
        else:
            vocabulary, x = tf.constant(self.vocabulary, tf.int64), tf.cast(x, tf.int64)
        # [vocabulary, 1] against [batch] broadcasts to [vocabulary, batch] without reshaping the input: in
        # TFLite a string tensor that an op produces is dynamically sized, and one such tensor keeps the
        # XNNPACK delegate off the whole graph.
        matches = tf.equal(tf.expand_dims(vocabulary, -1), x)
        missing = self.vocabulary.index("") + 1 if "" in self.vocabulary else 0
        positions = list(range(1, len(self.vocabulary) + 1)) + [missing] * len(self.missing_spellings)
        positions = tf.constant(positions, tf.int64)[:, tf.newaxis]
        return tf.reduce_max(tf.where(matches, positions, tf.constant(0, tf.int64)), axis=0)

    def compute_output_spec(self, x):
        return keras.KerasTensor(x.shape, dtype="int64")

    def vocabulary_size(self) -> int:
        return len(self.vocabulary) + 1

    def get_config(self):
        return {**super().get_config(), "vocabulary": self.vocabulary, "missing_spellings": self.missing_spellings}


def most_frequent(values: np.ndarray, count: int) -> list:
    """Input: values (integers or strings) and a count. Output: the `count` most frequent distinct values,
    most frequent first (ties: smaller value first)."""
    distinct, counts = np.unique(np.asarray(values), return_counts=True)
    order = sorted(range(len(distinct)), key=lambda i: (-counts[i], distinct[i]))[:count]
    return [distinct[i].item() if hasattr(distinct[i], "item") else distinct[i] for i in order]


def _text(value) -> str | None:
    try:
        return value.decode("utf-8") if isinstance(value, bytes) else str(value)
    except UnicodeDecodeError:
        return None


MISSING_INT = -(2 ** 63)  # what an absent int64 feature is parsed as (int64 has no NaN)
CALENDAR_BASE = 946_684_800  # 2000-01-01T00:00Z in seconds since 1970-01-01: `days` counts from it
# The instants calendar_parts tells apart: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z (contract.DATE_RANGE)
CALENDAR_RANGE = DATE_RANGE
_FIRST_DAY = -730_119  # 0001-01-01 in days since 2000-01-01
_BLOCK_DAYS = 2 ** 14  # 86,400 x 2**14 seconds still fit in int32
_BLOCK_BITS = 8  # 2**8 blocks of _BLOCK_DAYS days cover CALENDAR_RANGE (3,652,059 days)


def day_and_second(seconds) -> tuple[tf.Tensor, tf.Tensor]:
    """Input: int64 seconds since 1970-01-01 UTC, any shape. Output: int32 (days since 2000-01-01, second of
    the day 0-86399) of each instant, exact over CALENDAR_RANGE; a value outside it counts as the range's nearest
    end.

    TFLite builtin ops only: an int64 FloorDiv has no builtin kernel, and int32 seconds cover only 1932 to 2068.
    So the seconds are clamped and counted from the range's first instant in int64 (MINIMUM, MAXIMUM, SUB), then
    taken apart in blocks of _BLOCK_DAYS x 2**k days, largest first, each by an int64 comparison and subtraction
    (GREATER_EQUAL, SELECT_V2, SUB); what is left is less than one block, fits int32 (CAST), and splits into days
    and seconds there (FLOOR_DIV, FLOOR_MOD)."""
    first, last = CALENDAR_RANGE
    left = tf.clip_by_value(tf.cast(seconds, tf.int64), first, last) - first
    days = None
    for bit in reversed(range(_BLOCK_BITS)):
        block = _BLOCK_DAYS * 2 ** bit
        taken = tf.greater_equal(left, tf.constant(block * 86_400, tf.int64))
        left = left - tf.where(taken, tf.constant(block * 86_400, tf.int64), tf.constant(0, tf.int64))
        counted = tf.where(taken, tf.constant(block, tf.int32), tf.constant(0, tf.int32))
        days = counted if days is None else days + counted
    left = tf.cast(left, tf.int32)
    return days + tf.math.floordiv(left, 86_400) + _FIRST_DAY, tf.math.floormod(left, 86_400)


def calendar_parts(seconds) -> dict[str, tf.Tensor]:
    """Input: int64 seconds since 1970-01-01 UTC, any shape. Output: int32 tensors of that shape, each
    instant's UTC calendar: year, month (1-12), day (of the month, 1-31), weekday (Monday 0 to Sunday 6, as
    Python's date.weekday()), day_of_year (1-366), hour (0-23), minute_of_day (0-1439) and days (since
    2000-01-01). Exact over CALENDAR_RANGE, years 1 to 9999; a value outside it counts as the range's nearest
    end (prepare-data refuses such dates).

    TFLite builtin ops only: the days and the second of the day come from day_and_second; the rest is int32
    arithmetic (FLOOR_DIV and FLOOR_MOD have int32 kernels). Year, month and day follow Howard Hinnant's
    civil_from_days (https://howardhinnant.github.io/date_algorithms.html), counted in days from 0000-03-01 so
    that February, with its leap day, ends each year of the computation."""
    days, second_of_day = day_and_second(seconds)
    shifted = days + 730_425  # days since 0000-03-01 (10957 from 1970 to 2000, 719468 from 0000-03-01 to 1970)
    era = tf.math.floordiv(shifted, 146_097)  # 400-year cycles of the Gregorian calendar
    day_of_era = shifted - era * 146_097  # [0, 146096]
    year_of_era = tf.math.floordiv(day_of_era - tf.math.floordiv(day_of_era, 1_460) + tf.math.floordiv(
        day_of_era, 36_524) - tf.math.floordiv(day_of_era, 146_096), 365)  # [0, 399]
    day_of_march_year = day_of_era - (365 * year_of_era + tf.math.floordiv(year_of_era, 4)
                                      - tf.math.floordiv(year_of_era, 100))  # [0, 365] from March 1
    march_month = tf.math.floordiv(5 * day_of_march_year + 2, 153)  # 0: March ... 11: February
    march_to_december = tf.less(march_month, 10)
    year = year_of_era + era * 400 + tf.where(march_to_december, 0, 1)
    leap = tf.logical_and(tf.equal(tf.math.floormod(year, 4), 0), tf.logical_or(
        tf.not_equal(tf.math.floormod(year, 100), 0), tf.equal(tf.math.floormod(year, 400), 0)))
    return {
        "year": year,
        "month": tf.where(march_to_december, march_month + 3, march_month - 9),
        "day": day_of_march_year - tf.math.floordiv(153 * march_month + 2, 5) + 1,
        "weekday": tf.math.floormod(days + 5, 7),  # 2000-01-01 was a Saturday
        # January 1 is day 306 of the year from March 1; March 1 is day 60, or 61 in a leap year
        "day_of_year": tf.where(march_to_december, day_of_march_year + 60 + tf.cast(leap, tf.int32),
                                day_of_march_year - 305),
        "hour": tf.math.floordiv(second_of_day, 3_600),
        "minute_of_day": tf.math.floordiv(second_of_day, 60),
        "days": days,
    }


@keras.saving.register_keras_serializable(package="models.layers")
class CalendarFeatures(keras.layers.Layer):
    """A date or date-time, int64 seconds since 1970-01-01 UTC of shape [batch] (MISSING_INT: missing) ->
    float32 [batch, len(FEATURES)], from calendar_parts (TFLite builtin ops only):
    - missing: 1.0 for a missing value, whose other features are all 0;
    - year: the year, standardized on the training sample;
    - trend: the instant in years (to the minute), standardized on the training sample;
    - a cycle (sine and cosine of 2 pi phase) for the month, the day of the month, the weekday, the day of the
      year and the time of day (to the minute): December sits next to January, 23:59 next to 00:00.

    year and trend are centred in integers first (on a whole year, a whole day), so that the float constants
    left are small and a float16 variant, which holds every float constant in half precision, holds them too.
    """

    FEATURES = ("missing", "year", "trend", "month_sin", "month_cos", "day_sin", "day_cos", "weekday_sin",
                "weekday_cos", "day_of_year_sin", "day_of_year_cos", "time_of_day_sin", "time_of_day_cos")
    # part of calendar_parts -> (its first value, its period): phase = (value - first) / period
    _CYCLES = {"month": (1, 12), "day": (1, 31), "weekday": (0, 7), "day_of_year": (1, 365.25),
               "minute_of_day": (0, 1440)}

    def __init__(self, year: tuple[int, float, float] = (2000, 0.0, 0.05),
                 trend: tuple[int, float, float] = (0, 0.0, 0.05), **kwargs):
        """year: (a whole year near the mean, the rest of the mean, the scale); trend: (a whole day near the
        mean, in days since 2000-01-01, the rest of the mean in years, the scale)."""
        super().__init__(**kwargs)
        self.year = (int(year[0]), float(year[1]), float(year[2]))
        self.trend = (int(trend[0]), float(trend[1]), float(trend[2]))

    @classmethod
    def fitted(cls, seconds: np.ndarray, name: str) -> "CalendarFeatures":
        """Input: sample values (int64 seconds, MISSING_INT for missing ones). Output: the layer whose year
        and trend have mean 0 and standard deviation ~1 on the present values. ValueError naming `name` when a
        present value lies outside CALENDAR_RANGE (never read as the range's end in silence)."""
        seconds = np.asarray(seconds, np.int64)
        present = seconds[seconds != MISSING_INT]
        outside = present[(present < CALENDAR_RANGE[0]) | (present > CALENDAR_RANGE[1])]
        if outside.size:
            raise ValueError(f"{name}: {outside.size:,} date(s) outside {DATE_RANGE_TEXT} (int64 seconds "
                             f"{CALENDAR_RANGE[0]:,} to {CALENDAR_RANGE[1]:,} since 1970-01-01), e.g. "
                             f"{int(outside[0]):,}: the calendar cannot read them (milliseconds rather than seconds?)")
        if not present.size:  # nothing to fit: the years from 1970 to 2030
            present = np.array([0, 2 * CALENDAR_BASE], np.int64)
        parts = {part: tensor.numpy() for part, tensor in calendar_parts(tf.constant(present)).items()}
        years = parts["year"].astype(np.float64)
        days = parts["days"] + parts["minute_of_day"] / 1440
        year_center, day_center = int(np.round(years.mean())), int(np.round(days.mean()))
        return cls(year=(year_center, *standardization(years - year_center)),
                   trend=(day_center, *standardization((days - day_center) / 365.25)), name=name)

    def call(self, seconds):
        seconds = tf.cast(seconds, tf.int64)
        missing = tf.cast(tf.equal(seconds, tf.constant(MISSING_INT, tf.int64)), tf.float32)
        parts = calendar_parts(seconds)  # a missing value counts as year 1: its features are zeroed below
        year_center, year_mean, year_scale = self.year
        day_center, day_mean, day_scale = self.trend
        year = (tf.cast(parts["year"] - year_center, tf.float32) - np.float32(year_mean)) * np.float32(year_scale)
        days = tf.cast(parts["days"] - day_center, tf.float32) + tf.cast(parts["minute_of_day"], tf.float32) / 1440
        trend = (days / np.float32(365.25) - np.float32(day_mean)) * np.float32(day_scale)
        features = [year, trend]
        for part, (first, period) in self._CYCLES.items():
            angle = tf.cast(parts[part] - first, tf.float32) * np.float32(2 * np.pi / period)
            features += [tf.sin(angle), tf.cos(angle)]
        present = tf.expand_dims(1.0 - missing, -1)
        return tf.concat([tf.expand_dims(missing, -1), tf.stack(features, axis=-1) * present], axis=-1)

    def compute_output_spec(self, seconds):
        return keras.KerasTensor((*seconds.shape, len(self.FEATURES)), dtype="float32")

    def get_config(self):
        return {**super().get_config(), "year": list(self.year), "trend": list(self.trend)}


@keras.saving.register_keras_serializable(package="models.layers")
class CalendarCode(keras.layers.Layer):
    """One part of a date's calendar as a code for an embedding: int64 seconds since 1970-01-01 UTC [batch]
    (MISSING_INT: missing) -> int64 [batch], 0 for a missing date, else 1 + the part's value (PARTS: month 1-12
    as 1-12... ; weekday, hour and the hour of the week, hour x 7 + weekday, each from 0). Where the cycles of
    CalendarFeatures are smooth, a code lets the model give each hour or weekday an effect of its own, as trees
    cut them. TFLite builtin ops only (calendar_parts, CAST, SELECT_V2)."""

    PARTS = {"month": 13, "weekday": 8, "hour": 25, "hour_of_week": 169}  # part -> vocabulary size

    def __init__(self, part: str, **kwargs):
        super().__init__(**kwargs)
        if part not in self.PARTS:
            raise ValueError(f"{self.name}: no calendar part {part!r} (one of {', '.join(self.PARTS)})")
        self.part = part

    def call(self, seconds):
        seconds = tf.cast(seconds, tf.int64)
        parts = calendar_parts(seconds)
        value = {"month": parts["month"] - 1, "weekday": parts["weekday"], "hour": parts["hour"],
                 "hour_of_week": parts["hour"] * 7 + parts["weekday"]}[self.part]
        code = tf.cast(value + 1, tf.int64)
        return tf.where(tf.equal(seconds, tf.constant(MISSING_INT, tf.int64)), tf.constant(0, tf.int64), code)

    def compute_output_spec(self, seconds):
        return keras.KerasTensor(seconds.shape, dtype="int64")

    def vocabulary_size(self) -> int:
        return self.PARTS[self.part]

    def get_config(self):
        return {**super().get_config(), "part": self.part}


def embed(index, vocabulary_size: int, width: int, name: str):
    """An embedding of `width` per index, flattened to (batch, width)."""
    embedding = keras.layers.Embedding(vocabulary_size, width, name=f"{name}_embedding")(index)
    return keras.layers.Reshape((width,))(embedding)


def keras_dtype(dtype: tf.DType) -> str:
    """The Keras dtype name of a tf.io feature's dtype."""
    return {tf.float32: "float32", tf.int64: "int64", tf.string: "string"}[dtype]
