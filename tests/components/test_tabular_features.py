"""The schema-driven model's features: dates as a calendar computed with TFLite builtins (exactly Python's UTC
calendar), infinite numbers as missing, and columns of any name (models/tabular.py, models/layers.py)."""
import datetime

import keras
import numpy as np
import pytest
import tensorflow as tf

from components.core import contract, tasks
from components.core.feature_names import internal_names
from components.model_export import tflite
from components.settings import TaskConfig
from components.core.tasks import TaskError
from models import tabular
from models.layers import CALENDAR_RANGE, MISSING_INT, CalendarCode, CalendarFeatures, calendar_parts

UTC = datetime.timezone.utc
PARTS = ("year", "month", "day", "weekday", "day_of_year", "hour")


def _seconds(*args) -> int:
    return int(datetime.datetime(*args, tzinfo=UTC).timestamp())


def _python_calendar(seconds: int) -> tuple:
    moment = datetime.datetime.fromtimestamp(seconds, UTC)
    return moment.year, moment.month, moment.day, moment.weekday(), moment.timetuple().tm_yday, moment.hour


EDGES = [_seconds(*moment) for moment in [
    (2000, 2, 28, 23, 59, 59), (2000, 2, 29), (2000, 2, 29, 12), (2000, 3, 1), (2000, 12, 31, 23, 59, 59),
    (2024, 2, 29), (2024, 3, 1), (2024, 12, 31), (2023, 2, 28, 23), (2023, 3, 1), (2023, 12, 31, 23, 59, 59),
    (1999, 12, 31, 23, 59, 59), (2000, 1, 1), (1970, 1, 1), (1969, 12, 31, 23, 59, 59), (1969, 1, 1),
    (1936, 2, 29, 7), (1936, 3, 1), (1932, 1, 1), (1945, 5, 8, 23), (2064, 2, 29), (2067, 12, 31, 23, 59, 59),
    (2068, 1, 1), (2038, 1, 19, 3, 14, 8),
    # beyond int32 seconds from 2000 (1931-12-13 to 2068-01-19): birth dates, long contracts, history
    (1931, 12, 13, 20, 45, 51), (1931, 12, 13, 20, 45, 52), (2068, 1, 19, 3, 14, 7), (2068, 1, 19, 3, 14, 8),
    (1905, 6, 30), (1920, 1, 1), (1924, 12, 31, 23), (1925, 1, 1), (1926, 3, 4), (1900, 2, 28), (1900, 3, 1),
    (2080, 7, 1), (2099, 12, 31, 23, 59, 59), (2100, 2, 28), (2100, 3, 1), (2400, 2, 29), (1600, 2, 29),
    (1582, 10, 4), (1582, 10, 15), (1066, 10, 14, 9), (1, 1, 1), (1, 1, 1, 0, 0, 1), (1, 12, 31, 23), (4, 2, 29),
    (100, 3, 1), (400, 2, 29), (9999, 12, 31, 23, 59, 59), (9999, 1, 1), (9996, 2, 29), (5000, 6, 15, 12)]]
EDGES += [CALENDAR_RANGE[0], CALENDAR_RANGE[1], -1, 0, 86_399, -86_400]


def test_calendar_parts_are_pythons_utc_calendar_from_year_1_to_9999():
    rng = np.random.default_rng(7)
    seconds = np.concatenate([rng.integers(_seconds(1935, 1, 1), _seconds(2065, 1, 1), 400),
                              rng.integers(*CALENDAR_RANGE, 2000, endpoint=True), EDGES]).astype(np.int64)
    parts = {name: tensor.numpy() for name, tensor in calendar_parts(tf.constant(seconds)).items()}
    assert all(parts[name].dtype == np.int32 for name in PARTS)
    got = np.stack([parts[name] for name in PARTS], axis=1).tolist()
    expected = [list(_python_calendar(int(value))) for value in seconds]
    assert got == expected
    assert CALENDAR_RANGE == (_seconds(1, 1, 1), _seconds(9999, 12, 31, 23, 59, 59))


