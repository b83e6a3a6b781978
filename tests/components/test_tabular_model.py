"""The schema-driven model's number encodings, packed ensemble and regression output (models/layers.py,
models/packed.py, models/tabular.py): what each computes, that the device model converts with TFLite builtins
only and stays within the export ladder's tolerances in int8, that it trains under a mixed precision policy,
and that a warm start gives back the served model's predictions."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from components.core import contract, tasks

from components.core.feature_names import internal_names
from components.core.packing import PackedModel, served
from components.core.records import model_ready_dir
from components.model_export import tflite
from components.model_export.variants import OUTPUT_TOLERANCE
from components.settings import TaskConfig
from components.trainer.export import build_float32, build_model
from components.trainer.warm_start import apply_warm_start, load_warm_start
from models import tabular
from models.defaults import defaults_for
from models.packed import PackedDense, PackedEmbedding, members_count
from models.layers import SMOOTH_CLIP, PiecewiseLinear, RobustScale

FEATURES = {"distance": "FLOAT", "minutes": "INT", "company": "BYTES", "store": "INT"}


def _module(tmp_path, task: str, transform: str = "none", features: dict[str, str] = FEATURES) -> tabular.SchemaModel:
    label_type = "FLOAT" if task == "regression" else "INT"
    (tmp_path / "schema.pbtxt").write_text("".join(f'feature {{ name: "{name}" type: {kind} }}\n' for name, kind in
                                                   {**features, "label": label_type}.items()))
    classes = {"binary": ["0", "1"], "multiclass": ["0", "1", "2"], "regression": []}[task]
    return tabular.configure(str(tmp_path / "schema.pbtxt"),
                             TaskConfig(type=task, label="label", classes=classes, label_transform=transform))


def _table(rows: int, task: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Raw features (a long-tailed distance, some missing; minutes; a company; a store number, a code of 60
    values each with an effect of its own, neighbouring numbers' effects unalike) and a label that depends on
    them: a fare-like price (regression), or its classes."""
    rng = np.random.default_rng(seed)
    distance = rng.lognormal(1.0, 0.8, rows).astype(np.float32)
    minutes = rng.integers(1, 120, rows)
    company = rng.choice(np.array([b"a", b"b", b"c"], dtype=object), rows)
    store = rng.integers(1000, 1060, rows)
    # the same stores in every sample: an even number lowers the price, an odd one raises it, each by its own amount
    store_effect = np.where(store % 2, 4.0, -4.0) * np.random.default_rng(99).uniform(0.5, 1.5, 60)[store - 1000]
    price = (3 + 2.5 * distance + 0.1 * minutes + np.where(company == b"a", 4.0, 0.0) + store_effect
             + rng.exponential(1.0, rows))
    distance[rng.random(rows) < 0.05] = np.nan
    label = {"regression": price.astype(np.float32), "binary": (price > np.median(price)).astype(np.int64),
             "multiclass": np.digitize(price, np.quantile(price, [0.5, 0.8])).astype(np.int64)}[task]
    return {"distance": distance, "minutes": minutes, "company": company, "store": store, "label": label}


def _features(table: dict[str, np.ndarray], module) -> dict[str, tf.Tensor]:
    return {name: tf.constant(table[name]) for name in module.INPUTS}


def _label(table, module) -> np.ndarray:
    return module.make_label({"label": tf.constant(table["label"])}).numpy()


def _metadata(flatbuffer: bytes) -> dict:
    """A .tflite file's metadata: name -> its bytes (the conversion options decoded, less the TF version)."""
    from tensorflow.lite.python import conversion_metadata_schema_py_generated as conversion
    from tensorflow.lite.tools import flatbuffer_utils
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(flatbuffer))
    entries = {}
    for entry in model.metadata:
        data = bytes(model.buffers[entry.buffer].data)
        if entry.name == b"CONVERSION_METADATA":
            options = conversion.ConversionMetadata.GetRootAs(data, 0).Options()
            data = (tuple(options.ModelOptimizationModesAsNumpy()) if options.ModelOptimizationModesLength() else (),
                    options.AllowCustomOps(), options.EnableSelectTfOps())
        entries[entry.name.decode()] = data
    return entries


def test_robust_scale_keeps_the_order_bounds_outliers_and_fits_quantile_edges():
    values = np.random.default_rng(1).lognormal(2.0, 1.0, 5000)
    layer = RobustScale.fitted(values, 8, name="fare.scaled")
    scaled = layer(tf.constant(np.sort(values), tf.float32)).numpy()
    assert np.all(np.diff(scaled) >= 0) and np.abs(scaled).max() < SMOOTH_CLIP
    assert abs(float(layer(tf.constant([np.median(values)], tf.float32))[0])) < 0.01  # the median is the middle
    assert float(layer(tf.constant([1e30], tf.float32))[0]) == pytest.approx(SMOOTH_CLIP, rel=1e-3)
    assert len(layer.edges) == 9 and layer.edges == sorted(set(layer.edges))
    assert layer.edges[0] == pytest.approx(scaled[0], abs=1e-4) and layer.edges[-1] == pytest.approx(scaled[-1], abs=1e-4)
    assert RobustScale.fitted(np.full(100, 5.0), 8, name="constant.scaled").edges == []  # nothing to cut


