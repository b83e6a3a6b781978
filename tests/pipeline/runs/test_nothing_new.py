"""A run with nothing new since the last successful one (same data, config, schema and code) says so in one line
and exits 0 before TensorFlow, TFX or Beam load, touching nothing; any change, --force, or a last run that
failed or was killed means a real run. The light fingerprints stay equal to what the pipeline itself reads."""
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest

from components.tfrecord_ingest import spans
from components.tfrecord_ingest.spans import EDGE_BYTES
from pipeline.commands import cli
from pipeline.config import PROJECT_ROOT, ConfigError, load_config, read_config
from tests.config_text import required_keys
from tests.warm_python import run_warm
from pipeline.runs import nothing_new
from pipeline.runs.nothing_new import RECORD_FILE, code_digest, input_fingerprint, run_fingerprint

# The taxi model's config, less its data root (given with --data) and its schema (SCHEMA_LINE, or a copy's).
CONFIG_TEXT = ("pipeline_name: taxi-accel\ntrain: {model: models.taxi, epochs: 3}\nevaluate: {absolute_bar: 0.8}\n"
               "export: {latency_examples: 50}\n")
SCHEMA_LINE = f"schema_path: {os.path.join(PROJECT_ROOT, 'schemas', 'taxi', 'schema.pbtxt')}\n"
NOTHING_NEW = "nothing new since run "


def _write(path, size: int, seed: int = 0) -> str:
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(bytes((seed + i * 7) % 251 for i in range(size)))
    return str(path)


def _flip_byte_keeping_size_and_mtime(path: str, position: int) -> None:
    stat = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(position)
        byte = handle.read(1)
        handle.seek(position)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def test_the_light_input_fingerprint_is_ingestions_own_as_the_data_changes(tmp_path, monkeypatch):
    """Read without TensorFlow, a local data root gets the digest tf.io.gfile's reads give it (the file
    operations of a URI), whatever changes."""
    root = tmp_path / "data"
    _write(root / "span-1" / "a.tfrecord.gz", 3 * EDGE_BYTES)
    _write(root / "span-1" / "b.tfrecord.gz", 1000, seed=1)
    seen = []
    light_filesystem = spans.file_system

    def fingerprint_input(data_root, window=1):  # every file operation through tf.io.gfile, as for gs:// or s3://
        with monkeypatch.context() as patch:
            patch.setattr(spans, "file_system", lambda path: light_filesystem("gs://" + path))
            return spans.fingerprint_input(data_root, window)

    def same_as_ingestion() -> str:
        for window in (1, 2, 3):
            assert input_fingerprint(str(root), window) == fingerprint_input(str(root), window), window
        seen.append(input_fingerprint(str(root)))
        return seen[-1]

    first = same_as_ingestion()
    assert same_as_ingestion() == first  # stable
    _write(root / "span-1" / ".hidden", 10)
    _write(root / "span-1" / "_SUCCESS", 0)
    assert same_as_ingestion() == first  # files ingestion skips
    for position in (10, 3 * EDGE_BYTES - 10):  # the first and last edge, same size, same mtime
        _flip_byte_keeping_size_and_mtime(str(root / "span-1" / "a.tfrecord.gz"), position)
        assert same_as_ingestion() not in seen[:-1]
    stat = os.stat(root / "span-1" / "b.tfrecord.gz")
    os.utime(root / "span-1" / "b.tfrecord.gz", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5 * 10**9))  # touched
    assert same_as_ingestion() not in seen[:-1]
    _write(root / "span-1" / "c.tfrecord.gz", 500, seed=2)  # a new file in the span
    assert same_as_ingestion() not in seen[:-1]
    _write(root / "span-2" / "a.tfrecord.gz", 2000, seed=3)  # a new span
    assert same_as_ingestion() not in seen[:-1]
    _write(root / "span-10" / "a.tfrecord.gz", 2000, seed=3)  # spans sort by number
    assert same_as_ingestion() not in seen[:-1]
    flat = tmp_path / "flat"  # a root without span folders is span 0
    _write(flat / "x.tfrecord", 100)
    assert input_fingerprint(str(flat)) == fingerprint_input(str(flat))
    assert input_fingerprint(str(tmp_path / "missing")) is None and input_fingerprint("gs://bucket/data") is None
    os.makedirs(root / "span-11")  # a latest span with no files: ingestion refuses it, so no decision here
    assert input_fingerprint(str(root)) is None


