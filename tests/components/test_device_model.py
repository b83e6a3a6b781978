"""The device model: every TFLite variant takes raw features, carries the model's preprocessing, uses builtin
ops only and runs in LiteRT (`ai-edge-litert`, no Flex delegate) in a process without TensorFlow, scoring
what the SavedModel's serving_raw scores; absent features follow the documented convention."""
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import models.taxi as taxi
from models import layers
from components.core import contract, tasks
from components.model_export import tflite
from components.core.feature_names import derived_name, internal_names
from components.core.records import ExportReport
from components.model_export.executor import export_model, raw_features, render_markdown, scoring_sample
from components.core.contract import TFLITE_VARIANTS
from components.model_export.variants import OUTPUT_TOLERANCE
from components.core.model_module import raw_signature_arguments
from components.trainer.export import export_serving_model
from components.trainer.train import TrainingJob, train
from pipeline.config import load_config

pytestmark = pytest.mark.slow  # a model trained and converted per module: minutes, not in make test-fast

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def exported(taxi_span_root, tmp_path_factory):
    """A float32 taxi model trained briefly on shard 0 and put through ModelExport's export step (eval: shard 1).
    Output: (report, export folder, serving SavedModel folder, eval file)."""
    root = tmp_path_factory.mktemp("device-model")
    shards = sorted(tf.io.gfile.glob(os.path.join(taxi_span_root, "span-1", "*.gz")))
    settings = load_config(train={"batch_size": 64, "epochs": 3, "input_probe_steps": 0, "precision": "float32",
                                  "xla": "off"}).train
    serving = str(root / "model" / "Format-Serving")
    train(TrainingJob(settings=settings, train_files=[shards[0]], eval_files=[shards[1]], serving_model_dir=serving,
                      run_dir=str(root / "run"), checkpoint_dir=str(root / "checkpoints")))
    export = load_config(export={"latency_examples": 50}).export
    report = export_model(serving, taxi, [shards[0]], [shards[1]], str(root / "export"), export).to_json()
    return report, str(root / "export"), serving, shards[1]


def _serving_raw(serving_dir: str, features: dict[str, np.ndarray]) -> np.ndarray:
    signature = tf.saved_model.load(serving_dir).signatures[contract.RAW_SIGNATURE]
    outputs = signature(**{name: tf.constant(values) for name, values in features.items()})
    return outputs[tasks.PROBABILITIES].numpy().reshape(-1)


LITERT_ONLY = textwrap.dedent("""
    # Runs in a fresh process that never imports TensorFlow: only LiteRT (which has no Flex delegate) and NumPy.
    import json, sys
    import numpy as np
    from ai_edge_litert.interpreter import Interpreter
    features = dict(np.load(sys.argv[1]))
    result = {}
    for path in sys.argv[2:]:
        runner = Interpreter(model_path=path, num_threads=1).get_signature_runner("serving_default")
        inputs = runner.get_input_details()
        rows = len(features[next(iter(inputs))])
        probabilities = [float(runner(**{name: features[name][i:i + 1] for name in inputs})["probabilities"][0, 0])
                         for i in range(rows)]
        result[path] = {"inputs": {name: [d["dtype"].__name__, d["shape"].tolist()] for name, d in inputs.items()},
                        "probabilities": probabilities}
    result["tensorflow_imported"] = "tensorflow" in sys.modules
    print(json.dumps(result))
""")


