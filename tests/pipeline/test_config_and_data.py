"""Config loading rules (keys, YAML, each field's check, the model module and schema it names) and the TFRecord
record contract of the bundled taxi data."""
import csv
import dataclasses
import os
import re
import sys
import tempfile
import typing

import pytest
import tensorflow as tf

from components.settings import CHECK, REQUIRED, PipelineConfig
from components.core.model_module import CONSTANTS, FUNCTIONS
from pipeline.config import ConfigError, load_config, read_config
from tests.config_text import required_keys, taxi_config_text
from pipeline.onboarding.example_data import bundled_taxi_csv, row_to_example, write_taxi_span


def test_yaml_overrides_nested_sections_and_keeps_other_defaults(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text(taxi_config_text("output_dir: /tmp/x\ntrain:\n  epochs: 2\n  learning_rate: 1\n"))
    config = load_config(str(path), data_root="/data")
    assert (config.output_dir, config.data_root, config.train.epochs) == ("/tmp/x", "/data", 2)
    assert config.train.learning_rate == 1.0 and config.train.batch_size == 256
    assert config.push_dir == "/tmp/x/serving"


@pytest.mark.parametrize("text, key", [
    ("trainer:\n  epochs: 2\n", "trainer"),
    ("train:\n  epoch: 2\n", "train.epoch"),
    ("train:\n  batch_size: -8\n", "train.batch_size"),
    ("train:\n  batch_size: '256'\n", "train.batch_size"),
    ("evaluate:\n  absolute_bar: -1\n", "evaluate.absolute_bar"),
    ("ingest:\n  eval_fraction: 0\n", "ingest.eval_fraction"),
    ("enable_cache: 'yes'\n", "enable_cache"),
])
def test_bad_config_is_rejected_naming_the_key(tmp_path, text, key):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load_config(str(path))


def _leaf_fields(config, prefix=""):
    """Input: a config instance. Output: (dotted key, field, value) of every field that is not a section."""
    hints = typing.get_type_hints(type(config))
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if dataclasses.is_dataclass(hints[field.name]):
            yield from _leaf_fields(value, prefix + field.name + ".")
        else:
            yield prefix + field.name, field, value


def test_every_config_field_is_declared_with_its_check_and_its_default_passes():
    leaves = list(_leaf_fields(PipelineConfig()))
    assert len(leaves) > 50  # every section walked, resources.data/training/evaluation included
    unmarked = [key for key, field, _ in leaves if CHECK not in field.metadata]
    assert not unmarked, f"declare these with setting(default, <a Check or None>): {unmarked}"
    for key, field, default in leaves:
        check = field.metadata[CHECK]
        if not field.metadata.get(REQUIRED):  # no default to check
            assert check is None or check.holds(default), f"{key}'s default {default!r} fails its own check"


def test_no_default_is_the_taxi_examples():
    """What only the taxi example fits (its data, schema, model, slice feature and AUC bar) is in
    configs/taxi.yaml; a setting with no sensible default is required, and a config that leaves one out is
    refused naming it."""
    text = " ".join(repr(default) for _, _, default in _leaf_fields(PipelineConfig()))
    assert "taxi" not in text and "payment_type" not in text, text
    defaults = PipelineConfig()
    assert (defaults.train.model, defaults.evaluate.absolute_bar) == ("models.tabular", None)
    required = sorted(key for key, field, _ in _leaf_fields(defaults) if field.metadata.get(REQUIRED))
    assert required == ["data_root", "pipeline_name", "schema_path"]
    for key in required:
        lines = [line for line in required_keys().splitlines() if not line.startswith(key + ":")]
        with pytest.raises(ConfigError, match=rf": {key} is required"):
            read_config(_write(key, "\n".join(lines)))
    taxi = load_config(check_references=False)  # no --config: the bundled example's file
    assert (taxi.train.model, taxi.evaluate.slice_feature, taxi.evaluate.absolute_bar) == (
        "models.taxi", "payment_type", 0.9)


def _write(name: str, text: str) -> str:
    path = os.path.join(tempfile.mkdtemp(), f"{name}.yaml")
    with open(path, "w") as handle:
        handle.write(text)
    return path


@pytest.mark.parametrize("overrides, message", [
    ({"train": {"batch_size": 0}}, "train.batch_size: must be positive, got 0"),  # a rule from before, same words
    ({"pipeline_name": " "}, "pipeline_name: must be 1 to 63 letters, digits, '-' or '_', the first a letter or "
                             "digit (no '.', space or other sign: it names the run's MLMD contexts, each step's after "
                             "a '.', and the compiled pipeline), got ' '"),
    ({"pipeline_name": "shop.v2"}, "pipeline_name: must be 1 to 63 letters, digits, '-' or '_'"),
    ({"pipeline_name": "my data"}, "pipeline_name: must be 1 to 63 letters, digits, '-' or '_'"),
    ({"pipeline_name": "x" * 64}, "pipeline_name: must be 1 to 63 letters, digits, '-' or '_'"),
    ({"pipeline_name": "-shop"}, "pipeline_name: must be 1 to 63 letters, digits, '-' or '_'"),
    ({"output_dir": ""}, "output_dir: must not be empty, got ''"),
    ({"train": {"model": ""}}, "train.model: must not be empty, got ''"),
    ({"train": {"seed": -1}}, "train.seed: must be between 0 and 2**32 - 1, got -1"),
    ({"train": {"seed": 2**32}}, f"train.seed: must be between 0 and 2**32 - 1, got {2**32}"),
    ({"resources": {"evaluation": {"cpu": 0}}}, "resources.evaluation.cpu: must be positive, got 0"),
    ({"resources": {"vertex_region": ""}}, "resources.vertex_region: must not be empty, got ''"),
    ({"export": {"tflite_variants": []}}, "export.tflite_variants: must list one or more of "),
    ({"beam_pipeline_args": ["direct_running_mode=in_memory"]},
     "beam_pipeline_args: must be Beam flags (--name=value, or --name then its value), "
     "got ['direct_running_mode=in_memory']"),
])
def test_a_value_failing_its_fields_check_is_rejected_naming_the_dotted_key(overrides, message):
    with pytest.raises(ConfigError) as raised:
        load_config(check_references=False, **overrides)
    assert str(raised.value).startswith(message), str(raised.value)


def test_free_and_edge_values_that_are_valid_load():
    for name in ("x" * 63, "Shop_2-b", "7"):
        assert load_config(check_references=False, pipeline_name=name).pipeline_name == name
    config = load_config(check_references=False, evaluate={"slice_feature": ""},
                         beam_pipeline_args=["--runner", "DirectRunner", "--direct_num_workers=2"],
                         train={"seed": 2**32 - 1, "profile_from_step": 1})
    assert (config.evaluate.slice_feature, config.train.seed) == ("", 2**32 - 1)
    assert config.beam_pipeline_args == ["--runner", "DirectRunner", "--direct_num_workers=2"]


@pytest.mark.parametrize("text, where", [
    ("train:\n  epochs: 2\n  batch_size: 64: 3\n", "line 3, column 17"),
    ("train: {epochs: 2\nevaluate: 1\n", "line 2, column 9"),
    ("\tepochs: 2\n", "line 1, column 1"),
])
def test_malformed_yaml_is_a_config_error_naming_the_file_and_line(tmp_path, text, where):
    path = tmp_path / "broken.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(path))}: {where}: not valid YAML: "):
        load_config(str(path))