def test_quantile_edges_are_finer_in_a_smooth_numbers_tails_and_even_for_a_spike_or_few_values():
    rng = np.random.default_rng(2)
    smooth = rng.normal(50.0, 10.0, 4000)
    layer = RobustScale.fitted(smooth, 16, name="minutes.scaled", tails=True)
    share = np.mean(layer(tf.constant(smooth, tf.float32)).numpy()[:, None] < np.asarray(layer.edges)[None, :], axis=0)
    levels = (1.0 - np.cos(np.pi * np.arange(17) / 16)) / 2.0  # 0, 0.0096, 0.038, 0.084, ... 1
    np.testing.assert_allclose(share[1:-1], levels[1:-1], atol=0.002)  # the first bin holds 1% of rows, the middle 10%
    even = np.linspace(0.0, 1.0, 17)
    spike = np.where(rng.random(4000) < 0.7, 0.0, rng.lognormal(3.0, 1.0, 4000))  # mostly 0: a frequency
    few = rng.integers(0, 17, 4000).astype(float)  # a pixel's 0..16
    for values in (spike, few, smooth[:50]):  # the last: too few values for 16 bins' tails
        np.testing.assert_array_equal(RobustScale.edge_quantiles(values, 16, tails=True), even)
    np.testing.assert_array_equal(RobustScale.edge_quantiles(smooth, 16, tails=False), even)