def test_every_variant_takes_raw_features_and_runs_in_litert_without_tensorflow(exported, tmp_path):
    report, export_dir, serving, eval_file = exported
    assert set(report["variants"]) == set(TFLITE_VARIANTS) and not report["failed_variants"]
    raw = raw_features(taxi, [eval_file], 400)
    features = tmp_path / "raw.npz"  # strings as fixed-width bytes: what an app's byte strings are
    np.savez(features, **{name: values.astype(np.bytes_) if values.dtype == object else values
                          for name, values in raw.items()})
    paths = [os.path.join(export_dir, result["file"]) for result in report["variants"].values()]
    run = subprocess.run([sys.executable, "-c", LITERT_ONLY, str(features), *paths], capture_output=True, text=True,
                         cwd=PROJECT_ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    litert = json.loads(run.stdout.strip().splitlines()[-1])
    assert litert.pop("tensorflow_imported") is False
    expected = _serving_raw(serving, raw)
    dtypes = {tf.float32: "float32", tf.int64: "int64", tf.string: "bytes_"}
    for variant, path in zip(report["variants"], paths):
        # One input per raw feature, under its own name and dtype (strings as strings), one example per call.
        assert litert[path]["inputs"] == {name: [dtypes[spec.dtype], [1]] for name, spec in taxi.INPUTS.items()}
        difference = np.abs(np.array(litert[path]["probabilities"]) - expected)
        assert difference.mean() <= OUTPUT_TOLERANCE[variant], variant
        if variant == "float32":
            assert difference.max() < 1e-5  # the same computation: log(1 + x) for log1p(x) is the only difference


def test_the_ladder_is_scored_in_litert_against_serving_raw_on_the_whole_eval_split(exported):
    report, export_dir, _, eval_file = exported
    records = sum(1 for _ in tf.data.TFRecordDataset(eval_file, compression_type="GZIP"))
    assert report["eval_examples"] == records
    assert report["inputs"] == "raw features" and report["compared_with"] == "serving_raw"
    assert report["runtime"].startswith("LiteRT (ai-edge-litert ")
    for variant, result in report["variants"].items():
        assert result["drop"] <= report["max_tflite_drop"], variant
        assert 0 <= result["mean_abs_diff"] <= result["max_abs_diff"] <= 1
        assert result["median_latency_us"] > 0 and result["size_bytes"] == os.path.getsize(
            os.path.join(export_dir, result["file"]))
    markdown = render_markdown(ExportReport.from_json(report))
    assert "TFLite inputs: raw features" in markdown and "| company | company | string | '' |" in markdown


def test_a_report_scored_on_the_whole_split_says_so_with_each_variants_paired_interval(exported):
    report, _, _, _ = exported
    assert report["scored_examples"] == report["eval_examples"] and report["confidence"] == 0.95
    for variant, result in report["variants"].items():
        low, high = result["drop_interval"]
        assert low <= result["drop"] <= high and abs((low + high) / 2 - result["drop"]) < 1e-9, variant
        low, high = result["mean_abs_diff_interval"]
        assert 0 <= low <= result["mean_abs_diff"] <= high, variant
    markdown = render_markdown(ExportReport.from_json(report))
    assert f"Scored on all {report['eval_examples']:,} eval examples." in markdown
    assert "| AUC drop [95% interval] |" in markdown


@pytest.fixture(scope="module")
def sampled(exported, taxi_span_root, tmp_path_factory):
    """The `exported` model put through the export step again with scoring_examples below the eval split's
    size. Output: the report."""
    _, _, serving, eval_file = exported
    shards = sorted(tf.io.gfile.glob(os.path.join(taxi_span_root, "span-1", "*.gz")))
    export = load_config(export={"latency_examples": 50, "scoring_examples": 400}).export
    return export_model(serving, taxi, [shards[0]], [eval_file], str(tmp_path_factory.mktemp("sampled")),
                        export, eval_records=None).to_json()


def test_with_scoring_examples_below_the_split_the_report_says_so_and_the_verdicts_hold(exported, sampled):
    whole, _, _, _ = exported
    assert sampled["eval_examples"] == whole["eval_examples"] == 1_500 and sampled["scored_examples"] == 400
    for variant, result in sampled["variants"].items():
        # The same verdicts as on the whole split, and the whole split's drop inside the sample's interval.
        assert (result["accepted"], result["recommended"]) == (whole["variants"][variant]["accepted"],
                                                               whole["variants"][variant]["recommended"]), variant
        assert result["drop_interval"][0] <= result["drop"] <= result["drop_interval"][1], variant
    assert sampled["recommended"] == whole["recommended"]
    # The SavedModel's reference metrics are its scores on the same 400 records.
    assert abs(sampled["savedmodel"]["auc"] - whole["savedmodel"]["auc"]) < 0.05
    markdown = render_markdown(ExportReport.from_json(sampled))
    assert ("Scored on 400 of 1,500 eval examples (evenly spread over the split in file order; "
            "export.scoring_examples).") in markdown


def test_the_scoring_sample_is_the_split_records_it_names_even_from_a_stale_count(exported):
    _, _, serving, eval_file = exported
    saved_model, task = tf.saved_model.load(serving), tasks.task_named(tasks.BINARY)
    whole = scoring_sample(saved_model, taxi, task, [eval_file], 0)
    assert whole["total"] == len(whole["labels"]) == 1_500
    for given in (None, 1_500, 1_234, 9_999):  # counted here, right, too few, too many: the same sample
        sample = scoring_sample(saved_model, taxi, task, [eval_file], 400, given)
        chosen = np.arange(400) * 1_500 // 400
        assert sample["total"] == 1_500 and len(sample["labels"]) == 400, given
        assert np.array_equal(sample["labels"], whole["labels"][chosen]), given
        assert np.allclose(sample["predictions"], whole["predictions"][chosen], atol=1e-6), given
        for name, values in sample["raw"].items():
            assert np.array_equal(values, whole["raw"][name][chosen]), (given, name)


def test_no_variant_holds_a_flex_or_custom_op_and_full_int8_quantizes_the_core_only(exported):
    report, export_dir, _, _ = exported
    for variant, result in report["variants"].items():
        flatbuffer = open(os.path.join(export_dir, result["file"]), "rb").read()
        ops = tflite.operators(flatbuffer)
        assert ops == result["ops"] and not [op for op in ops if op.startswith("custom:") or "Flex" in op], variant
        assert {"EQUAL", "BUCKETIZE", "LOG"} <= set(ops), variant  # the preprocessing is inside the file
        assert tflite.quantized_preprocessing_ops(flatbuffer) == [], variant
        # No op outputs a string: such a tensor is dynamically sized and would keep XNNPACK off the whole graph.
        interpreter = tf.lite.Interpreter(model_content=flatbuffer)
        dtypes = {detail["index"]: detail["dtype"] for detail in interpreter.get_tensor_details()}
        assert not [op["op_name"] for op in interpreter._get_ops_details()
                    if any(dtypes[i] == np.bytes_ for i in op["outputs"])], variant
    weights = {variant: result["weight_bytes"] for variant, result in report["variants"].items()}
    assert weights["float16"] <= 0.55 * weights["float32"]
    assert weights["dynamic_int8"] <= 0.4 * weights["float32"]
    assert weights["full_int8"] <= 0.3 * weights["float32"]
    assert "QUANTIZE" in report["variants"]["full_int8"]["ops"]  # float normalization in, int8 core after it
    # The preprocessing's constants (vocabularies, normalization) are not weights: none is quantized to int8.
    preprocessing = {variant: result["preprocessing_bytes"] for variant, result in report["variants"].items()}
    assert preprocessing["dynamic_int8"] == preprocessing["full_int8"] == preprocessing["float32"] > 0


def _example_features(serialized: bytes, conventions: list[dict]) -> dict[str, np.ndarray]:
    """A device caller's inputs for one tf.Example: each feature's value, or the documented missing value."""
    example = tf.train.Example.FromString(serialized)
    features = {}
    for item in conventions:
        feature = example.features.feature.get(item["name"])
        kind = feature.WhichOneof("kind") if feature is not None else None
        values = list(getattr(feature, kind).value) if kind else []
        value = values[0] if values else item["missing_value"]
        dtype = {"float32": np.float32, "int64": np.int64, "string": np.bytes_}[item["dtype"]]
        features[item["name"]] = np.array([value.encode() if isinstance(value, str) else value], dtype=dtype)
    return features


def test_absent_features_take_the_documented_value_and_score_as_in_the_savedmodel(exported):
    report, export_dir, serving, eval_file = exported
    conventions = report["device_inputs"]
    assert [item["name"] for item in conventions] == list(taxi.INPUTS)
    # The taxi's columns are valid names: each is passed under its own name, with no note.
    assert [item["device_name"] for item in conventions] == list(taxi.INPUTS)
    assert not [item for item in conventions if "note" in item]
    missing = {item["name"]: item["missing_value"] for item in conventions}
    assert missing["company"] == "" and missing["trip_start_hour"] == -1 and missing["fare"] == 0.0
    assert {item["dtype"] for item in conventions} == {"float32", "int64", "string"}
    # Records that lack features (about a third lack `company`), scored from the tf.Example with the feature
    # absent by the SavedModel, and by each device variant with the documented value passed in its place.
    records = [r.numpy() for r in tf.data.TFRecordDataset(eval_file, compression_type="GZIP")]
    present = [set(tf.train.Example.FromString(r).features.feature) for r in records]
    lacking = [r for r, names in zip(records, present) if "company" not in names][:60]
    lacking += [r for r, names in zip(records, present) if "dropoff_census_tract" not in names][:20]
    assert len(lacking) >= 60
    expected = tf.saved_model.load(serving).signatures[contract.SERVING_SIGNATURE](examples=tf.constant(lacking))[
        tasks.PROBABILITIES].numpy().reshape(-1)
    from ai_edge_litert.interpreter import Interpreter
    for variant, result in report["variants"].items():
        runner = Interpreter(model_path=os.path.join(export_dir, result["file"])).get_signature_runner()
        got = np.array([runner(**_example_features(r, conventions))["probabilities"].reshape(-1)[0] for r in lacking])
        assert np.abs(got - expected).mean() <= OUTPUT_TOLERANCE[variant], variant
        if variant == "float32":
            assert np.abs(got - expected).max() < 1e-5


def _last_preprocessing_tensor(interpreter, feature: str) -> int:
    """Index of the last tensor the preprocessing computes for `feature` in its exact type (float32 or an
    integer): the model-ready value the model core receives (full int8: the input of its QUANTIZE op)."""
    tensors = {detail["index"]: detail for detail in interpreter.get_tensor_details()}
    found = None
    for op in interpreter._get_ops_details():  # in execution order
        for index in op["outputs"]:
            detail = tensors[index]
            if (f"{tflite.PREPROCESSING_SCOPE}/" in detail["name"] and f"/{feature}_" in detail["name"]
                    and detail["dtype"] in (np.float32, np.int32, np.int64)):
                found = index
    assert found is not None, feature
    return found


def test_preprocessing_inside_every_variant_computes_exactly_the_savedmodels_preprocess(exported):
    """In each shipped file, the values the preprocessing hands to the model core are the SavedModel's
    `preprocess` outputs: the same indices and bins, the same normalized numbers (log(1 + x) for log1p(x)
    aside), full int8 and float16 included."""
    report, export_dir, serving, eval_file = exported
    raw = raw_features(taxi, [eval_file], 200)
    preprocess = tf.saved_model.load(serving).signatures[contract.PREPROCESS_SIGNATURE]
    expected = {name: tensor.numpy()
                for name, tensor in preprocess(**{name: tf.constant(values) for name, values in raw.items()}).items()}
    for variant, result in report["variants"].items():
        interpreter = tf.lite.Interpreter(model_path=os.path.join(export_dir, result["file"]),
                                          experimental_preserve_all_tensors=True)
        interpreter.allocate_tensors()
        runner = interpreter.get_signature_runner()
        inputs = {name: detail["index"] for name, detail in runner.get_input_details().items()}
        del runner
        last = {name: _last_preprocessing_tensor(interpreter, name) for name in expected}
        got = {name: [] for name in expected}
        for row in range(len(raw["fare"])):
            for name, index in inputs.items():
                interpreter.set_tensor(index, raw[name][row:row + 1])
            interpreter.invoke()
            for name, index in last.items():
                got[name].append(interpreter.get_tensor(index).reshape(-1)[0])
        for name, values in expected.items():
            if values.dtype.kind == "f":
                assert np.abs(np.array(got[name], np.float32) - values).max() < 1e-5, (variant, name)
            else:
                assert np.array_equal(np.array(got[name], np.int64), values.astype(np.int64)), (variant, name)


def test_a_preprocessing_layer_without_builtin_kernels_is_named_and_not_shipped(tmp_path):
    inputs = {"tract": keras.Input(shape=(), name="tract", dtype="int64")}
    hashed = keras.layers.Hashing(16, name="tract_hash")(inputs["tract"])
    preprocessing = keras.Model(inputs, {"tract": hashed})
    ready = {"tract": keras.Input(shape=(), name="tract", dtype="int64")}
    model = keras.Model(ready, keras.layers.Dense(1, activation="sigmoid")(
        keras.layers.Reshape((4,))(keras.layers.Embedding(16, 4)(ready["tract"]))))
    saved = tflite.write_device_savedmodel(preprocessing, model, {"tract": tf.io.FixedLenFeature([], tf.int64, -1)},
                                           tasks.PROBABILITIES, str(tmp_path / "device"))
    with pytest.raises(tflite.ConversionError, match="StringToHashBucketFast") as error:
        tflite.convert(saved, "float32")
    assert "device-safe" in str(error.value)


def test_vocabulary_gives_keras_lookup_indices_and_survives_saving(tmp_path):
    tracts = np.array([17031081500, 17031839100, -1, 17031081500, 17031320100, -1, 17031081500], np.int64)
    layer = layers.Vocabulary.adapted(tracts, 500, name="tract_lookup")
    assert layer.vocabulary == [17031081500, -1, 17031320100, 17031839100]  # by frequency, then value
    queries = np.array([17031081500, -1, 17031839100, 17031839101, 0], np.int64)
    lookup = keras.layers.IntegerLookup(vocabulary=layer.vocabulary)
    assert np.array_equal(layer(queries).numpy(), lookup(queries).numpy())
    payments = np.array([b"Cash", b"Credit Card", b"Cash", b""], dtype=object)
    strings = layers.Vocabulary.adapted(payments, 10, name="pay_lookup")
    assert strings.vocabulary == ["Cash", "", "Credit Card"]
    words = tf.constant(["Cash", "", "Credit Card", "Dispute"])
    string_lookup = keras.layers.StringLookup(vocabulary=strings.vocabulary)
    assert np.array_equal(strings(words).numpy(), string_lookup(words).numpy())
    inputs = keras.Input(shape=(), dtype="string", name="pay")
    saved = tmp_path / "vocabulary.keras"
    keras.Model(inputs, strings(inputs)).save(saved)
    assert np.array_equal(keras.saving.load_model(saved)(words).numpy(), strings(words).numpy())


def test_standardize_constants_are_exact_in_half_precision():
    layer = layers.Standardize.fitted(np.log1p(np.array([3.25, 6.05, 12.5, 40.0, 5.85])), name="fare_norm")
    for constant in (layer.mean, layer.scale):
        assert float(np.float32(np.float16(constant))) == float(np.float32(constant))
    values = layer(np.log1p(np.array([3.25, 6.05, 12.5, 40.0, 5.85], np.float32))).numpy()
    assert abs(values.mean()) < 0.01 and abs(values.std() - 1) < 0.01


@pytest.mark.parametrize("values", [np.array([1.4e9, 1.41e9, 1.43e9, 1.45e9]),  # overflows float16 (timestamps)
                                    np.array([41.88, 41.89, 41.90, 41.93])],  # rounding moves it 0.2 deviations
                         ids=["timestamp", "latitude"])
def test_standardize_keeps_float32_constants_where_half_precision_would_move_the_values(values):
    layer = layers.Standardize.fitted(values, name="norm")
    standardized = layer(values.astype(np.float32)).numpy()
    assert np.isfinite(standardized).all() and abs(standardized.mean()) < 0.01 and abs(standardized.std() - 1) < 0.01


# A table whose columns Keras and TensorFlow cannot name: a space, parentheses and `€`, and two columns that
# differ only in case (signature arguments are compared without regard to case).
AWKWARD_INPUTS = {"trip miles": tf.io.FixedLenFeature([], tf.float32, 0.0),
                  "Case": tf.io.FixedLenFeature([], tf.int64, -1),
                  "case": tf.io.FixedLenFeature([], tf.string, ""),
                  "prix (€)": tf.io.FixedLenFeature([], tf.float32, 0.0)}
AWKWARD_NAMES = internal_names(AWKWARD_INPUTS)
# Keras asks that a dict's keys be its inputs' names; here (as in the schema-driven model) they are not, by design.
KEYS_ARE_NOT_INPUT_NAMES = pytest.mark.filterwarnings("ignore:When providing `inputs` as a dict:UserWarning")


class Awkward:
    """A hand-built binary model module on AWKWARD_INPUTS, built as the schema-driven model builds its
    models: Keras inputs named by the columns' internal names, every dict keyed by the column names."""
    TASK = tasks.BINARY
    CLASSES = ("no", "yes")
    INPUTS = AWKWARD_INPUTS
    LABEL_INPUTS = {"label": tf.io.FixedLenFeature([], tf.int64, 0)}
    LABEL_KEY = "label"

    @staticmethod
    def make_label(features):
        return tf.cast(features["label"], tf.float32)

    @staticmethod
    def build_preprocessing(sample):
        dtypes = {tf.float32: "float32", tf.int64: "int64", tf.string: "string"}
        inputs = {column: keras.Input(shape=(), name=AWKWARD_NAMES[column], dtype=dtypes[feature.dtype])
                  for column, feature in AWKWARD_INPUTS.items()}
        outputs = {}
        for column in ("trip miles", "prix (€)"):
            outputs[column] = layers.Standardize.fitted(
                sample[column], name=derived_name(AWKWARD_NAMES[column], "norm"))(inputs[column])
        for column in ("Case", "case"):
            outputs[column] = layers.Vocabulary.adapted(
                sample[column], 10, name=derived_name(AWKWARD_NAMES[column], "lookup"))(inputs[column])
        return keras.Model(inputs, outputs, name="awkward_preprocessing")

    @staticmethod
    def build_model(preprocessing):
        inputs = {column: keras.Input(shape=(), name=AWKWARD_NAMES[column], dtype=tensor.dtype)
                  for column, tensor in preprocessing.output.items()}
        parts = [keras.layers.Reshape((1,))(inputs[column]) for column in ("trip miles", "prix (€)")]
        for column in ("Case", "case"):
            size = preprocessing.get_layer(derived_name(AWKWARD_NAMES[column], "lookup")).vocabulary_size()
            parts.append(layers.embed(inputs[column], size, 2, derived_name(AWKWARD_NAMES[column], "deep")))
        hidden = keras.layers.Dense(8, activation="relu")(keras.layers.Concatenate()(parts))
        return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid", dtype="float32")(hidden))


def _awkward_records(rows: int, seed: int) -> list[bytes]:
    """tf.Examples keyed by the column names; every fifth lacks "case", every seventh "prix (€)"."""
    rng = np.random.default_rng(seed)
    records = []
    for row in range(rows):
        miles, prix = float(rng.gamma(2.0, 3.0)), float(rng.normal(20, 5))
        case_int, case_text = int(rng.choice([1, 2, 3, 7])), str(rng.choice(["a", "b", "Größe", "miles/gallon"]))
        label = int(miles + (case_int == 2) * 4 + (case_text == "a") * 3 + rng.normal(0, 2) > 8)
        feature = {"trip miles": tf.train.Feature(float_list=tf.train.FloatList(value=[miles])),
                   "Case": tf.train.Feature(int64_list=tf.train.Int64List(value=[case_int])),
                   "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
        if row % 5:
            feature["case"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=[case_text.encode()]))
        if row % 7:
            feature["prix (€)"] = tf.train.Feature(float_list=tf.train.FloatList(value=[prix]))
        records.append(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
    return records


@pytest.fixture(scope="module")
def awkward_export(tmp_path_factory):
    """The Awkward module fitted and briefly trained on 300 records, exported as the Trainer exports
    (export_serving_model) and put through ModelExport (float32 and full int8). Output: (report, export
    folder, serving SavedModel folder, eval records)."""
    root = tmp_path_factory.mktemp("awkward")
    files = {}
    for split, (rows, seed) in {"train": (300, 0), "eval": (120, 1)}.items():
        files[split] = str(root / f"{split}.gz")
        with tf.io.TFRecordWriter(files[split], options="GZIP") as writer:
            for record in _awkward_records(rows, seed):
                writer.write(record)
    train_records = _awkward_records(300, 0)
    parsed = tf.io.parse_example(tf.constant(train_records), {**AWKWARD_INPUTS, **Awkward.LABEL_INPUTS})
    sample = {column: tensor.numpy() for column, tensor in parsed.items()}
    preprocessing = Awkward.build_preprocessing(sample)
    model = Awkward.build_model(preprocessing)
    model.compile(optimizer=keras.optimizers.Adam(0.05), loss="binary_crossentropy")
    model.fit(preprocessing({column: sample[column] for column in AWKWARD_INPUTS}),
              sample["label"].astype(np.float32), epochs=5, batch_size=32, verbose=0)
    serving = str(root / "model" / "Format-Serving")
    export_serving_model(Awkward, preprocessing, model, serving)
    settings = load_config(export={"latency_examples": 5, "representative_examples": 100,
                                   "tflite_variants": ["float32", "full_int8"]}).export
    report = export_model(serving, Awkward, [files["train"]], [files["eval"]], str(root / "export"), settings).to_json()
    return report, str(root / "export"), serving, _awkward_records(120, 1)


def test_awkward_names_need_internal_names():
    assert len(set(AWKWARD_NAMES.values())) == len({name.lower() for name in AWKWARD_NAMES.values()}) == 4
    assert not set(AWKWARD_NAMES) & set(AWKWARD_NAMES.values())  # no column keeps its own name here


@KEYS_ARE_NOT_INPUT_NAMES
def test_raw_signatures_take_internal_names_and_score_as_serving_default_on_user_named_examples(awkward_export):
    _, _, serving, records = awkward_export
    loaded = tf.saved_model.load(serving)
    for signature in (contract.RAW_SIGNATURE, contract.PREPROCESS_SIGNATURE):
        arguments = loaded.signatures[signature].structured_input_signature[1]
        assert set(arguments) == set(AWKWARD_NAMES.values()), signature
    raw = {column: tensor.numpy()
           for column, tensor in tf.io.parse_example(tf.constant(records), AWKWARD_INPUTS).items()}
    raw_outputs = loaded.signatures[contract.RAW_SIGNATURE](**raw_signature_arguments(
        AWKWARD_INPUTS, {column: tf.constant(values) for column, values in raw.items()}))
    examples_outputs = loaded.signatures[contract.SERVING_SIGNATURE](examples=tf.constant(records))
    assert set(raw_outputs) == set(examples_outputs)
    for key, values in raw_outputs.items():
        assert np.array_equal(values.numpy(), examples_outputs[key].numpy()), key
    probabilities = raw_outputs[tasks.PROBABILITIES].numpy().reshape(-1)
    assert 0.05 < probabilities.mean() < 0.95 and probabilities.std() > 0.01  # a model that tells examples apart
    # preprocess hands back the model-ready tensors keyed as the preprocessing keys them: by column name.
    ready = loaded.signatures[contract.PREPROCESS_SIGNATURE](**raw_signature_arguments(
        AWKWARD_INPUTS, {column: tf.constant(values) for column, values in raw.items()}))
    keras_dir = os.path.join(os.path.dirname(serving), contract.MODEL_READY_DIR)
    preprocessing = keras.saving.load_model(os.path.join(keras_dir, contract.PREPROCESSING_FILE))
    direct = preprocessing({column: tf.constant(values) for column, values in raw.items()})
    assert set(ready) == set(direct) == set(AWKWARD_INPUTS)
    for column, values in direct.items():  # each argument reached its own column ("Case" and "case" apart)
        assert np.array_equal(ready[column].numpy(), values.numpy()), column


@KEYS_ARE_NOT_INPUT_NAMES
def test_device_model_takes_internal_names_and_matches_serving_raw_on_user_named_features(awkward_export, tmp_path):
    _, _, serving, records = awkward_export
    raw = {column: tensor.numpy()
           for column, tensor in tf.io.parse_example(tf.constant(records), AWKWARD_INPUTS).items()}
    expected = tf.saved_model.load(serving).signatures[contract.RAW_SIGNATURE](**raw_signature_arguments(
        AWKWARD_INPUTS, {column: tf.constant(values) for column, values in raw.items()}))[
        tasks.PROBABILITIES].numpy().reshape(-1)
    keras_dir = os.path.join(os.path.dirname(serving), contract.MODEL_READY_DIR)
    preprocessing = keras.saving.load_model(os.path.join(keras_dir, contract.PREPROCESSING_FILE))
    model = keras.saving.load_model(os.path.join(keras_dir, contract.MODEL_READY_FILE))
    device = tflite.write_device_savedmodel(preprocessing, model, AWKWARD_INPUTS, tasks.PROBABILITIES,
                                            str(tmp_path / "device"))
    flatbuffer = tflite.convert(device, "float32")
    runner = tf.lite.Interpreter(model_content=flatbuffer).get_signature_runner(contract.SERVING_SIGNATURE)
    assert set(runner.get_input_details()) == set(AWKWARD_NAMES.values())
    assert tflite.device_input_names(AWKWARD_INPUTS) == AWKWARD_NAMES
    got = tflite.DeviceInterpreter(flatbuffer, tasks.PROBABILITIES, AWKWARD_INPUTS).predict(raw)
    assert np.abs(got - expected).max() < 1e-5
    with pytest.raises(ValueError, match="are not those of the columns"):
        tflite.DeviceInterpreter(flatbuffer, tasks.PROBABILITIES, ["trip miles", "case"])


class _XnnpackRefuses:
    """A real interpreter whose runs fail as LiteRT's do when XNNPACK cannot prepare a node."""

    def __init__(self, interpreter):
        self._interpreter = interpreter

    def __getattr__(self, name):
        return getattr(self._interpreter, name)

    def invoke(self):
        raise RuntimeError("failed to create XNNPACK runtimeNode number 93 (TfLiteXNNPackDelegate) failed to prepare.")


@KEYS_ARE_NOT_INPUT_NAMES
def test_the_device_interpreter_runs_a_model_xnnpack_refuses_with_the_builtin_kernels(awkward_export, monkeypatch):
    report, export_dir, serving, records = awkward_export
    raw = {column: tensor.numpy()
           for column, tensor in tf.io.parse_example(tf.constant(records), AWKWARD_INPUTS).items()}
    with open(os.path.join(export_dir, report["variants"]["float32"]["file"]), "rb") as handle:
        flatbuffer = handle.read()
    expected = tflite.DeviceInterpreter(flatbuffer, tasks.PROBABILITIES, AWKWARD_INPUTS).predict(raw)
    real = tflite._new_interpreter
    opened = []

    def refusing(flatbuffer, default_delegates=True):
        opened.append(default_delegates)
        interpreter = real(flatbuffer, default_delegates)
        return _XnnpackRefuses(interpreter) if default_delegates else interpreter

    monkeypatch.setattr(tflite, "_new_interpreter", refusing)
    device = tflite.DeviceInterpreter(flatbuffer, tasks.PROBABILITIES, AWKWARD_INPUTS)
    np.testing.assert_allclose(device.predict(raw), expected, rtol=1e-5, atol=1e-6)  # other kernels, same model
    assert opened == [True, False] and not device.default_delegates
    timed, latency = device.predict_timed(raw, 5)
    np.testing.assert_array_equal(timed, device.predict(raw))
    assert latency > 0
    def fails_otherwise(self):
        raise RuntimeError("other")

    monkeypatch.setattr(_XnnpackRefuses, "invoke", fails_otherwise)
    with pytest.raises(RuntimeError, match="other"):  # any other failure is not hidden
        tflite.DeviceInterpreter(flatbuffer, tasks.PROBABILITIES, AWKWARD_INPUTS).predict(raw)


@KEYS_ARE_NOT_INPUT_NAMES
def test_export_report_pairs_each_column_with_its_device_input(awkward_export):
    report, export_dir, _, _ = awkward_export
    assert set(report["variants"]) == {"float32", "full_int8"} and not report["failed_variants"]
    assert report["variants"]["float32"]["max_abs_diff"] < 1e-5  # scored in LiteRT on column-keyed features
    assert report["variants"]["full_int8"]["mean_abs_diff"] <= OUTPUT_TOLERANCE["full_int8"]
    assert [(item["name"], item["device_name"]) for item in report["device_inputs"]] == list(AWKWARD_NAMES.items())
    assert [item["missing_value"] for item in report["device_inputs"]] == [0.0, -1, "", 0.0]
    markdown = render_markdown(ExportReport.from_json(report))
    assert "| column | device input | dtype | pass when the example lacks it |" in markdown
    assert f"| prix (€) | {AWKWARD_NAMES['prix (€)']} | float32 | 0.0 |" in markdown
    assert f"| Case | {AWKWARD_NAMES['Case']} | int64 | -1 |" in markdown
    assert "what to pass" not in markdown  # no input has a note


def test_input_notes_are_reported_and_rendered_as_what_to_pass():
    inputs = {"pickup date": tf.io.FixedLenFeature([], tf.int64, -1),
              "fare": tf.io.FixedLenFeature([], tf.float32, 0.0),
              "a|b": tf.io.FixedLenFeature([], tf.string, "")}
    note = "int64 seconds since 1970-01-01 UTC"
    conventions = tflite.input_conventions(inputs, {"pickup date": note})
    names = internal_names(inputs)
    assert conventions[0] == {"name": "pickup date", "device_name": names["pickup date"], "dtype": "int64",
                              "shape": [1], "missing_value": -1, "note": note}
    assert "note" not in conventions[1] and conventions[1]["device_name"] == "fare"
    with pytest.raises(ValueError, match="'tip'"):
        tflite.input_conventions(inputs, {"tip": note})
    report = {"exported": True, "task": tasks.BINARY, "savedmodel": {"auc": 0.8}, "variants": {}, "eval_examples": 1,
              "inputs": "raw features", "device_output": "probabilities", "runtime": "LiteRT",
              "compared_with": contract.RAW_SIGNATURE, "device_inputs": conventions, "recommended": None}
    markdown = render_markdown(ExportReport.from_json(report))
    assert "| column | device input | dtype | what to pass | pass when the example lacks it |" in markdown
    assert f"| pickup date | {names['pickup date']} | int64 | {note} | -1 |" in markdown
    assert "| fare | fare | float32 |  | 0.0 |" in markdown
    assert f"| a\\|b | {names['a|b']} | string |  | '' |" in markdown


def test_the_calibration_rows_are_chosen_among_the_model_modules_calibration_pool(monkeypatch, tmp_path):
    """ModelExport reads CALIBRATION_POOL x rows training records: the model module's (the schema-driven model's
    from its task's row of models/defaults.py), or the contract's default for a module that declares none."""
    import types

    from components.core.model_module import CALIBRATION_POOL
    from components.model_export import executor
    from components.settings import TaskConfig
    from models import tabular

    asked = []
    monkeypatch.setattr(executor, "raw_features", lambda module, files, rows: asked.append(rows) or {
        "x": np.arange(rows, dtype=np.float32)})
    saved_model = types.SimpleNamespace(signatures={contract.RAW_SIGNATURE: lambda **raw: {
        tasks.PREDICTIONS: tf.reshape(-raw["x"], (-1, 1))}})  # the first record predicts the most
    module = types.SimpleNamespace(INPUTS={"x": tf.io.FixedLenFeature([], tf.float32)})
    chosen = executor.calibration_features(saved_model, module, tasks.task_named("binary"), [], 10)
    assert asked == [10 * CALIBRATION_POOL] and chosen["x"].tolist() == list(range(10))  # the first rows
    (tmp_path / "schema.pbtxt").write_text('feature { name: "x" type: FLOAT }\nfeature { name: "y" type: FLOAT }\n')
    for task, pool in (("binary", 1), ("regression", 20)):
        schema_driven = tabular.configure(str(tmp_path / "schema.pbtxt"), TaskConfig(
            type=task, label="y", classes=["0", "1"] if task == "binary" else []))
        assert schema_driven.CALIBRATION_POOL == pool
        asked.clear()
        chosen = executor.calibration_features(saved_model, schema_driven, schema_driven.task, [], 10)
        assert asked == [10 * pool]
    assert chosen["x"][[0, -1]].tolist() == [0, 199] and len(chosen["x"]) == 10  # spread over the predictions