@pytest.mark.parametrize("text, overrides", [
    (required_keys(), {}),
    (CONFIG_TEXT + "data_root: ../data\nschema_path: schema.pbtxt\n", {"output_dir": "file:///tmp/somewhere"}),
    ("pipeline_name: p\nschema_path: s.pbtxt\ntrain: {model: models.penguins, learning_rate: 1e-3}\n"
     "ingest: {span_window: 2}\n", {"data_root": "d"}),
])
def test_the_config_the_check_reads_is_load_config_without_its_references(tmp_path, text, overrides):
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "c.yaml"
    path.write_text(text)
    assert read_config(str(path), **overrides) == load_config(str(path), check_references=False, **overrides)


@pytest.mark.parametrize("text, key", [("train: {epochs: -1}\n", "train.epochs"), ("train: {epoch: 2}\n", "train.epoch"),
                                       ("train: [\n", "line 2"),
                                       ("beam_pipeline_args: ['--s3_secret_access_key=x']\n", "beam_pipeline_args")])
def test_a_config_error_is_named_by_the_one_read_before_any_check(tmp_path, text, key):
    (tmp_path / "c.yaml").write_text(text)
    with pytest.raises(ConfigError, match=re.escape(key)):
        read_config(str(tmp_path / "c.yaml"))


@pytest.fixture
def setup(tmp_path, monkeypatch, taxi_span_root):
    """A data root, a schema copy, a model module outside the project and a config naming them."""
    data = tmp_path / "data"
    shutil.copytree(os.path.join(taxi_span_root, "span-1"), data / "span-1")
    schema = tmp_path / "schema.pbtxt"
    shutil.copyfile(os.path.join(PROJECT_ROOT, "schemas", "taxi", "schema.pbtxt"), schema)
    models = tmp_path / "model_code"
    models.mkdir()
    shutil.copyfile(os.path.join(PROJECT_ROOT, "models", "taxi.py"), models / "my_nothing_new_model.py")
    monkeypatch.syspath_prepend(str(models))
    config_file = tmp_path / "config.yaml"
    config_file.write_text(CONFIG_TEXT.replace("model: models.taxi", "model: my_nothing_new_model")
                           + f"schema_path: {schema}\n")
    return {"data": data, "schema": schema, "model": models / "my_nothing_new_model.py", "config": config_file,
            "output": tmp_path / "out"}


def _fingerprint(setup, **overrides):
    return run_fingerprint(read_config(str(setup["config"]), data_root=str(setup["data"]),
                                       output_dir=str(setup["output"]), **overrides))


def test_the_fingerprint_changes_with_the_data_a_span_the_config_the_schema_and_the_code(setup, tmp_path):
    base = _fingerprint(setup)
    assert set(base) == {"data", "config", "schema", "code"} and _fingerprint(setup) == base

    def changed() -> set:
        now = _fingerprint(setup)
        return {part for part in base if now[part] != base[part]}

    [shard, *_] = sorted((setup["data"] / "span-1").iterdir())
    _flip_byte_keeping_size_and_mtime(str(shard), os.path.getsize(shard) - 5)  # a data file's bytes
    assert changed() == {"data"}
    base = _fingerprint(setup)
    shutil.copytree(setup["data"] / "span-1", setup["data"] / "span-2")  # a new span
    assert changed() == {"data"}
    base = _fingerprint(setup)
    assert {part for part, value in _fingerprint(setup, serving_dir=str(tmp_path / "s")).items()
            if value != base[part]} == {"config"}  # an override
    setup["config"].write_text(setup["config"].read_text().replace("epochs: 3}\n", "epochs: 4}\n"))
    assert changed() == {"config"}
    base = _fingerprint(setup)
    setup["schema"].write_text(setup["schema"].read_text() + "\n")
    assert changed() == {"schema"}
    base = _fingerprint(setup)
    setup["model"].write_text(setup["model"].read_text() + "\n# a change to the model module\n")
    assert changed() == {"code"}
    base = _fingerprint(setup)
    (setup["model"].parent / "helpers.py").write_text("X = 1\n")  # a module beside it
    assert changed() == {"code"}
    assert run_fingerprint(read_config(str(setup["config"]), data_root=str(setup["data"]),
                                       enable_cache=False)) is None  # no cache: every run retrains


def test_the_code_digest_covers_every_project_file_and_not_caches(tmp_path):
    package = tmp_path / "pkg"
    _write(package / "__init__.py", 0)
    _write(package / "sub" / "step.py", 40)
    digest = code_digest("no_such_model_module", roots=(str(package),))
    assert code_digest("no_such_model_module", roots=(str(package),)) == digest
    _write(package / "__pycache__" / "step.cpython-311.pyc", 40)
    _write(package / "sub" / "notes.txt", 40)
    assert code_digest("no_such_model_module", roots=(str(package),)) == digest
    _write(package / "sub" / "step.py", 40, seed=1)
    assert code_digest("no_such_model_module", roots=(str(package),)) != digest
    assert nothing_new.module_file("models.taxi") == os.path.join(PROJECT_ROOT, "models", "taxi.py")
    assert nothing_new.module_file("models") == os.path.join(PROJECT_ROOT, "models", "__init__.py")