@pytest.mark.parametrize("text, message", [
    ("train:\n  epochs: 1\nevaluate: {absolute_bar: 0.8}\ntrain:\n  epochs: 2\n",
     "line 4: duplicate key train (first given at line 1)"),
    ("train:\n  epochs: 1\n  batch_size: 64\n  epochs: 3\n", "line 4: duplicate key train.epochs (first given at line 2)"),
    ("resources:\n  training: {cpu: 2, cpu: 4}\n", "line 2: duplicate key resources.training.cpu (first given at line 2)"),
    ("enable_cache: true\n'enable_cache': false\n", "line 2: duplicate key enable_cache (first given at line 1)"),
], ids=["top_level_section", "nested_key", "flow_mapping", "quoted_twin"])
def test_a_key_given_twice_is_a_config_error_naming_the_file_line_and_key(tmp_path, text, message):
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as raised:
        load_config(str(path), check_references=False)
    assert str(raised.value).startswith(f"{path}: {message}"), str(raised.value)


def test_a_merge_key_may_still_be_overridden(tmp_path):
    path = tmp_path / "merge.yaml"
    path.write_text(required_keys() + "train:\n  <<: {epochs: 1, batch_size: 64}\n  epochs: 3\n")
    config = load_config(str(path), check_references=False)
    assert (config.train.epochs, config.train.batch_size) == (3, 64)