def test_instants_outside_the_range_count_as_its_ends():
    seconds = tf.constant([CALENDAR_RANGE[0] - 1, -(2 ** 62), MISSING_INT, CALENDAR_RANGE[1] + 1, 2 ** 62,
                           2 ** 63 - 1], tf.int64)
    parts = calendar_parts(seconds)
    got = np.stack([parts[name].numpy() for name in PARTS], axis=1).tolist()
    low, high = list(_python_calendar(CALENDAR_RANGE[0])), list(_python_calendar(CALENDAR_RANGE[1]))
    assert got == [low, low, low, high, high, high]
    # A sample the model is fitted to holds none: fitting names the column rather than read them as the ends.
    with pytest.raises(ValueError, match=r"born\.calendar: 1 date\(s\) outside 0001-01-01 to 9999-12-31 UTC"):
        CalendarFeatures.fitted(np.array([0, MISSING_INT, 1_700_000_000_000], np.int64), name="born.calendar")


class _Calendar(tf.Module):
    """calendar_parts as a SavedModel's serving signature: int64 seconds [batch] -> each part [batch]."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="seconds")])
    def parts(self, seconds):
        return {name: tensor for name, tensor in calendar_parts(seconds).items() if name in PARTS}


def test_the_device_model_computes_the_same_calendar_from_year_1_to_9999_with_builtins_only(tmp_path):
    module = _Calendar()
    tf.saved_model.save(module, str(tmp_path / "calendar"), signatures={contract.SERVING_SIGNATURE: module.parts})
    flatbuffer = tflite.convert(str(tmp_path / "calendar"), "float32")  # TFLITE_BUILTINS only, or it raises
    assert tflite.non_builtin_ops(flatbuffer) == []
    assert {"GREATER_EQUAL", "SELECT_V2", "FLOOR_DIV", "FLOOR_MOD"} <= set(tflite.operators(flatbuffer))
    rng = np.random.default_rng(11)
    seconds = np.concatenate([rng.integers(*CALENDAR_RANGE, 3000, endpoint=True), EDGES]).astype(np.int64)
    expected = [list(_python_calendar(int(value))) for value in seconds]
    runner = tf.lite.Interpreter(model_content=flatbuffer).get_signature_runner(contract.SERVING_SIGNATURE)
    device = runner(seconds=seconds)
    assert np.stack([device[name] for name in PARTS], axis=1).tolist() == expected
    served = tf.saved_model.load(str(tmp_path / "calendar")).signatures[contract.SERVING_SIGNATURE]
    server = served(seconds=tf.constant(seconds))
    assert np.stack([server[name].numpy() for name in PARTS], axis=1).tolist() == expected


def test_calendar_features_are_cycles_a_standardized_year_and_trend_and_zero_when_missing(tmp_path):
    rng = np.random.default_rng(3)
    sample = rng.integers(_seconds(2015, 1, 1), _seconds(2025, 1, 1), 500).astype(np.int64)
    layer = CalendarFeatures.fitted(np.append(sample, [MISSING_INT] * 50), name="sold_at.calendar")
    features = layer(tf.constant(sample)).numpy()
    assert features.shape == (500, len(CalendarFeatures.FEATURES)) and features.dtype == np.float32
    columns = dict(zip(CalendarFeatures.FEATURES, features.T))
    assert not columns["missing"].any()
    for name in ("year", "trend"):  # fitted on the present values only
        assert abs(columns[name].mean()) < 0.02 and abs(columns[name].std() - 1) < 0.02, name
    months = np.array([_python_calendar(int(s))[1] for s in sample])
    np.testing.assert_allclose(columns["month_sin"], np.sin(2 * np.pi * (months - 1) / 12), atol=1e-5)
    np.testing.assert_allclose(columns["month_cos"], np.cos(2 * np.pi * (months - 1) / 12), atol=1e-5)
    missing = layer(tf.constant([MISSING_INT], tf.int64)).numpy()[0]
    assert missing[0] == 1 and not missing[1:].any()
    # Saved and loaded with the preprocessing.
    inputs = keras.Input(shape=(), dtype="int64", name="sold_at")
    keras.Model(inputs, layer(inputs)).save(tmp_path / "calendar.keras")
    loaded = keras.saving.load_model(tmp_path / "calendar.keras")
    np.testing.assert_array_equal(loaded(tf.constant(sample)).numpy(), features)


def test_birth_dates_and_long_contracts_keep_their_own_year_and_trend():
    dates = [(1905, 6, 30), (1920, 1, 1), (1924, 12, 31), (1926, 3, 4), (1960, 5, 1), (2068, 6, 1), (2080, 7, 1),
             (2099, 12, 31)]
    seconds = np.array([_seconds(*date) for date in dates], np.int64)
    # A layer as earlier code saved it (the same config keys): it loads, and reads every date as its own.
    layer = CalendarFeatures.from_config({"name": "born.calendar", "trainable": True, "dtype": "float32",
                                          "year": [1990, 0.25, 0.05], "trend": [-3650, 0.5, 0.04]})
    columns = dict(zip(CalendarFeatures.FEATURES, layer(tf.constant(seconds)).numpy().T))
    years = np.array([date[0] for date in dates], np.float64)
    np.testing.assert_allclose(columns["year"], (years - 1990 - 0.25) * 0.05, atol=1e-6)
    days = (seconds - 946_684_800) // 86_400
    np.testing.assert_allclose(columns["trend"], ((days + 3650) / 365.25 - 0.5) * 0.04, atol=1e-5)
    assert len(set(columns["year"].tolist())) == len(dates) and len(set(columns["trend"].tolist())) == len(dates)


def _schema(path, features: dict[str, str]) -> str:
    path.write_text("".join(f'feature {{ name: "{name}" type: {kind} }}\n' for name, kind in features.items()))
    return str(path)


def _model(tmp_path, features: dict[str, str], dates=(), task="binary") -> tabular.SchemaModel:
    schema = _schema(tmp_path / "schema.pbtxt", {**features, "label": "INT"})
    return tabular.configure(schema, TaskConfig(type=task, label="label", classes=["0", "1"], dates=list(dates)))


def _sample(model: tabular.SchemaModel, rows: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random raw features for the model's inputs (some missing), and a label."""
    rng = np.random.default_rng(seed)
    sample = {}
    for name, spec in model.INPUTS.items():
        if name in model.dates:
            values = rng.integers(_seconds(1990, 1, 1), _seconds(2030, 1, 1), rows)
        elif spec.dtype == tf.float32:
            values = rng.normal(10, 3, rows).astype(np.float32)
        elif spec.dtype == tf.int64:
            values = rng.integers(0, 5, rows)
        else:
            values = rng.choice(np.array([b"cash", b"card", b"", b"dispute"], dtype=object), rows)
        if spec.dtype != tf.string:
            values = np.where(rng.random(rows) < 0.1, spec.default_value, values).astype(values.dtype)
        sample[name] = values
    sample["label"] = rng.integers(0, 2, rows)
    return sample


