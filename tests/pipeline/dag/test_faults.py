"""Bad input and faults against a production output directory that already serves a pushed model.

Every case runs the real command line (`python -m pipeline run`, in process) on the same output directory
as the production run: it must end with a clear error naming the file, record, feature, step or key at
fault, a non-zero exit, and the pushed model byte-identical. No test depends on another having run: the
killed run (which may push a new version beside the production one) is one fixture from start to restart.
"""
import contextlib
import glob
import io
import os
import re
import signal
import sys
import time

import pytest
import yaml
import tensorflow as tf

from components.core import contract
from components.tfrecord_ingest.tfrecord_files import split_of
from components.trainer.checkpoints import BACKUP_METADATA
from pipeline.commands.cli import main as cli_main
from pipeline.config import load_config, prediction_target
from tests.config_text import required_keys, taxi_config_text
from pipeline.runs.run_facts import NOT_STARTED_PREFIX
from pipeline.runs.run_guard import LOCK_FILE, LOCKED_EXIT_CODE
from pipeline.runs.run_report import REPORT_FILE, REPORTS_DIR
from tests.pipeline.span_files import count_outputs, read_span, write_records
from tests.components.pushing import race_pushers
from tests.warm_python import run_warm, start_warm

pytestmark = pytest.mark.e2e


def _span_examples(production) -> list[tf.train.Example]:
    return read_span(os.path.join(production.data_root, "span-1"))


def _run(production, data_root, capsys, config_file=None):
    """Runs the pipeline command on the production output directory. Output: (exit code, stderr)."""
    capsys.readouterr()
    code = cli_main(["run", "--config", config_file or production.config_file, "--data", str(data_root),
                     "--output", production.config.output_dir])
    return code, capsys.readouterr().err


@pytest.fixture
def unchanged_production(production, tree_digest):
    """Yields the production setup; afterwards asserts the serving directory is byte-identical."""
    before = tree_digest(production.config.push_dir)
    yield production
    assert tree_digest(production.config.push_dir) == before, "the pushed model changed"


# ------------------------------------------------------------------------------------------- config faults

def _with_required_keys(text: str) -> str:
    """A test's YAML text after the taxi example's required keys that it does not give itself (malformed text as
    it is, so that its error keeps its line)."""
    try:
        given = set(yaml.safe_load(text) or {})
    except yaml.YAMLError:
        return text
    return "".join(line + "\n" for line in required_keys().splitlines() if line.split(":", 1)[0] not in given) + text


@pytest.mark.parametrize("text, key", [
    ("train: {epochs: 3, epoch: 2}\n", "train.epoch"),  # unknown key
    ("train: {batch_size: big}\n", "train.batch_size"),  # wrong type
    ("train: {batch_size: -64}\n", "train.batch_size"),  # impossible value
    ("evaluate: {max_drop_vs_fp32: -0.5}\n", "evaluate.max_drop_vs_fp32"),  # a negative tolerance
])
def test_config_faults_exit_2_naming_the_key(unchanged_production, capsys, tmp_path, text, key):
    config_file = tmp_path / "bad.yaml"
    config_file.write_text(_with_required_keys(text))
    code, stderr = _run(unchanged_production, unchanged_production.data_root, capsys, str(config_file))
    assert code == 2
    assert re.search(rf"^config error: .*\b{re.escape(key)}\b", stderr, re.MULTILINE), stderr


@pytest.mark.parametrize("text, expected", [
    ("train: {epochs: 3\nevaluate: 1\n", r"bad\.yaml: line 2, column 9: not valid YAML"),  # malformed YAML
    ("train: {model: models.taxi_typo}\n", r"train\.model: cannot import 'models\.taxi_typo'"),
    ("train: {model: pipeline.onboarding.example_data}\n",
     r"train\.model: 'pipeline\.onboarding\.example_data' \(.*\) is not a model module: it defines none of "),
    ("schema_path: /nonexistent/schema.pbtxt\n", r"schema_path: /nonexistent/schema\.pbtxt: cannot be read"),
], ids=["malformed_yaml", "model_not_importable", "model_without_contract", "schema_missing"])
def test_malformed_config_and_unusable_references_exit_2_naming_them(unchanged_production, capsys, tmp_path, text,
                                                                      expected):
    config_file = tmp_path / "bad.yaml"
    config_file.write_text(_with_required_keys(text))
    runs_before = _execution_count(unchanged_production.config)
    code, stderr = _run(unchanged_production, unchanged_production.data_root, capsys, str(config_file))
    assert code == 2
    assert re.search(rf"^config error: .*{expected}", stderr, re.MULTILINE), stderr
    assert "Traceback" not in stderr and _execution_count(unchanged_production.config) == runs_before