@pytest.mark.parametrize("text, value", [("1e-3", 0.001), ("5e-4", 0.0005), ("1E6", 1e6), ("+2.5e+3", 2500.0),
                                          ("2.5e-3", 0.0025), ("1", 1.0)])
def test_exponent_floats_load_as_floats(tmp_path, text, value):
    path = tmp_path / "c.yaml"
    path.write_text(required_keys() + f"train:\n  learning_rate: {text}\n")
    learning_rate = load_config(str(path), check_references=False).train.learning_rate
    assert type(learning_rate) is float and learning_rate == value


def test_other_scalars_resolve_as_before(tmp_path):
    """Only the exponent form changes: ints stay ints, YAML 1.1 booleans stay booleans, quoted stays a string."""
    from pipeline.config import _read_yaml

    path = tmp_path / "c.yaml"
    path.write_text("a: 12\nb: 0x1F\nc: on\nd: no\ne: '1e-3'\nf: \"1E6\"\ng: 1.5\nh: 1e\ni: 1_000\nj: ~\n"
                    "k: -2.5e+3\nl: -1e-3\n")
    expected = {"a": 12, "b": 31, "c": True, "d": False, "e": "1e-3", "f": "1E6", "g": 1.5, "h": "1e", "i": 1000,
                "j": None, "k": -2500.0, "l": -0.001}
    assert [(key, type(value), value) for key, value in _read_yaml(str(path)).items()] == [
        (key, type(value), value) for key, value in expected.items()]


def _module(folder, name, text):
    (folder / f"{name}.py").write_text(text)
    return name


def test_model_module_must_import_and_hold_the_model_contract(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ConfigError, match=r"^train\.model: cannot import 'models\.no_such_model': No module named .*"
                                          r"\(a module path such as models\.taxi, importable from .* or the PYTHONPATH\)$"):
        load_config(train={"model": "models.no_such_model"})
    half = _module(tmp_path, "hardening_half_model", "TASK = 'binary'\nCLASSES = ('no', 'yes')\nINPUTS = {}\n"
                                                     "LABEL_KEY = 'y'\nbuild_model = 3\n")
    with pytest.raises(ConfigError) as raised:
        load_config(train={"model": half})
    message = str(raised.value)
    assert message.startswith(f"train.model: '{half}' ({tmp_path / half}.py) lacks LABEL_INPUTS, make_label, "
                              "build_preprocessing; build_model not callable"), message
    assert message.endswith("; a model module defines " + ", ".join(CONSTANTS + FUNCTIONS)), message
    broken = _module(tmp_path, "hardening_broken_model", "def build_model(preprocessing):\n    pass\n\n\n"
                                                         "raise RuntimeError('no GPU driver')\n")
    with pytest.raises(ConfigError, match=rf"^train\.model: importing '{broken}' failed: RuntimeError: no GPU driver"):
        load_config(train={"model": broken})
    needs_missing = _module(tmp_path, "hardening_needs_missing", "import a_package_nobody_installed\n"
                                                                 "from models.taxi import build_model\n")
    with pytest.raises(ConfigError) as raised:  # found, but one of its own imports is not: no path advice
        load_config(train={"model": needs_missing})
    assert str(raised.value) == (f"train.model: importing '{needs_missing}' failed: ModuleNotFoundError: "
                                 "No module named 'a_package_nobody_installed'")
    assert load_config(train={"model": "tests.components.unjittable_model"}).train.model  # a full contract, elsewhere
    assert load_config(train={"model": broken}, check_references=False)  # `status` needs no model