@pytest.mark.parametrize("task, tails", [("binary", True), ("multiclass", True), ("regression", False)])
def test_a_classifiers_smooth_numbers_get_tail_bins_and_a_regressions_even_ones(tmp_path, task, tails):
    module = _module(tmp_path, task)
    table = _table(2000, task)
    edges = module.build_preprocessing(table).get_layer("distance.scaled").edges
    present = table["distance"][np.isfinite(table["distance"])].astype(np.float64)
    bins = min(module.defaults.bins, 2000 // module.defaults.rows_per_bin)
    assert edges == RobustScale.fitted(present, bins, name="distance", tails=tails).edges
    assert edges != RobustScale.fitted(present, bins, name="distance", tails=not tails).edges
    assert ("finer in a smooth number's tails" in module.DESCRIPTION) == tails


def test_the_model_is_built_from_its_tasks_row_of_the_defaults_table(tmp_path):
    """The widths, members, dropout and bins come from models/defaults.py, as the row reads when the model is
    configured: a row changed there (as bench/train_again.py --default changes one) builds another model."""
    from models import defaults

    table = _table(800, "regression")
    widths = {task: [layer.units for layer in build_model(module, module.build_preprocessing(table)).layers
                     if isinstance(layer, PackedDense) and layer.name != "tabular.output"]
              for task, module in ((task, _module(tmp_path, task)) for task in ("binary", "regression"))}
    assert widths == {"binary": [128, 128, 128], "regression": [256, 256, 256]}  # the first layer in two parts
    with defaults.overridden(hidden_units=(16, 12, 8), members=3, dropout=0.25, bins=4):
        module = _module(tmp_path, "regression")
    preprocessing = module.build_preprocessing(table)
    model = build_model(module, preprocessing, 2)
    dense = [layer for layer in model.layers if isinstance(layer, PackedDense)]
    assert [layer.units for layer in dense] == [16, 16, 12, 8, 1] and model.members == 4  # 2 copies of 2
    assert {layer.rate for layer in model.layers if isinstance(layer, keras.layers.Dropout)} == {0.25}
    assert len(preprocessing.get_layer("distance.scaled").edges) == 5
    assert "a packed ensemble of 3 networks of 16x12x8 hidden units" in module.DESCRIPTION
    assert _module(tmp_path, "regression").defaults.hidden_units == (256, 256)  # the table as it was


def test_piecewise_linear_encoding_reads_the_position_in_each_bin():
    layer = PiecewiseLinear([0.0, 1.0, 3.0, 4.0], name="x.piecewise")
    got = layer(tf.constant([-1.0, 0.0, 0.5, 1.0, 2.0, 3.5, 4.0, 6.0])).numpy()
    np.testing.assert_allclose(got, [[-1, 0, 0], [0, 0, 0], [0.5, 0, 0], [1, 0, 0], [1, 0.5, 0], [1, 1, 0.5],
                                     [1, 1, 1], [1, 1, 3]], atol=1e-6)
    with pytest.raises(ValueError, match="increasing edges"):
        PiecewiseLinear([0.0, 0.0], name="y.piecewise")


def test_the_packed_ensemble_serves_its_members_mean_and_trains_on_the_mean_of_their_losses(tmp_path):
    module = _module(tmp_path, "regression")
    table = _table(800, "regression")
    preprocessing = module.build_preprocessing(table)
    model = build_model(module, preprocessing)
    assert isinstance(model, PackedModel) and members_count(model) == model.members == module.defaults.members
    assert {layer.name for layer in preprocessing.layers if isinstance(layer, PiecewiseLinear)} == {
        "distance.piecewise", "minutes.piecewise", "store.piecewise"}
    ready = preprocessing(_features(table, module))
    members = model(ready).numpy()
    assert members.shape == (800, module.defaults.members, 1) and members.std(axis=1).mean() > 0  # they differ
    np.testing.assert_allclose(served(model)(ready).numpy(), members.mean(axis=1), rtol=1e-5, atol=1e-5)
    alone = module.build_model(preprocessing)  # the contract's one model: the same network, its mean served
    assert [w.shape for w in alone.get_weights()] == [w.shape for w in model.get_weights()]
    labels = _label(table, module)
    model.compile(optimizer="adam", loss=module.make_loss())
    loss = float(model.compute_loss(y=tf.constant(labels), y_pred=model(ready)))
    assert loss == pytest.approx(np.abs(members[..., 0] - labels[:, None]).mean(), rel=1e-4)
    assert loss > np.abs(members.mean(axis=1)[:, 0] - labels).mean()  # not the loss of the mean


def test_bagged_over_folds_every_member_has_weights_of_its_own_embeddings_included(tmp_path):
    """Copy g's members must not learn from fold g's records through a weight they share with another copy: the
    embeddings of categories and codes are per member, as every dense layer is."""
    module = _module(tmp_path, "binary")
    preprocessing = module.build_preprocessing(_table(800, "binary"))
    assert module.defaults.members == 8
    for copies, members in ((1, 8), (4, 8), (3, 9), (16, 16)):
        model = build_model(module, preprocessing, copies)
        assert (model.copies, model.members) == (copies, members) == (copies, module.defaults.members_for(copies))
        dense = [layer for layer in model.layers if isinstance(layer, PackedDense)]
        embeddings = [layer for layer in model.layers if isinstance(layer, PackedEmbedding)]
        assert embeddings and all(layer.embeddings.shape[1] == members * layer.width for layer in embeddings)
        assert all(weight.shape[0] == members for layer in dense for weight in layer.weights)
        owned = {id(weight) for layer in dense + embeddings for weight in layer.trainable_weights}
        assert {id(weight) for weight in model.trainable_weights} == owned  # no trainable weight is shared


def test_a_log_label_is_predicted_in_the_labels_units_within_the_training_range(tmp_path):
    module = _module(tmp_path, "regression", transform="log")
    table = _table(800, "regression")
    preprocessing = module.build_preprocessing(table)
    output = build_float32(module, preprocessing).get_layer("tabular.prediction")
    least, greatest = np.log1p(table["label"].min()), np.log1p(table["label"].max())
    assert [float(w) for w in (output.least, output.greatest)] == pytest.approx([least, greatest], rel=1e-5)
    extremes = output(tf.constant([[[-1e3]], [[0.0]], [[1e3]]])).numpy().reshape(-1)
    assert extremes == pytest.approx([table["label"].min(), np.expm1(float(output.offset)), table["label"].max()],
                                     rel=1e-4)
    loss = module.make_loss()
    assert float(loss(tf.constant([np.e - 1]), tf.constant([[np.e ** 2 - 1]]))) == pytest.approx(1.0, rel=1e-5)
    with pytest.raises(tabular.TaskError, match="label_transform"):
        _module(tmp_path, "binary", transform="log")


def _trained(tmp_path, task: str, transform: str = "none", epochs: int = 8, folds: int = 1, candidate: str = ""):
    """The schema-driven model (of `candidate`'s number encoding; "": the default) trained on _table's rows, its
    members dealt to `folds` copies as the Trainer bags it (trained with each row's fold), and served."""
    module = _module(tmp_path, task, transform)
    module = module.candidate(candidate) if candidate else module
    table = _table(1200, task)
    preprocessing = module.build_preprocessing(table)
    model = build_model(module, preprocessing, folds)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=module.make_loss())
    fold_ids = np.arange(1200, dtype=np.float32) % folds if folds > 1 else None
    model.fit(preprocessing(_features(table, module)), _label(table, module), sample_weight=fold_ids, batch_size=64,
              epochs=epochs, verbose=0)
    return module, table, preprocessing, served(model)