def test_a_date_must_be_an_int_feature_of_the_schema(tmp_path):
    features = {"fare": "FLOAT", "sold_at": "INT", "company": "BYTES"}
    for date in ("fare", "company", "sold at", "label"):
        with pytest.raises(TaskError, match=f"task.dates: '{date}'"):
            _model(tmp_path, features, dates=[date])
    assert _model(tmp_path, features, dates=["sold_at"]).dates == ("sold_at",)


@pytest.fixture(scope="module")
def device_model(tmp_path_factory):
    """A binary model on a date, a float and a string (untrained: conversion and agreement need no training),
    its device SavedModel, and raw rows to score (dates and fares missing, fares infinite among them)."""
    root = tmp_path_factory.mktemp("tabular-device")
    model_module = _model(root, {"sold_at": "INT", "fare": "FLOAT", "company": "BYTES"}, dates=["sold_at"])
    row = model_module.defaults
    sample = _sample(model_module, row.bins * row.rows_per_bin)  # enough rows for every bin of the fare
    sample["fare"][:20] = np.inf  # infinities in the training sample are not fitted on
    preprocessing = model_module.build_preprocessing(sample)
    model = model_module.build_model(preprocessing)
    saved = tflite.write_device_savedmodel(preprocessing, model, model_module.INPUTS, tasks.PROBABILITIES,
                                           str(root / "device"))
    rows = _sample(model_module, 60, seed=1)
    rows["sold_at"][:8] = [MISSING_INT, _seconds(2000, 2, 29, 13), CALENDAR_RANGE[0], CALENDAR_RANGE[1],
                           _seconds(1905, 6, 30), _seconds(1920, 1, 1), _seconds(2080, 7, 1), _seconds(2099, 12, 31)]
    rows["fare"][:6] = [np.inf, -np.inf, np.nan, 1e6, -1e6, 0]
    del rows["label"]
    return model_module, preprocessing, model, saved, sample, rows


def _keras_probabilities(preprocessing, model, rows) -> np.ndarray:
    return model(preprocessing({name: tf.constant(values) for name, values in rows.items()})).numpy().reshape(-1)