def test_a_module_that_is_no_model_module_is_refused_without_running_it(tmp_path, monkeypatch, capfd):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    script = _module(tmp_path, "hardening_cleanup_script", "import os\nopen('ran.txt', 'w').write('ran')\n")
    for name, what in (("os", r"'os' is not a model module: a module built into Python"),
                       ("this", r"'this' \(.*this\.py\) is not a model module: it defines none of configure, "
                                r"make_label, build_preprocessing, build_model \(it was not imported\)"),
                       ("sys", r"'sys' is not a model module: a module built into Python"),
                       ("models", r"'models' \(.*__init__\.py\) is not a model module"),
                       (script, rf"'{script}' \(.*\) is not a model module: it defines none of configure")):
        with pytest.raises(ConfigError, match=rf"^train\.model: {what}.*a model module defines TASK, CLASSES"):
            load_config(train={"model": name})
    assert not (tmp_path / "ran.txt").exists() and "Zen of Python" not in capfd.readouterr().out
    # A module with part of the contract: what it lacks, before what the task section says of it.
    partial = _module(tmp_path, "hardening_partial_model", "def build_model(preprocessing):\n    pass\n")
    with pytest.raises(ConfigError, match=rf"^train\.model: '{partial}' \(.*\) lacks TASK, CLASSES, INPUTS"):
        load_config(train={"model": partial}, task={"type": "binary"})


def test_a_bar_no_model_can_meet_is_refused_at_load(tmp_path):
    for model, bar in (("models.taxi", 2.5), ("models.penguins", 85.0)):  # AUC, accuracy: at most 1
        with pytest.raises(ConfigError, match=rf"^evaluate\.absolute_bar: {bar:g} is beyond what any model scores on "
                                              r"(AUC|accuracy), at best 1, so that no model would ever be blessed"):
            load_config(train={"model": model}, evaluate={"absolute_bar": bar})
    assert load_config(train={"model": "models.taxi"}, evaluate={"absolute_bar": 1.0}).evaluate.absolute_bar == 1.0
    assert load_config(train={"model": "models.taxi_fare"}, evaluate={"absolute_bar": 25.0})  # MAE: no best value


def test_a_schema_driven_model_with_no_feature_or_no_label_in_the_schema_names_the_users_schema(tmp_path, capsys):
    from pipeline.commands.cli import main as cli_main

    schema = tmp_path / "mine.pbtxt"
    schema.write_text('feature { name: "a" type: FLOAT }\nfeature { name: "b" type: BYTES }\n'
                      'feature { name: "y" type: INT }\n')
    task = {"type": "binary", "label": "y", "classes": ["0", "1"]}
    with pytest.raises(ConfigError, match=rf"^train\.model: 'models\.tabular': the model has no feature to read: "
                                          rf"the schema {re.escape(str(schema))} holds the label 'y' and 'a', 'b', "
                                          r"every one in task\.exclude$"):
        load_config(schema_path=str(schema), train={"model": "models.tabular"}, task={**task, "exclude": ["a", "b"]})
    with pytest.raises(ConfigError, match=rf"task\.label: 'label' is not a feature of the schema "
                                          rf"{re.escape(str(schema))}$"):
        load_config(schema_path=str(schema), train={"model": "models.tabular"}, task={**task, "label": "label"})
    (tmp_path / "c.yaml").write_text(f"pipeline_name: p\ndata_root: {tmp_path}\nschema_path: mine.pbtxt\n"
                                     "task: {type: binary, label: y, classes: ['0', '1'], exclude: [a, b]}\n")
    capsys.readouterr()
    code = cli_main(["run", "--config", str(tmp_path / "c.yaml"), "--output", str(tmp_path / "out")])
    assert code == 2 and "config error: train.model: 'models.tabular': the model has no feature to read" in \
        capsys.readouterr().err and not (tmp_path / "out").exists()


