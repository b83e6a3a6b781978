"""Cache keys follow code and data: each custom step's executor spec carries a digest of its
code, both Trainers' custom_config one of the trainer package and the model module wherever it lives,
ImportSchemaGen one of the schema's bytes, and the input fingerprint one of each file's first and last bytes."""
import json
import os
import shutil

import pytest
import tensorflow as tf

from components.core import contract
from components.tfrecord_ingest.spans import EDGE_BYTES, fingerprint_spans
from pipeline.config import PROJECT_ROOT, load_config
from pipeline.runs.code_fingerprint import code_files, code_fingerprint
from pipeline.dag.wiring import create_pipeline

CUSTOM_STEPS = {"TFRecordIngest": "components.tfrecord_ingest", "ValidationGate": "components.validation_gate",
                "PrecisionEvaluator": "components.precision_evaluator", "ModelExport": "components.model_export",
                "AtomicPusher": "components.atomic_pusher"}


def _executor_flags(pipeline) -> dict:
    """node id -> the extra flags of its executor spec in the compiled IR (what TFX's cache key hashes)."""
    from tfx.dsl.compiler import compiler
    from tfx.proto.orchestration import executable_spec_pb2, pipeline_pb2

    deployment = pipeline_pb2.IntermediateDeploymentConfig()
    compiler.Compiler().compile(pipeline).deployment_config.Unpack(deployment)
    flags = {}
    for node_id, packed in deployment.executor_specs.items():
        spec = executable_spec_pb2.PythonClassExecutableSpec()
        if not packed.Unpack(spec):
            beam = executable_spec_pb2.BeamExecutableSpec()
            packed.Unpack(beam)
            spec = beam.python_executor_spec
        flags[node_id] = list(spec.extra_flags)
    return flags


def _trainer_settings(pipeline, node_id: str) -> dict:
    return json.loads({node.id: node for node in pipeline.components}[node_id].exec_properties["custom_config"])


@pytest.fixture
def model_elsewhere(tmp_path, monkeypatch):
    """A copy of models/taxi.py outside models/, importable as `my_taxi_model`. Output: its path."""
    folder = tmp_path / "model_code"
    folder.mkdir()
    shutil.copyfile(os.path.join(PROJECT_ROOT, "models", "taxi.py"), folder / "my_taxi_model.py")
    monkeypatch.syspath_prepend(str(folder))
    return folder / "my_taxi_model.py"


def test_each_custom_step_and_both_trainers_are_keyed_on_their_code(model_elsewhere, tmp_path):
    config = load_config(output_dir=str(tmp_path / "out"), train={"model": "my_taxi_model"})
    pipeline = create_pipeline(config, fingerprint_data=False)
    flags = _executor_flags(pipeline)
    for node_id, package in CUSTOM_STEPS.items():
        extra = ("my_taxi_model",) if node_id == "ModelExport" else ()
        assert flags[node_id] == [f"--{contract.CODE_FINGERPRINT}={code_fingerprint(package, *extra)}"], node_id
    trainers = [_trainer_settings(pipeline, node_id) for node_id in ("Trainer", "Fp32BaselineTrainer")]
    assert {trainer[contract.CODE_FINGERPRINT] for trainer in trainers} == {code_fingerprint("components.trainer", "my_taxi_model")}
    assert str(model_elsewhere) in code_files("components.trainer", "my_taxi_model")

    model_elsewhere.write_text(model_elsewhere.read_text() + "\n# a change to the model outside models/\n")
    changed = create_pipeline(config, fingerprint_data=False)
    new_flags = _executor_flags(changed)
    assert new_flags["ModelExport"] != flags["ModelExport"]
    assert _trainer_settings(changed, "Trainer")[contract.CODE_FINGERPRINT] != trainers[0][contract.CODE_FINGERPRINT]
    assert all(new_flags[node_id] == flags[node_id] for node_id in CUSTOM_STEPS if node_id != "ModelExport")


def test_a_code_digest_covers_the_modules_a_package_imports_and_nothing_unrelated(tmp_path, monkeypatch):
    package = tmp_path / "hardening_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "component.py").write_text("from hardening_pkg import executor\n")
    (package / "executor.py").write_text("import json\nfrom hardening_helpers.io import read\n")
    helpers = tmp_path / "hardening_helpers"
    helpers.mkdir()
    (helpers / "__init__.py").write_text("")
    (helpers / "io.py").write_text("def read():\n    return 1\n")
    (helpers / "unused.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    names = set(code_files("hardening_pkg").values())
    assert names == {"hardening_pkg", "hardening_pkg.component", "hardening_pkg.executor"}  # not beside it: left out
    assert set(code_files("hardening_pkg", "hardening_helpers.io").values()) >= {"hardening_helpers.io"}
    assert "json" not in {name.split(".")[0] for name in code_files("components.tfrecord_ingest").values()}
    before = code_fingerprint("components.model_export")
    assert {"components.core.artifact_files", "components.core.records"} <= set(code_files("components.model_export").values())
    assert code_fingerprint("components.model_export") == before  # stable
    digest = code_fingerprint("hardening_pkg", "hardening_helpers.io")
    (helpers / "unused.py").write_text("X = 2\n")
    assert code_fingerprint("hardening_pkg", "hardening_helpers.io") == digest
    (helpers / "io.py").write_text("def read():\n    return 2\n")
    assert code_fingerprint("hardening_pkg", "hardening_helpers.io") != digest


def test_a_changed_schema_file_changes_the_schema_step_key(tmp_path, taxi_span_root):
    schema = tmp_path / "schema.pbtxt"
    shutil.copyfile(load_config().schema_path, schema)
    config = load_config(output_dir=str(tmp_path / "out"), schema_path=str(schema), data_root=taxi_span_root)
    before = _executor_flags(create_pipeline(config))["ImportSchemaGen"]
    schema.write_text(schema.read_text().replace("threshold: 0.15", "threshold: 0.25"))
    after = _executor_flags(create_pipeline(config))["ImportSchemaGen"]
    assert before != after and all(flag.startswith("--schema_fingerprint=") for flag in before + after)


@pytest.mark.parametrize("size, position", [(1000, 500), (5 * EDGE_BYTES, 5 * EDGE_BYTES - 10), (5 * EDGE_BYTES, 7)])
def test_a_same_size_rewrite_with_the_same_mtime_changes_the_input_fingerprint(tmp_path, size, position):
    span = tmp_path / "span-1"
    span.mkdir()
    path = span / "data.tfrecord"
    content = bytearray(os.urandom(size))
    path.write_bytes(bytes(content))
    stat = os.stat(path)
    seen_before = tf.io.gfile.stat(str(path))
    before = fingerprint_spans([(1, str(span))])
    content[position] ^= 0xFF
    path.write_bytes(bytes(content))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as if within the filesystem's mtime granularity
    seen_after = tf.io.gfile.stat(str(path))  # (TensorFlow's local filesystem reports whole seconds anyway)
    assert (seen_after.length, seen_after.mtime_nsec) == (seen_before.length, seen_before.mtime_nsec)
    assert fingerprint_spans([(1, str(span))]) != before