def _tflite_probabilities(flatbuffer: bytes, rows: dict[str, np.ndarray]) -> np.ndarray:
    runner = tf.lite.Interpreter(model_content=flatbuffer).get_signature_runner(contract.SERVING_SIGNATURE)
    columns = {internal: column for column, internal in internal_names(rows).items()}
    names = list(runner.get_input_details())
    count = len(next(iter(rows.values())))
    values = {name: rows[columns.get(name, name)] for name in names}
    return np.array([runner(**{name: column[i:i + 1].astype(np.bytes_) if column.dtype == object else column[i:i + 1]
                               for name, column in values.items()})[tasks.PROBABILITIES].reshape(-1)[0]
                     for i in range(count)])


def test_infinite_numbers_are_missing_in_keras(device_model):
    _, preprocessing, _, _, sample, rows = device_model
    fare = preprocessing.get_layer("fare.filled")
    assert np.isfinite(fare.fill) and abs(fare.fill - 10) < 0.5  # the sample's infinities were left out
    ready = preprocessing({name: tf.constant(values[:6]) for name, values in rows.items()})
    assert ready["fare.missing"].numpy().tolist() == [1, 1, 1, 0, 0, 0]
    scaled = ready["fare.scaled"].numpy()
    assert np.isfinite(scaled).all() and scaled[0] == scaled[1] == scaled[2]
    largest = np.finfo(np.float32).max  # the largest finite numbers are present
    indicator = preprocessing.get_layer("fare.missing")
    assert indicator(tf.constant([largest, -largest, np.inf, 0], tf.float32)).numpy().tolist() == [0, 0, 1, 0]


@pytest.mark.slow
def test_a_date_converts_with_builtins_and_scores_as_keras_in_float32_and_full_int8(device_model):
    model_module, preprocessing, model, saved, sample, rows = device_model
    expected = _keras_probabilities(preprocessing, model, rows)
    float32 = tflite.convert(saved, "float32")
    assert {"FLOOR_DIV", "FLOOR_MOD", "SIN", "COS"} <= set(tflite.operators(float32))
    got = _tflite_probabilities(float32, rows)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # float16 holds the calendar's constants (rows of ordinary fares: a fare of 1e6 is where half-precision
    # constants drift).
    ordinary = ~(np.abs(rows["fare"]) > 1e3) | ~np.isfinite(rows["fare"])
    half = _tflite_probabilities(tflite.convert(saved, "float16"), rows)
    assert np.abs(half - expected)[ordinary].max() < 1e-3
    # Calibration rows past the sample's infinite fares: an infinity in the representative data crashes the
    # quantizer (mlir_quantize segfaults in TF 2.16) although the model reads it as missing.
    representative = {name: values[20:120] for name, values in sample.items() if name in model_module.INPUTS}
    full_int8 = tflite.convert(saved, "full_int8", representative)
    assert tflite.quantized_preprocessing_ops(full_int8) == []
    quantized = _tflite_probabilities(full_int8, rows)
    assert np.isfinite(quantized).all() and np.abs(quantized - expected).mean() < 0.05


def test_infinite_numbers_score_as_missing_in_the_device_model(device_model):
    _, preprocessing, model, saved, _, rows = device_model
    # One row, its fare NaN, inf or -inf, everything else alike: the same score, in Keras and in TFLite.
    same = {name: np.repeat(values[6:7], 3) for name, values in rows.items()}
    same["fare"] = np.array([np.nan, np.inf, -np.inf], np.float32)
    keras_scores = _keras_probabilities(preprocessing, model, same)
    device_scores = _tflite_probabilities(tflite.convert(saved, "float32"), same)
    assert np.isfinite(device_scores).all() and len(set(device_scores.tolist())) == 1
    assert len(set(keras_scores.tolist())) == 1 and abs(device_scores[0] - keras_scores[0]) < 1e-5


AWKWARD = {"features": "FLOAT", "fare": "FLOAT", "fare_missing": "FLOAT", "fare.missing": "FLOAT", "Case": "BYTES",
           "case": "BYTES", "trip miles": "FLOAT", "prix (€)": "FLOAT", "Größe": "INT", "miles/gallon": "FLOAT",
           "tabular.features": "FLOAT", "sold at": "INT"}