def _device_outputs(flatbuffer: bytes, rows: dict[str, np.ndarray], key: str) -> np.ndarray:
    runner = tf.lite.Interpreter(model_content=flatbuffer).get_signature_runner(contract.SERVING_SIGNATURE)
    internal = internal_names(rows)
    return np.concatenate([runner(**{internal[name]: values[i:i + 1].astype(np.bytes_) if values.dtype == object
                                     else values[i:i + 1] for name, values in rows.items()})[key]
                           for i in range(len(next(iter(rows.values()))))])


def _converter_full_int8(saved: str, representative: dict[str, np.ndarray]) -> bytes:
    """TFLite's converter calibrating the device SavedModel itself (its own full-integer path, stopped after
    calibration), then quantized with the preprocessing and output layer kept in float as ModelExport keeps them."""
    from tensorflow.lite.python import convert as lite_convert
    internal = internal_names(representative)
    converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=[contract.SERVING_SIGNATURE])
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8, tf.lite.OpsSet.TFLITE_BUILTINS]
    converter.representative_dataset = lambda: (
        {internal[name]: np.array([values[i]], dtype=np.bytes_) if values.dtype == object else values[i:i + 1]
         for name, values in representative.items()} for i in range(len(next(iter(representative.values())))))
    converter._experimental_calibrate_only = True  # pylint: disable=protected-access
    calibrated = converter.convert()
    return lite_convert.mlir_quantize(calibrated, input_data_type=tf.float32, output_data_type=tf.float32,
                                      denylisted_nodes=tflite.preprocessing_tensor_names(calibrated)
                                      + tflite.output_layer_tensor_names(calibrated))


@pytest.mark.parametrize("task, transform, folds, candidate", [
    ("binary", "none", 1, ""), ("multiclass", "none", 1, ""), ("regression", "none", 1, ""),
    ("regression", "log", 1, ""), ("binary", "none", 4, ""), ("multiclass", "none", 3, ""),
    ("regression", "log", 4, ""), ("binary", "none", 4, "48 bins"), ("regression", "log", 4, "48 bins")])
@pytest.mark.slow
def test_the_device_model_converts_with_builtins_and_int8_stays_within_the_ladders_tolerance(tmp_path, task, transform,
                                                                                           folds, candidate):
    """The schema-driven model alone, and bagged over folds as the Trainer serves it; in the default number
    encoding, and in the finer one train.search may choose: one packed network, one subgraph."""
    variants = ("dynamic_int8", "full_int8")
    module, table, preprocessing, model = _trained(tmp_path, task, transform, folds=folds, candidate=candidate)
    bins = len(preprocessing.get_layer("distance.scaled").edges) - 1
    assert bins == (module.defaults.fine_bins if candidate else module.defaults.bins)  # 1,200 rows: each one's most
    # the store number is read as a number and as a code; minutes, a smooth number, as a number alone
    assert {"store.scaled", "store.code", "minutes.scaled"} <= set(preprocessing.output)
    assert "minutes.code" not in preprocessing.output
    assert "codes (here: store)" in module.DESCRIPTION  # what the training report says the model is
    assert members_count(model) == module.defaults.members_for(folds)  # one packed network of every copy's members
    key = tasks.task_named(task).prediction_key
    saved = tflite.write_device_savedmodel(preprocessing, model, module.INPUTS, key, str(tmp_path / "device"))
    rows = {name: values[:150] for name, values in _table(150, task, seed=5).items() if name in module.INPUTS}
    expected = model(preprocessing(_features(rows, module))).numpy()
    # The export ladder's yardstick: output differences relative to the outputs' spread (regression), or
    # in probability (classification).
    spread = np.abs(expected - expected.mean()).mean() if task == "regression" else 1.0
    float32 = tflite.convert(saved, "float32")
    operators = set(tflite.operators(float32))
    assert {"MUL", "MINIMUM", "MAXIMUM", "RSQRT", "BATCH_MATMUL"} <= operators and not tflite.non_builtin_ops(float32)
    assert tflite.subgraph_count(float32) == 1
    np.testing.assert_allclose(_device_outputs(float32, rows, key), expected, rtol=1e-4, atol=1e-4)
    for variant in variants:
        representative = {name: values[:200] for name, values in table.items() if name in module.INPUTS}
        # as ModelExport converts: a regression's output layer stays float32 in full int8
        converted = tflite.convert(saved, variant, representative, float_output_layer=task == "regression")
        got = _device_outputs(converted, rows, key)
        assert np.isfinite(got).all()
        assert np.abs(got - expected).mean() / spread <= OUTPUT_TOLERANCE[variant], variant