def test_a_run_that_never_started_leaves_every_report_as_it_was(unchanged_production, capsys, tmp_path):
    reports = os.path.join(unchanged_production.config.output_dir, REPORTS_DIR)
    before = {name: open(os.path.join(reports, name), "rb").read() for name in os.listdir(reports)}
    assert before  # at least the production run's page

    code, stderr = _run(unchanged_production, tmp_path / "no-such-data", capsys)  # fails inside create_pipeline

    assert code == 2 and "data error:" in stderr and "does not exist" in stderr, stderr
    after = set(os.listdir(reports))
    [own] = after - set(before)
    assert own.startswith(NOT_STARTED_PREFIX)
    for name, content in before.items():
        assert open(os.path.join(reports, name), "rb").read() == content, f"{name} was rewritten"
    page = open(os.path.join(reports, own)).read()
    assert "NEVER STARTED: data error:" in page and "This run never started" in page
    assert open(os.path.join(unchanged_production.config.output_dir, REPORT_FILE)).read() == page


# ----------------------------------------------------------------------------------------- TFRecord faults

def _truncated(span, examples):
    path = write_records(span / "part.tfrecord.gz", examples[:400], "GZIP")
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    return "part.tfrecord.gz: record "


def _flipped_bytes(span, examples):
    path = write_records(span / "part.tfrecord", examples[:400])
    data = bytearray(open(path, "rb").read())
    # Each record: 8-byte length, 4-byte length CRC, payload, 4-byte payload CRC. Flip a byte in record 100's payload.
    start = sum(len(example.SerializeToString()) + 16 for example in examples[:100])
    data[start + 12 + 5] ^= 0xFF
    open(path, "wb").write(bytes(data))
    return "part.tfrecord: record 100: unreadable"


def _not_an_example(span, examples):
    write_records(span / "part.tfrecord", examples[:5] + [b"\x08\x96\x01 not an Example"] + examples[5:10])
    return "part.tfrecord: record 5: not a tf.Example"


def _empty_file(span, examples):
    write_records(span / "good.tfrecord", examples[:50])
    open(span / "empty.tfrecord", "wb").close()
    return "empty.tfrecord"


def _empty_directory(span, examples):
    span.mkdir(parents=True)
    return "no TFRecord files"


def _missing_directory(span, examples):
    return "does not exist"


def _gzip_then_plain_in_one_file(span, examples):
    """`cat part.gz part.tfrecord > mixed`: a gzip stream followed by plain TFRecord bytes."""
    zipped = write_records(span.parent / "a.gz", examples[:30], "GZIP")
    plain = write_records(span.parent / "b.tfrecord", examples[30:60])
    span.mkdir(parents=True)
    with open(span / "mixed.tfrecord", "wb") as out:
        out.write(open(zipped, "rb").read() + open(plain, "rb").read())
    return "mixed.tfrecord: record 30"


@pytest.mark.parametrize("make_fault", [_truncated, _flipped_bytes, _not_an_example, _empty_file, _empty_directory,
                                        _missing_directory, _gzip_then_plain_in_one_file])
def test_tfrecord_faults_name_the_file_and_record(unchanged_production, capsys, tmp_path, make_fault):
    data_root = tmp_path / "data"
    if make_fault is not _missing_directory:
        data_root.mkdir()
    expected = make_fault(data_root / "span-2", _span_examples(unchanged_production))
    examples_before = count_outputs(unchanged_production.config, "TFRecordIngest", contract.EXAMPLES)

    code, stderr = _run(unchanged_production, data_root, capsys)

    no_data = make_fault in (_empty_directory, _missing_directory)  # an input error, named before any step runs
    assert code == (2 if no_data else 1)
    assert ("data error:" if no_data else "ingestion error:") in stderr and expected in stderr, stderr
    assert count_outputs(unchanged_production.config, "TFRecordIngest", contract.EXAMPLES) == examples_before