# Keras warns, when it loads a model whose input dict's keys (the columns) differ from its inputs' names (their
# internal names), that they should match: they differ on purpose (components/core/feature_names.py).
@pytest.mark.filterwarnings("ignore:When providing `inputs` as a dict:UserWarning")
@pytest.mark.slow
def test_columns_of_any_name_build_train_and_survive_saving(tmp_path):
    model_module = _model(tmp_path, AWKWARD, dates=["sold at"])
    sample = _sample(model_module, 64)
    preprocessing = model_module.build_preprocessing(sample)
    internal = internal_names(model_module.INPUTS)
    assert list(preprocessing.input) == list(model_module.INPUTS)  # keyed by the columns' own names
    assert {tensor.name for tensor in preprocessing.inputs} == set(internal.values())
    assert "fare.missing" in preprocessing.output and "fare_missing.missing" in preprocessing.output
    assert f"{internal['sold at']}.calendar" in preprocessing.output
    model = model_module.build_model(preprocessing)
    # No layer is called like a column: only the raw inputs have a name without a '.'.
    assert {layer.name for layer in preprocessing.layers if "." not in layer.name} == set(internal.values())
    assert all("." in layer.name for layer in model.layers)
    model.compile(optimizer="adam", loss="binary_crossentropy")
    features = {name: tf.constant(sample[name]) for name in model_module.INPUTS}
    ready = preprocessing(features)
    history = model.fit(ready, sample["label"].astype(np.float32), batch_size=16, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    preprocessing.save(tmp_path / "preprocessing.keras")
    model.save(tmp_path / "model.keras")
    loaded_preprocessing = keras.saving.load_model(tmp_path / "preprocessing.keras")
    loaded_model = keras.saving.load_model(tmp_path / "model.keras")
    loaded_ready = loaded_preprocessing(features)
    assert set(loaded_ready) == set(ready)
    for name, tensor in ready.items():
        np.testing.assert_array_equal(loaded_ready[name].numpy(), tensor.numpy(), err_msg=name)
    np.testing.assert_allclose(loaded_model(loaded_ready).numpy(), model(ready).numpy(), atol=1e-6)
    # The model built again on the loaded preprocessing (a warm start) has the trained model's weights' shapes.
    rebuilt = model_module.build_model(loaded_preprocessing)
    assert [w.shape for w in rebuilt.get_weights()] == [w.shape for w in model.get_weights()]


def test_calendar_codes_give_each_month_weekday_hour_and_hour_of_the_week_an_index_of_its_own():
    seconds = np.array([_seconds(2024, 1, 1, 0), _seconds(2024, 12, 29, 23), _seconds(1905, 6, 15, 13),
                        MISSING_INT], np.int64)
    python = [datetime.datetime.fromtimestamp(int(value), datetime.timezone.utc) for value in seconds[:3]]
    expected = {"month": [d.month for d in python], "weekday": [d.weekday() + 1 for d in python],
                "hour": [d.hour + 1 for d in python], "hour_of_week": [d.hour * 7 + d.weekday() + 1 for d in python]}
    for part, codes in expected.items():
        layer = CalendarCode(part, name=f"sold.{part}")
        got = layer(tf.constant(seconds)).numpy().tolist()
        assert got == [*codes, 0] and max(got) < layer.vocabulary_size()  # 0: a missing date
    # a date-time gets all four, a date (every time midnight) its month and weekday only
    assert tabular.date_codes(seconds) == ("month", "weekday", "hour", "hour_of_week")
    assert tabular.date_codes(np.append(seconds[:3] - seconds[:3] % 86_400, MISSING_INT)) == ("month", "weekday")


def test_calendar_codes_convert_with_builtins_only(tmp_path):
    class Codes(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([1], tf.int64, name="seconds")])
        def serve(self, seconds):
            return {part: CalendarCode(part)(seconds) for part in CalendarCode.PARTS}

    module = Codes()
    tf.saved_model.save(module, str(tmp_path / "codes"), signatures={"serving_default": module.serve})
    flatbuffer = tflite.convert(str(tmp_path / "codes"), "float32")
    assert tflite.non_builtin_ops(flatbuffer) == []
    runner = tf.lite.Interpreter(model_content=flatbuffer).get_signature_runner("serving_default")
    value = np.array([_seconds(1905, 6, 15, 13)], np.int64)
    got = runner(seconds=value)
    assert {part: int(got[part][0]) for part in CalendarCode.PARTS} == {
        part: int(CalendarCode(part)(tf.constant(value)).numpy()[0]) for part in CalendarCode.PARTS}