# ------------------------------------------------------------------------------- the check on an output dir

def _fake_store(path, runs: list[str], states: list[int]) -> None:
    """The tables of an MLMD SQLite store that the check reads: pipeline_run contexts and execution states."""
    with sqlite3.connect(path) as store:
        store.execute("CREATE TABLE Type (id INTEGER PRIMARY KEY, name VARCHAR(255))")
        store.execute("CREATE TABLE Context (id INTEGER PRIMARY KEY, type_id INT, name VARCHAR(255))")
        store.execute("CREATE TABLE Execution (id INTEGER PRIMARY KEY, last_known_state INT)")
        store.executemany("INSERT INTO Type (id, name) VALUES (?, ?)", [(1, "pipeline"), (2, "pipeline_run")])
        store.executemany("INSERT INTO Context (type_id, name) VALUES (2, ?)", [(run,) for run in runs])
        store.executemany("INSERT INTO Execution (last_known_state) VALUES (?)", [(state,) for state in states])


def _snapshot(folder) -> dict:
    return {os.path.join(d, n): os.stat(os.path.join(d, n)).st_mtime_ns for d, _, names in os.walk(folder)
            for n in names}


def _check(setup, **overrides):
    return nothing_new.check(read_config(str(setup["config"]), data_root=str(setup["data"]),
                                         output_dir=str(setup["output"]), **overrides))


def test_the_check_says_nothing_new_only_after_this_very_run_and_touches_nothing(setup):
    assert _check(setup) is None  # no output directory yet
    output = setup["output"]
    output.mkdir()
    _fake_store(output / "metadata.sqlite", ["run-1", "run-2"], [3, 5, 3])
    assert _check(setup) is None  # no record
    config = read_config(str(setup["config"]), data_root=str(setup["data"]), output_dir=str(output))
    nothing_new.record_run(config, run_fingerprint(config), "run-2")
    before = _snapshot(output)
    assert _check(setup) == ("nothing new since run run-2 (same data, config, schema and code): nothing to do; "
                             "--force runs anyway")
    assert _snapshot(output) == before
    assert _check(setup, serving_dir=str(output / "elsewhere")) is None  # a changed override
    nothing_new.record_run(config, run_fingerprint(config), "run-1")
    assert _check(setup) is None  # MLMD's newest run is not the recorded one
    os.remove(output / "metadata.sqlite")
    _fake_store(output / "metadata.sqlite", ["run-1"], [3, 2])
    assert _check(setup) is None  # an execution left RUNNING by a killed run: the next run recovers it
    os.remove(output / "metadata.sqlite")
    assert _check(setup) is None  # no store
    _fake_store(output / "metadata.sqlite", ["run-1"], [3, 5])
    assert _check(setup) is not None
    import fcntl
    directory = os.open(output, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as a run holds it (run_guard.exclusive_run)
        assert _check(setup) is None  # the full path then refuses, exit 75
    finally:
        os.close(directory)
    nothing_new.forget_last_run(config)
    assert _check(setup) is None and not (output / RECORD_FILE).exists()


LIGHT_PROCESS = """
import json, sys
from pipeline.config import read_config
from pipeline.runs.nothing_new import check
line = check(read_config(sys.argv[1], data_root=sys.argv[2], output_dir=sys.argv[3]))
heavy = sorted(name for name in ("tensorflow", "tfx", "apache_beam", "keras", "ml_metadata") if name in sys.modules)
print(json.dumps({"line": line, "heavy": heavy}))
"""


def test_the_check_imports_no_tensorflow_tfx_or_beam(setup):
    setup["output"].mkdir()
    _fake_store(setup["output"] / "metadata.sqlite", ["run-1"], [3])
    config = read_config(str(setup["config"]), data_root=str(setup["data"]), output_dir=str(setup["output"]))
    nothing_new.record_run(config, run_fingerprint(config), "run-1")
    result = subprocess.run([sys.executable, "-c", LIGHT_PROCESS, str(setup["config"]), str(setup["data"]),
                             str(setup["output"])], capture_output=True, text=True, timeout=120, cwd=PROJECT_ROOT,
                            env={**os.environ, "PYTHONPATH": str(setup["model"].parent)})
    assert result.returncode == 0, result.stderr
    outcome = json.loads(result.stdout)
    assert outcome["line"] and outcome["line"].startswith(NOTHING_NEW + "run-1 ") and outcome["heavy"] == []


# ----------------------------------------------------------------------------------- the command's run path

def test_force_skips_the_check(setup, monkeypatch):
    asked = []
    monkeypatch.setattr(nothing_new, "check", lambda *a, **k: asked.append(1) or "nothing new since run x")
    def stop(read):  # right after the check
        raise ConfigError("stopped after the check")

    monkeypatch.setattr("pipeline.config.with_references_checked", stop)
    argv = ["run", "--config", str(setup["config"]), "--data", str(setup["data"]), "--output", str(setup["output"])]
    assert cli.main(argv) == 0 and asked == [1]
    assert cli.main(argv + ["--force"]) == 2 and asked == [1]
    assert cli.main(["demo", *argv[1:], "--force"]) == 2 and asked == [1]


@pytest.mark.parametrize("ending", [1, 2, KeyboardInterrupt])
def test_a_run_that_fails_or_is_interrupted_leaves_no_record(setup, monkeypatch, ending):
    setup["output"].mkdir()
    config = read_config(str(setup["config"]), data_root=str(setup["data"]), output_dir=str(setup["output"]))
    nothing_new.record_run(config, {"data": "stale"}, "run-0")

    def run_and_report(*args, **kwargs):
        assert not (setup["output"] / RECORD_FILE).exists()  # forgotten as the run starts
        if ending is KeyboardInterrupt:
            raise KeyboardInterrupt
        return ending

    monkeypatch.setattr(cli, "_run_and_report", run_and_report)
    argv = ["run", "--config", str(setup["config"]), "--data", str(setup["data"]), "--output", str(setup["output"])]
    if ending is KeyboardInterrupt:
        with pytest.raises(KeyboardInterrupt):
            cli.main(argv)
    else:
        assert cli.main(argv) == ending
    assert not (setup["output"] / RECORD_FILE).exists()


# ------------------------------------------------------------------------------------------------- end to end

def _execution_count(output) -> int:
    with sqlite3.connect(f"file:{output / 'metadata.sqlite'}?mode=ro", uri=True) as store:
        return store.execute("SELECT COUNT(*) FROM Execution").fetchone()[0]


def _cli_run(config_file, data, output, warm=False):
    """`python -m pipeline run` in a new process (`warm`: forked from an interpreter that has imported TensorFlow,
    TFX and Beam, tests/warm_python.py). Output: (exit code, stdout, stderr, wall seconds)."""
    started = time.perf_counter()
    command = [sys.executable, "-m", "pipeline", "run", "--config", str(config_file), "--data", str(data),
               "--output", str(output)]
    result = (run_warm(command, cwd=PROJECT_ROOT, timeout=900) if warm else
              subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=PROJECT_ROOT))
    return result.returncode, result.stdout, result.stderr, time.perf_counter() - started