def test_schema_path_must_be_a_tfmd_schema_text_proto(tmp_path):
    missing = tmp_path / "missing.pbtxt"
    with pytest.raises(ConfigError, match=rf"^schema_path: {re.escape(str(missing))}: cannot be read"):
        load_config(schema_path=str(missing))
    garbled = tmp_path / "garbled.pbtxt"
    garbled.write_text('feature {\n  name: "fare"\n  tpe: FLOAT\n}\n')
    with pytest.raises(ConfigError, match=rf"^schema_path: {re.escape(str(garbled))}: line 3, column 3: "
                                          r"not a TFMD Schema text proto: .*no field named \"tpe\""):
        load_config(schema_path=str(garbled))
    empty = tmp_path / "empty.pbtxt"
    empty.write_text("# nothing yet\n")
    with pytest.raises(ConfigError, match="^schema_path: .*: a TFMD Schema with no feature"):
        load_config(schema_path=str(empty))
    assert load_config(schema_path="gs://bucket/schema.pbtxt").schema_path  # read where the step runs


def test_record_contract_types_and_absent_cells():
    with open(bundled_taxi_csv(), newline="") as handle:
        row = next(csv.DictReader(handle))
    example = row_to_example(row)
    features = example.features.feature
    assert set(features) == {column for column, cell in row.items() if cell != ""}
    assert features["fare"].float_list.value[0] == pytest.approx(float(row["fare"]))
    assert features["trip_start_hour"].int64_list.value[0] == int(row["trip_start_hour"])
    assert features["payment_type"].bytes_list.value[0] == row["payment_type"].encode()
    assert row["pickup_latitude"] == "" and "pickup_latitude" not in features  # empty cell: absent feature
    assert "big_tipper" not in features  # the label is derived, never stored


def test_span_layout_holds_every_row_once(tmp_path):
    span_dir, rows = write_taxi_span(str(tmp_path), span=3, max_rows=101, num_shards=3)
    assert span_dir.endswith("span-3") and rows == 101
    files = sorted(tf.io.gfile.glob(f"{span_dir}/*"))
    assert [f.rsplit("/", 1)[1] for f in files] == [f"data-0000{i}-of-00003.tfrecord.gz" for i in range(3)]
    assert sum(1 for _ in tf.data.TFRecordDataset(files, compression_type="GZIP")) == 101


@pytest.mark.parametrize("task, classes, message", [
    ("multiclass", ("a", "b"), r"a multiclass task has 3 or more CLASSES, got 2"),
    ("binary", ("yes",), r"a binary task has exactly 2 \(negative, positive\) CLASSES, got 1"),
    ("regression", ("low", "high"), r"a regression task has no CLASSES"),
    ("ordinal", (), r"TASK 'ordinal' is not one of binary, multiclass, regression"),
], ids=["multiclass_with_2_classes", "binary_with_1_class", "regression_with_classes", "unknown_task"])
def test_a_task_that_does_not_fit_its_classes_exits_2_naming_it(tmp_path, monkeypatch, capsys, task, classes,
                                                                 message):
    from pipeline.commands.cli import main as cli_main

    monkeypatch.syspath_prepend(str(tmp_path))
    name = _module(tmp_path, f"task_model_{task}_{len(classes)}",
                   f"from models.taxi import *  # noqa\nTASK = {task!r}\nCLASSES = {classes!r}\n")
    (tmp_path / "c.yaml").write_text(required_keys() + f"train: {{model: {name}}}\n")
    capsys.readouterr()
    code = cli_main(["run", "--config", str(tmp_path / "c.yaml"), "--data", str(tmp_path), "--output",
                     str(tmp_path / "out")])
    stderr = capsys.readouterr().err
    assert code == 2
    assert re.search(rf"^config error: train\.model: '{name}': {message}", stderr, re.MULTILINE), stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task_type, message", [
    ("no_such_tasks:Quantile", r"task\.type: task 'no_such_tasks:Quantile': importing 'no_such_tasks' failed"),
    ("my_tasks:Missing", r"task\.type: task 'my_tasks:Missing': my_tasks defines no Task subclass Missing"),
    ("my_tasks:NotATask", r"task\.type: task 'my_tasks:NotATask': my_tasks defines no Task subclass NotATask"),
    ("my tasks", r"task\.type: must be binary, multiclass, regression, a task of your own as module:Class"),
], ids=["no_module", "no_class", "no_task", "no_path"])
def test_a_task_of_ones_own_that_does_not_import_or_is_no_task_exits_2_naming_task_type(tmp_path, monkeypatch, capsys,
                                                                                     task_type, message):
    from pipeline.commands.cli import main as cli_main

    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_tasks", raising=False)  # another test's my_tasks, imported before
    (tmp_path / "my_tasks.py").write_text("class NotATask:\n    pass\n")
    (tmp_path / "c.yaml").write_text(required_keys() + f"task: {{type: {task_type!r}, label: tips}}\n")
    capsys.readouterr()
    code = cli_main(["run", "--config", str(tmp_path / "c.yaml"), "--data", str(tmp_path), "--output",
                     str(tmp_path / "out")])
    stderr = capsys.readouterr().err
    assert code == 2 and re.search(rf"^config error: .*{message}", stderr, re.MULTILINE), stderr
    assert not (tmp_path / "out").exists()