def test_gzip_and_plain_files_side_by_side_are_read_without_loss(production, tmp_path):
    from components.tfrecord_ingest import executor
    examples = _span_examples(production)[:200]
    write_records(tmp_path / "in" / "a.tfrecord", examples[:100])
    write_records(tmp_path / "in" / "b.tfrecord", examples[100:], "GZIP")  # no .gz suffix: found by content
    report = executor.ingest([str(tmp_path / "in")], str(tmp_path / "out"), 0.25)
    assert report["files"] == {"a.tfrecord": 100, "b.tfrecord": 100}
    assert sum(report["counts"].values()) == 200


# ------------------------------------------------------------------------------------------- schema faults

def _drop(name):
    def mutate(index, example):
        del example.features.feature[name]
    return mutate


def _fare_as_text(index, example):
    fare = example.features.feature["fare"].float_list.value[0]
    del example.features.feature["fare"]
    example.features.feature["fare"].bytes_list.value.append(str(fare).encode())


def _out_of_domain(index, example):
    if index % 20 == 0:
        example.features.feature["payment_type"].bytes_list.value[:] = [b"Bitcoin"]
        example.features.feature["trip_start_hour"].int64_list.value[:] = [31]


def _nan_and_inf(index, example):
    if index % 25 == 0:
        example.features.feature["fare"].float_list.value[:] = [float("nan")]
        example.features.feature["trip_miles"].float_list.value[:] = [float("inf")]


@pytest.mark.parametrize("mutate, expected", [
    (_drop("trip_start_hour"), ["train: trip_start_hour: Column dropped", "eval: trip_start_hour: Column dropped"]),
    (_fare_as_text, ["train: fare: Unexpected data type"]),
    (_out_of_domain, ["train: payment_type: Unexpected string values", "train: trip_start_hour: Out-of-range values"]),
    (_nan_and_inf, ["train: fare: Invalid values", "train: trip_miles: Invalid values"]),
    (_drop("tips"), ["train: tips: Column dropped"]),  # the label's source column
], ids=["required_feature_missing", "wrong_type", "out_of_domain", "nan_and_inf", "label_absent"])
def test_schema_faults_stop_the_run_before_training_naming_each_feature(unchanged_production, capsys, tmp_path,
                                                                        mutate, expected):
    examples = _span_examples(unchanged_production)
    for index, example in enumerate(examples):
        mutate(index, example)
    write_records(tmp_path / "data" / "span-2" / "part.tfrecord.gz", examples, "GZIP")
    models_before = count_outputs(unchanged_production.config, "Fp32BaselineTrainer", contract.MODEL)

    code, stderr = _run(unchanged_production, tmp_path / "data", capsys)

    assert code == 1
    assert "BlockingAnomaliesError" in stderr and "training did not start" in stderr, stderr
    for line in expected:
        assert line in stderr, (line, stderr)
    assert count_outputs(unchanged_production.config, "Fp32BaselineTrainer", contract.MODEL) == models_before
    assert count_outputs(unchanged_production.config, "Trainer", contract.MODEL) == models_before
    page = open(os.path.join(unchanged_production.config.output_dir, REPORT_FILE)).read()
    assert "The ValidationGate stopped the run before training" in page
    for line in expected:  # the report's anomaly table names each feature
        split, feature, anomaly = line.split(": ")
        assert f"<td>{split}</td><td>{feature}</td><td>ERROR</td><td>{anomaly}</td>" in page, line


def test_empty_eval_split_stops_the_run_before_training(unchanged_production, capsys, tmp_path):
    config = unchanged_production.config
    leave_out = prediction_target(config).label_sources
    examples = [e for e in _span_examples(unchanged_production)
                if split_of(e.SerializeToString(), config.ingest.eval_fraction, leave_out) == "train"]
    write_records(tmp_path / "data" / "span-2" / "part.tfrecord.gz", examples, "GZIP")
    models_before = count_outputs(unchanged_production.config, "Trainer", contract.MODEL)

    code, stderr = _run(unchanged_production, tmp_path / "data", capsys)

    assert code == 1  # ingestion counts the splits and stops before statistics, validation and training
    assert "span-2: the eval split is empty (" in stderr, stderr
    assert count_outputs(unchanged_production.config, "Trainer", contract.MODEL) == models_before