@pytest.mark.slow
def test_float16_and_full_int8_read_numbers_beyond_float16s_range_and_keep_the_output_layer_float(tmp_path):
    """Bagged over 3 folds, a number of about 1.7e9 (a date's seconds since 1970) that float16 cannot hold, and a
    price label: the float16 variant stores the core's weights in float16 but the preprocessing's constants in
    float32, so it predicts as the model does; full int8 keeps the members' output layer in float32, and the
    core's own scales for the preprocessing's outputs count as the core's inputs, not as quantized
    preprocessing."""
    module = _module(tmp_path, "regression", "log",
                     features={"started": "FLOAT", "distance": "FLOAT", "company": "BYTES"})

    def table(rows: int, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        started = rng.uniform(1.6e9, 1.7e9, rows).astype(np.float32)
        distance = rng.lognormal(1.0, 0.8, rows).astype(np.float32)
        company = rng.choice(np.array([b"a", b"b", b"c"], dtype=object), rows)
        price = (3 + 2.5 * distance + 20 * (started - 1.6e9) / 1e8 + np.where(company == b"a", 4.0, 0.0)
                 + rng.exponential(1.0, rows))
        return {"started": started, "distance": distance, "company": company, "label": price.astype(np.float32)}

    folds, train = 3, table(1200, 0)
    preprocessing = module.build_preprocessing(train)
    packed = build_model(module, preprocessing, folds)
    packed.compile(optimizer=keras.optimizers.Adam(0.01), loss=module.make_loss())
    packed.fit(preprocessing(_features(train, module)), _label(train, module), batch_size=64, epochs=8, verbose=0,
               sample_weight=np.arange(1200, dtype=np.float32) % folds)
    model = served(packed)
    saved = tflite.write_device_savedmodel(preprocessing, model, module.INPUTS, "prediction", str(tmp_path / "device"))
    rows = {name: values[:100] for name, values in table(100, 5).items() if name in module.INPUTS}
    expected = model(preprocessing(_features(rows, module))).numpy()
    spread = np.abs(expected - expected.mean()).mean()
    assert spread > 1.0

    float32, float16 = tflite.convert(saved, "float32"), tflite.convert(saved, "float16", float_output_layer=True)
    assert np.abs(_device_outputs(float16, rows, "prediction") - expected).mean() / spread <= OUTPUT_TOLERANCE["float16"]
    sizes32, sizes16 = tflite.weight_bytes(float32), tflite.weight_bytes(float16)
    assert sizes16["preprocessing_bytes"] == sizes32["preprocessing_bytes"] > 0
    assert sizes16["weight_bytes"] < 0.55 * sizes32["weight_bytes"]
    assert not tflite.non_builtin_ops(float16)
    # handed the float32 variant converted already, float16 gives the same model
    assert tflite.convert(saved, "float16", float_output_layer=True, float32_flatbuffer=float32) == float16
    # with the metadata the converter's own float16 quantization writes (not run for the variant)
    converter = tf.lite.TFLiteConverter.from_saved_model(saved, signature_keys=["serving_default"])
    converter.optimizations, converter.target_spec.supported_types = [tf.lite.Optimize.DEFAULT], [tf.float16]
    assert _metadata(float16) == _metadata(converter.convert()) != _metadata(float32)

    representative = {name: values[:200] for name, values in train.items() if name in module.INPUTS}
    full_int8 = tflite.convert(saved, "full_int8", representative, float_output_layer=True)
    from tensorflow.lite.python.schema_py_generated import TensorType
    from tensorflow.lite.tools import flatbuffer_utils
    graph = flatbuffer_utils.convert_bytearray_to_object(bytearray(full_int8)).subgraphs[0]
    types = {tensor.name.decode(): tensor.type for tensor in graph.tensors}
    outputs = tflite.output_layer_tensor_names(full_int8)
    assert any("tabular.prediction" in name for name in outputs) and any("tabular.output" in name for name in outputs)
    assert all(types[name] == TensorType.FLOAT32 for name in outputs)
    assert tflite.quantized_preprocessing_ops(full_int8) == []
    got = _device_outputs(full_int8, rows, "prediction")
    assert np.abs(got - expected).mean() / spread <= OUTPUT_TOLERANCE["full_int8"]

    # full int8 calibrates the float32 file rather than converting again: the file is the one TFLite's converter
    # writes with its own full-integer calibration, quantized with the same ops kept in float
    assert full_int8 == _converter_full_int8(saved, representative)
    # ModelExport loads the SavedModel into one converter for all the variants: the files are those of a
    # converter per variant, whichever variant came before, and the float32 variant is converted once
    shared = tflite.DeviceConverter(saved)
    conversions, convert_once = [], shared._converted
    shared._converted = lambda variant: conversions.append(variant) or convert_once(variant)
    assert shared.convert("full_int8", representative, float_output_layer=True) == full_int8
    assert shared.convert("float16", float_output_layer=True) == float16
    assert shared.convert("float32") == float32
    assert conversions == ["float32"]


@pytest.mark.parametrize("folds", [1, 4])
@pytest.mark.slow
def test_mixed_bfloat16_trains_the_packed_ensemble_with_float32_encodings_and_outputs(tmp_path, folds):
    module = _module(tmp_path, "binary")
    table = _table(600, "binary")
    preprocessing = module.build_preprocessing(table)
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = build_model(module, preprocessing, folds)
    finally:
        keras.config.set_dtype_policy("float32")
    assert model.get_layer("tabular.hidden_1.numbers").compute_dtype == "bfloat16"
    assert model.get_layer("tabular.hidden_2").compute_dtype == "bfloat16"
    assert preprocessing.get_layer("distance.piecewise").compute_dtype == "float32"
    assert model.get_layer("tabular.output").compute_dtype == "float32" and model.output.dtype == "float32"
    model.compile(optimizer="adam", loss=module.make_loss())
    fold_ids = np.arange(600, dtype=np.float32) % folds if folds > 1 else None
    history = model.fit(preprocessing(_features(table, module)), _label(table, module), sample_weight=fold_ids,
                        batch_size=64, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all() and history.history["loss"][-1] < history.history["loss"][0]


@pytest.mark.parametrize("folds", [1, 3])
@pytest.mark.slow
def test_a_warm_start_from_the_served_files_predicts_as_the_served_model(tmp_path, folds):
    (tmp_path / "served").mkdir()
    module, table, preprocessing, model = _trained(tmp_path / "served", "regression", "log", epochs=2, folds=folds)
    serving = tmp_path / "serving"
    folder = model_ready_dir(str(serving))
    tf.io.gfile.makedirs(folder)
    model.save(f"{folder}/{contract.MODEL_READY_FILE}")
    preprocessing.save(f"{folder}/{contract.PREPROCESSING_FILE}")
    (tmp_path / "next").mkdir()
    fresh = _module(tmp_path / "next", "regression", "log")  # a new run's module: no sample fitted
    other = load_warm_start(fresh, str(serving), enabled=True, folds=folds + 1)
    assert other.weights is None and f"dealt to {folds} fold(s), this training's to {folds + 1}" in other.reason
    warm = load_warm_start(fresh, str(serving), enabled=True, folds=folds)
    assert warm.weights is not None, warm.reason
    rebuilt = build_float32(fresh, warm.preprocessing, folds)
    apply_warm_start(rebuilt, warm)
    features = _features(table, module)
    np.testing.assert_allclose(served(rebuilt)(warm.preprocessing(features)).numpy(),
                               model(preprocessing(features)).numpy(), rtol=1e-5)


@pytest.mark.slow
def test_a_string_cell_prepare_data_reads_as_missing_is_served_as_missing(tmp_path):
    """A client sends a row as the CSV holds it ("None", "NA", "n/a"...): the SavedModel's preprocessing and the
    device model answer as for the missing value training saw (""), not as for an unknown category; a category
    the model never saw still gets the out-of-vocabulary index, and the export report's note says so."""
    module = _module(tmp_path, "binary")
    table = _table(1200, "binary")
    table["company"][np.random.default_rng(1).random(1200) < 0.3] = b""  # prepare-data wrote "" for NA cells
    preprocessing = module.build_preprocessing(table)
    model = module.build_model(preprocessing)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=module.make_loss())
    model.fit(preprocessing(_features(table, module)), _label(table, module), batch_size=64, epochs=3, verbose=0)
    lookup = preprocessing.get_layer(f"{internal_names(module.INPUTS)['company']}.lookup")
    sent = [b"", b"None", b"NA", b"n/a", b"N/A", b"?", b"#N/A", b"NaN", b"never-seen"]
    rows = {"distance": np.full(len(sent), 3.0, np.float32), "minutes": np.full(len(sent), 30),
            "company": np.array(sent, dtype=object), "store": np.full(len(sent), 1001)}
    indices = lookup(tf.constant(rows["company"].astype(np.bytes_))).numpy()
    assert indices[0] == lookup.vocabulary.index("") + 1 and (indices[1:-1] == indices[0]).all(), indices
    assert indices[-1] == 0  # not a missing token: out of vocabulary, as before
    key = tasks.task_named("binary").prediction_key
    served = model(preprocessing(_features(rows, module))).numpy()
    np.testing.assert_allclose(served[1:-1], np.repeat(served[:1], len(sent) - 2, axis=0), rtol=1e-6)
    saved = tflite.write_device_savedmodel(preprocessing, model, module.INPUTS, key, str(tmp_path / "device"))
    device = _device_outputs(tflite.convert(saved, "float32"), rows, key)
    np.testing.assert_allclose(device, served, rtol=1e-4, atol=1e-5)
    notes = {row["name"]: row.get("note", "") for row in tflite.input_conventions(module.INPUTS, module.INPUT_NOTES)}
    assert "none" in notes["company"] and "n/a" in notes["company"] and not notes["distance"]


@pytest.mark.parametrize("task", ["binary", "multiclass", "regression"])
def test_an_integer_is_read_as_a_code_when_its_values_predict_reliably_and_neighbours_not_alike(task):
    """A store number whose every value has its own effect is a code; minutes (the label rises with them), a
    number with no bearing on the label, and a code seen too rarely to tell are not."""
    rng = np.random.default_rng(1)
    rows = 2000
    store, minutes = rng.integers(0, 100, rows), rng.integers(1, 120, rows)
    score = rng.normal(0.0, 1.5, 100)[store] + 0.05 * minutes + rng.normal(0.0, 0.5, rows)
    label = {"regression": score, "binary": (score > np.median(score)).astype(np.int64),
             "multiclass": np.digitize(score, np.quantile(score, [0.3, 0.7]))}[task]
    profile = tasks.task_named(task).label_profile(label)
    assert profile.shape == (rows, 1 if task == "regression" else len(np.unique(label)))
    rule = defaults_for(task)
    assert tabular.reads_as_code(store, profile, rule)
    assert not tabular.reads_as_code(minutes, profile, rule)
    assert not tabular.reads_as_code(rng.integers(0, 100, rows), profile, rule)  # no bearing on the label
    assert not tabular.reads_as_code(rng.permutation(rows), profile, rule)  # every value once: nothing to tell
    missing = store.copy()
    missing[rng.random(rows) < 0.3] = tabular.MISSING_INT  # missing cells are left out, not a value
    assert tabular.reads_as_code(missing, profile, rule)


def test_the_description_names_the_columns_read_as_codes_and_keeps_a_modules_own_words(tmp_path):
    """A module of the user's own built on this one keeps its words around the description the report shows."""
    module = _module(tmp_path, "binary")
    module.DESCRIPTION = "mine: " + module.DESCRIPTION
    module.build_preprocessing(_table(1200, "binary"))
    assert module.DESCRIPTION.startswith("mine: numbers: ") and "codes (here: store)" in module.DESCRIPTION
    finer = module.candidate(module.CANDIDATES[1])  # the number encoding train.search may choose
    assert finer.DESCRIPTION.startswith("mine: numbers: ") and "codes (here: store)" in finer.DESCRIPTION
    assert finer.DESCRIPTION != module.DESCRIPTION and module.DESCRIPTION.startswith("mine: ")


@pytest.mark.slow
def test_a_wide_tables_numbers_are_encoded_as_one_tensor_the_same_way_each_column_alone_is(tmp_path):
    """Past the defaults' wide_numbers numeric columns, the numbers go through a handful of layers as one tensor
    (the graph no longer grows with the columns), and each column's encoding is the one it would get alone: the
    same missing indicator, fill, robust scale and piecewise-linear bins. Past the defaults' shared_kernel_weights
    the members of one fold copy share the first layer's kernel over the numbers, each with its own input scales
    and bias, and no kernel is shared across copies. The device model converts with builtins and serves what the
    SavedModel serves, in float32 and in full int8 within the ladder's tolerance."""
    from models.layers import PiecewiseLinearColumns, RobustScaleColumns

    columns = defaults_for("binary").wide_numbers + 8
    rng = np.random.default_rng(3)
    table = {f"x{i}": rng.normal(i, 1 + i % 5, 800).astype(np.float32) for i in range(columns - 1)}
    table[f"x{columns - 1}"] = rng.integers(0, 10_000, 800)  # an integer column among them
    table["x0"][rng.random(800) < 0.2] = np.nan
    table["label"] = (table["x1"] + table["x2"] > 3).astype(np.int64)
    kinds = {name: "INT" if values.dtype.kind == "i" else "FLOAT" for name, values in table.items()}
    (tmp_path / "schema.pbtxt").write_text("".join(f'feature {{ name: "{name}" type: {kind} }}\n'
                                                   for name, kind in kinds.items()))
    def configured():
        return tabular.configure(str(tmp_path / "schema.pbtxt"), TaskConfig(type="binary", label="label",
                                                                         classes=["0", "1"]))

    module = configured()
    preprocessing = module.build_preprocessing(table)
    first = module.build_model(preprocessing).get_layer("tabular.hidden_1.numbers")
    assert not first.kernel_groups and first.kernel.shape[0] == module.defaults.members  # under the threshold
    features = int(preprocessing.output["tabular.numbers.piecewise"].shape[-1]) + 2 * columns
    width = module.defaults.hidden_units[0]
    from models import defaults
    with defaults.overridden(shared_kernel_weights=module.defaults.members * features * width - 1):
        module = configured()
    preprocessing = module.build_preprocessing(table)
    # a kernel per copy that its members share (one member per copy: a kernel each), the scales on the inputs
    for copies in (2, module.defaults.members):
        first = build_model(module, preprocessing, copies).get_layer("tabular.hidden_1.numbers")
        assert first.kernel_groups == copies and first.kernel.shape[0] == copies
    computing = [layer.name for layer in preprocessing.layers if not isinstance(layer, keras.layers.InputLayer)]
    assert len(computing) <= 5, computing
    scale = next(layer for layer in preprocessing.layers if isinstance(layer, RobustScaleColumns))
    piecewise = next(layer for layer in preprocessing.layers if isinstance(layer, PiecewiseLinearColumns))
    outputs = {name: tensor.numpy() for name, tensor in preprocessing(_features(table, module)).items()}
    bins = max(2, min(module.defaults.bins, 800 // module.defaults.rows_per_bin))
    for index in (0, 5, columns - 1):  # one with missing values, a plain one, the integer one
        values = table[f"x{index}"].astype(np.float64)
        alone = RobustScale.fitted(values[np.isfinite(values)], bins, name="alone", tails=True)  # a classifier
        assert (scale.center[index], scale.scale[index], scale.edges[index]) == (alone.center, alone.scale,
                                                                                 alone.edges)
        filled = np.where(np.isfinite(values), values, np.median(values[np.isfinite(values)])).astype(np.float32)
        expected = PiecewiseLinear(alone.edges)(alone(filled)).numpy()
        got = outputs["tabular.numbers.piecewise"].reshape(800, columns, piecewise.bins)[:, index]
        np.testing.assert_allclose(got[:, :expected.shape[1]], expected, rtol=1e-5, atol=1e-6)
        assert not got[:, expected.shape[1]:].any()
        np.testing.assert_array_equal(outputs["tabular.numbers.missing"][:, index], ~np.isfinite(values))
    model = module.build_model(preprocessing)
    first = model.get_layer("tabular.hidden_1.numbers")
    assert tuple(first.kernel.shape) == (1, features, width)  # no folds: one kernel for every member
    assert tuple(first.scale.shape) == (module.defaults.members, features)
    key = tasks.task_named("binary").prediction_key
    rows = {name: values[:20] for name, values in table.items() if name in module.INPUTS}
    representative = {name: values[:200] for name, values in table.items() if name in module.INPUTS}

    def trained(network, **fit):
        network.compile(optimizer=keras.optimizers.Adam(0.01), loss=module.make_loss())
        network.fit(preprocessing(_features(table, module)), _label(table, module), batch_size=64, epochs=2,
                    verbose=0, **fit)
        return network

    def device_model_serves_it(served_model, folder: str):
        saved = tflite.write_device_savedmodel(preprocessing, served_model, module.INPUTS, key, str(tmp_path / folder))
        flatbuffer = tflite.convert(saved, "float32")
        assert not any(op.startswith("Flex") for op in tflite.operators(flatbuffer))
        expected = served_model(preprocessing(_features(rows, module))).numpy()
        np.testing.assert_allclose(_device_outputs(flatbuffer, rows, key), expected, rtol=1e-4, atol=1e-5)
        full_int8 = tflite.convert(saved, "full_int8", representative)  # the members' scaling a MUL on int8 features
        assert np.abs(_device_outputs(full_int8, rows, key) - expected).mean() <= OUTPUT_TOLERANCE["full_int8"]

    device_model_serves_it(trained(model), "device")
    # bagged over as many folds as members: a kernel per member, its scales on the inputs, as the Trainer serves it
    copies = module.defaults.members
    folds = np.arange(800, dtype=np.float32) % copies
    bagged = trained(build_model(module, preprocessing, copies), sample_weight=folds)
    device_model_serves_it(served(bagged), "bagged")


def test_the_model_ready_tensors_follow_the_columns_order_whatever_their_kind(tmp_path):
    """The preprocessing's outputs, and so the model's inputs, come in the schema's column order, a number
    before a category when it comes first: the order the model's weights were trained against."""
    (tmp_path / "schema.pbtxt").write_text('feature { name: "distance" type: FLOAT }\n'
                                           'feature { name: "company" type: BYTES }\n'
                                           'feature { name: "label" type: INT }\n')
    module = tabular.configure(str(tmp_path / "schema.pbtxt"), TaskConfig(type="binary", label="label",
                                                                          classes=["0", "1"]))
    table = _table(400, "binary")
    preprocessing = module.build_preprocessing({name: table[name] for name in ("distance", "company", "label")})
    assert list(preprocessing.output) == ["distance.missing", "distance.scaled", "distance.piecewise",
                                          "company.lookup"]