def test_the_settings_module_imports_no_component_package():
    """components/settings.py is the floor every component stands on: it imports the shared names
    (components.core.contract, components.core.tasks) and nothing of a component's own, so no import runs back up."""
    import ast

    import components.settings as settings

    tree = ast.parse(open(settings.__file__).read())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
        alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    project = {name for name in imported if name.split(".")[0] in ("components", "pipeline", "models")}
    assert project == {"components.core.contract", "components.core.missing_values", "components.core.tasks"}, \
        project  # nothing that loads TensorFlow


def test_a_run_reads_its_config_file_once(tmp_path, monkeypatch, taxi_span_root):
    """One read serves the nothing-new check, the references' check and the run's fingerprint."""
    from pipeline import config as config_module
    from pipeline.commands import cli

    reads, read_yaml = [], config_module._read_yaml
    monkeypatch.setattr(config_module, "_read_yaml", lambda path: reads.append(path) or read_yaml(path))
    monkeypatch.setattr(cli, "_run_and_report", lambda config, verbose, known_runs: 0)  # the DAG is not the point
    config_file = tmp_path / "c.yaml"
    config_file.write_text(taxi_config_text("train: {epochs: 1}\n"))
    code = cli.main(["run", "--config", str(config_file), "--data", taxi_span_root, "--output", str(tmp_path / "out")])
    assert code == 0 and reads == [str(config_file)]


def test_the_pipeline_process_loads_the_model_module_once(monkeypatch):
    """Checking the config loads the model module; wiring the DAG takes what it predicts from that check and
    hands each step one settings record carrying it."""
    import json

    from pipeline import config as config_module
    from pipeline.dag.wiring import create_pipeline

    loads, load = [], config_module.load_model_module
    monkeypatch.setattr(config_module, "load_model_module", lambda *args: loads.append(args) or load(*args))
    config = load_config()
    pipeline = create_pipeline(config, fingerprint_data=False)
    assert len(loads) == 1
    records = {node.id: json.loads(node.exec_properties.get("settings") or json.loads(
        node.exec_properties.get("custom_config") or "{}").get("settings") or "null")
        for node in pipeline.components}
    targets = {node_id: record["target"] for node_id, record in records.items() if record}
    assert set(targets) == {"Trainer", "Fp32BaselineTrainer", "PrecisionEvaluator", "ModelExport"}
    assert all(target == {"label_key": "big_tipper", "task": "binary", "classes": ["not_big_tipper", "big_tipper"],
                          "label_sources": ["tips"]} for target in targets.values())
    # the eval split's hash leaves out what the label is read from and the model does not read (fare it reads)
    ingest = {node.id: node for node in pipeline.components}["TFRecordIngest"]
    assert json.loads(ingest.exec_properties["split_leaves_out"]) == ["tips"]
    assert records["Fp32BaselineTrainer"]["section"]["precision"] == "float32"  # its overrides, in its record