# ----------------------------------------------------------------------------------------- training faults

def test_nan_loss_stops_training_naming_the_step(unchanged_production, capsys, tmp_path):
    config_file = tmp_path / "diverging.yaml"
    settings = yaml.safe_load(open(unchanged_production.config_file))  # a key may be given once in a config
    settings["train"] = {**settings.get("train", {}), "epochs": 3, "learning_rate": 1.0e+38, "warmup_steps": 0,
                         "xla": "off", "precision": "mixed_float16"}
    config_file.write_text(yaml.safe_dump(settings))
    models_before = count_outputs(unchanged_production.config, "Trainer", contract.MODEL)

    code, stderr = _run(unchanged_production, unchanged_production.data_root, capsys, str(config_file))

    assert code == 1
    assert "TrainingDivergedError" in stderr and "at step " in stderr and "loss scaling cannot" in stderr, stderr
    assert count_outputs(unchanged_production.config, "Trainer", contract.MODEL) == models_before


# ---------------------------------------- a run killed midway (mid metadata write), and a second run meanwhile

KILLABLE_TRAINING = ("train: {epochs: 20, batch_size: 64, steps_per_execution: 1, input_probe_steps: 0, "
                     "checkpoint_min_seconds: 0, xla: 'off', precision: float32}\n")