@pytest.mark.e2e
def test_a_rerun_with_nothing_new_exits_0_at_once_and_a_changed_config_runs(taxi_span_root, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(os.path.join(taxi_span_root, "span-1"), data / "span-1")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(CONFIG_TEXT + SCHEMA_LINE)
    output = tmp_path / "out"

    code, out, err, cold = _cli_run(config_file, data, output, warm=True)  # its imports' seconds left out
    assert code == 0, err
    assert NOTHING_NEW not in out
    record = json.loads((output / RECORD_FILE).read_text())
    executions = _execution_count(output)
    report = output / "run_report.html"
    report_before = (report.read_bytes(), os.stat(report).st_mtime_ns)
    files_before = _snapshot(output)

    code, out, err, noop = _cli_run(config_file, data, output)
    print(f"\ncold run {cold:.1f} s, nothing-new re-run {noop:.2f} s ({100 * noop / cold:.1f}% of cold)")
    assert code == 0, err
    assert out == (f"nothing new since run {record['run_id']} (same data, config, schema and code): nothing to do; "
                   f"--force runs anyway\n")
    assert noop < 0.1 * cold, (noop, cold)
    assert _execution_count(output) == executions  # no new MLMD run
    assert (report.read_bytes(), os.stat(report).st_mtime_ns) == report_before  # the previous report stays
    assert _snapshot(output) == files_before  # nothing touched at all

    config_file.write_text(CONFIG_TEXT.replace("epochs: 3", "epochs: 2") + SCHEMA_LINE)
    code, out, err, changed = _cli_run(config_file, data, output, warm=True)
    print(f"after a config change: a real run, {changed:.1f} s")
    assert code == 0, err
    assert NOTHING_NEW not in out and "Run summary" in out
    assert _execution_count(output) > executions
    new_record = json.loads((output / RECORD_FILE).read_text())
    assert new_record["run_id"] != record["run_id"]
    assert new_record["fingerprint"]["config"] != record["fingerprint"]["config"]