@pytest.fixture(scope="module")
def interrupted(production, tmp_path_factory, tree_digest):
    """Starts `python -m pipeline run` on the production directory with a longer training. Once the trainer
    has written two checkpoints it freezes the run (SIGSTOP), tries a second run, kills the first
    (SIGKILL) and truncates its last training_metadata.json, as a kill in the middle of writing it would
    leave it. Then it runs again, as a user would after the kill, and records what that run did."""
    config_file = tmp_path_factory.mktemp("interrupted") / "config.yaml"
    config_file.write_text(taxi_config_text("evaluate: {absolute_bar: 0.8}\nexport: {latency_examples: 50}\n"
                                            + KILLABLE_TRAINING))
    config = load_config(str(config_file), data_root=production.data_root, output_dir=production.config.output_dir)
    command = [sys.executable, "-m", "pipeline", "run", "--config", str(config_file), "--data", production.data_root,
               "--output", config.output_dir]
    checkpoints = os.path.join(config.pipeline_root, "checkpoints", "Trainer", "*", BACKUP_METADATA)
    process = start_warm(command, cwd=os.getcwd(), stdout=os.devnull, stderr=os.devnull)
    try:  # whatever fails here, no stopped process is left holding the output directory
        deadline = time.monotonic() + 300
        while not _whole_json(glob.glob(checkpoints + ".bkp")):  # a second checkpoint began: the first is the .bkp pair
            assert process.poll() is None, "the run ended before its second checkpoint"
            assert time.monotonic() < deadline, "no second checkpoint within 300 s"
            time.sleep(0.05)
        process.send_signal(signal.SIGSTOP)  # frozen mid-training, still holding the output directory
        executions_before = _execution_count(config)
        second = run_warm(command, cwd=os.getcwd(), timeout=300)
        executions_meanwhile = _execution_count(config)
    finally:
        process.kill()  # SIGKILL ends a stopped process too
        process.wait()
    [metadata] = glob.glob(checkpoints)
    with open(metadata) as handle:
        whole = handle.read()
    with open(metadata, "w") as handle:
        handle.write(whole[: len(whole) // 2])

    from ml_metadata.proto import metadata_store_pb2
    state = metadata_store_pb2.Execution.State
    left_running = [e.id for e in _store(config).get_executions() if e.last_known_state == state.RUNNING]
    examples_before = count_outputs(config, "TFRecordIngest", contract.EXAMPLES)
    pushed_before = tree_digest(production.pushed_dir)
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = cli_main(["run", "--config", str(config_file), "--data", production.data_root,
                         "--output", config.output_dir])
    reports = sorted(glob.glob(os.path.join(config.pipeline_root, "Trainer", contract.MODEL_RUN, "*",
                                            contract.TRAINING_REPORT_FILE)), key=os.path.getmtime)
    return {"config": config, "pid": process.pid, "second": second,
            "executions": (executions_before, executions_meanwhile), "left_running": left_running,
            "restart": {"code": code, "stderr": stderr.getvalue(), "trainer_report": open(reports[-1]).read(),
                        "examples_added": count_outputs(config, "TFRecordIngest", contract.EXAMPLES) - examples_before,
                        "pushed_unchanged": tree_digest(production.pushed_dir) == pushed_before}}


def _whole_json(paths) -> bool:
    """True when the one file in `paths` holds complete JSON (Keras copies the weights to .bkp before it)."""
    import json
    try:
        with open(paths[0]) as handle:
            json.load(handle)
        return True
    except (IndexError, OSError, ValueError):
        return False


def _store(config):
    from ml_metadata.metadata_store import metadata_store
    from tfx.orchestration import metadata
    return metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(config.metadata_path))


def _execution_count(config):
    return len(_store(config).get_executions())


def test_a_second_run_on_the_same_output_is_refused_while_one_runs(interrupted):
    second = interrupted["second"]
    assert second.returncode == LOCKED_EXIT_CODE, second.stderr[-2000:]
    assert f"{LOCK_FILE}: another pipeline run is using" in second.stderr
    assert f"pid {interrupted['pid']}" in second.stderr  # names the holder
    before, meanwhile = interrupted["executions"]
    assert meanwhile == before  # the refused run wrote nothing to MLMD


def test_a_run_killed_mid_checkpoint_restarts_resumes_training_and_leaves_no_duplicate_or_orphan(interrupted):
    from ml_metadata.proto import metadata_store_pb2
    config, restart = interrupted["config"], interrupted["restart"]
    state = metadata_store_pb2.Execution.State
    assert len(interrupted["left_running"]) == 1  # the trainer the kill interrupted

    assert restart["code"] == 0, restart["stderr"]  # the truncated training metadata did not wedge it
    store = _store(config)
    executions = store.get_executions()
    assert not [e.id for e in executions if e.last_known_state in (state.NEW, state.RUNNING)]
    assert {e.id: e.last_known_state for e in executions}[interrupted["left_running"][0]] == state.CANCELED
    # Resumed: the restarted trainer began at the checkpoint before the torn one, not at step 0.
    assert '"resumed_from_step": 0' not in restart["trainer_report"]
    assert '"resumed_from_step"' in restart["trainer_report"]
    # No duplicate: ingestion and validation were reused from the cache, not run again.
    assert restart["examples_added"] == 0
    # No orphan: every output folder on disk is an artifact in MLMD, and every artifact's folder exists.
    uris = {os.path.normpath(a.uri) for a in store.get_artifacts()}
    folders = {os.path.normpath(p) for p in glob.glob(os.path.join(config.pipeline_root, "*", "*", "*"))
               if "/.system/" not in p and "/checkpoints/" not in p}
    assert folders - uris == set(), "output folders no artifact refers to"
    assert all(os.path.exists(uri) for uri in uris)
    # The model pushed before is byte-identical (a new version, if any, sits beside it).
    assert restart["pushed_unchanged"]


def test_concurrent_pushers_to_a_production_serving_dir_each_publish_a_whole_version(production, tmp_path,
                                                                                       tree_digest):
    """Two pushes of the production model race for one serving directory (a copy of production's): each
    publishes a whole, distinct version, and the version already served stays byte-identical."""
    import shutil

    from components.atomic_pusher.publish import versions

    serving = tmp_path / "serving"
    shutil.copytree(production.config.push_dir, serving)
    served = serving / os.path.basename(production.pushed_dir)
    before, existing = tree_digest(served), versions(str(serving))  # other fault tests may have pushed too
    files = {name: os.path.join(production.pushed_dir, name) for name in os.listdir(production.pushed_dir)}
    published = race_pushers(2, files, str(serving), timeout=300)
    assert len(set(published)) == 2 and versions(str(serving)) == existing + sorted(
        int(os.path.basename(path)) for path in published)
    assert tree_digest(served) == before
    assert {tree_digest(path) for path in published} == {tree_digest(production.pushed_dir)}  # whole copies
    assert not [name for name in os.listdir(serving) if name.startswith(".")]  # no staging left behind
