"""The command line under bad input and failure: config errors exit 2 naming the file and line or
the key, --verbose shows an unexpected error's traceback, a run that never started writes a report of its
own under the run lock and leaves other runs' reports alone, the lock survives its holder file being deleted,
and a quiet command line drops native INFO lines from stderr."""
import os
import re
import subprocess
import sys
import textwrap

import pytest

from pipeline.runs import run_report
from pipeline.commands.cli import main as cli_main
from pipeline.config import PROJECT_ROOT, load_config
from tests.config_text import required_keys, taxi_config_text
from pipeline.runs.run_facts import NOT_STARTED_PREFIX
from pipeline.runs.run_guard import LOCK_FILE, RunLockedError, exclusive_run


def _run(capsys, tmp_path, *extra, data=None):
    """`python -m pipeline run` in this process on tmp_path/out. Output: (exit code, stdout, stderr)."""
    capsys.readouterr()
    code = cli_main(["run", "--data", str(data or tmp_path / "no-data"), "--output", str(tmp_path / "out"), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("text, expected", [
    ("train:\n  epochs: 2\n  batch_size: 64: 3\n", r"bad\.yaml: line 3, column 17: not valid YAML"),
    (required_keys() + "train:\n  model: models.no_such_model\n", r"train\.model: cannot import 'models\.no_such_model'"),
    ("pipeline_name: p\ndata_root: d\nschema_path: /nowhere/schema.pbtxt\n",
     r"schema_path: /nowhere/schema\.pbtxt: cannot be read"),
    ("data_root: d\nschema_path: s.pbtxt\n", r"bad\.yaml: pipeline_name is required"),
    # a name the run's MLMD contexts, TFX or the compile cannot take: refused at load, not at run time
    ("pipeline_name: shop.v2\ndata_root: d\nschema_path: s.pbtxt\n", r"pipeline_name: must be 1 to 63 letters"),
    (f"pipeline_name: {'x' * 64}\ndata_root: d\nschema_path: s.pbtxt\n", r"pipeline_name: must be 1 to 63 letters"),
])
def test_bad_config_exits_2_naming_the_file_line_or_key(capsys, tmp_path, text, expected):
    (tmp_path / "bad.yaml").write_text(text)
    code, _, stderr = _run(capsys, tmp_path, "--config", str(tmp_path / "bad.yaml"))
    assert code == 2
    assert re.search(rf"^config error: .*{expected}", stderr, re.MULTILINE), stderr
    assert "Traceback" not in stderr and not (tmp_path / "out").exists()  # nothing ran, nothing written


@pytest.mark.parametrize("command", ["run", "compile"])
@pytest.mark.parametrize("flag", ["--s3_secret_access_key=abc123", "--s3_access_key_id=AKIA123",
                                  "--s3_session_token=t0k3n"])
def test_a_beam_flag_carrying_a_credential_exits_2_naming_it_and_is_never_written(capsys, tmp_path, command, flag):
    (tmp_path / "c.yaml").write_text(f"beam_pipeline_args: [--direct_running_mode=in_memory, {flag}]\n")
    capsys.readouterr()
    common = ["--config", str(tmp_path / "c.yaml"), "--data", "s3://b/data"]
    if command == "run":
        code = cli_main(["run", *common, "--output", str(tmp_path / "out")])
    else:
        code = cli_main(["compile", *common, "--image", "i", "--pipeline-root", "s3://b/root",
                         "--serving-dir", "s3://b/serving", "--output", str(tmp_path / "job.json")])
    stderr = capsys.readouterr().err
    assert code == 2
    assert re.search(rf"^config error: beam_pipeline_args: {re.escape(flag.split('=')[0])} carries a credential",
                     stderr, re.MULTILINE), stderr
    assert flag.split("=")[1] not in stderr  # the value itself is never echoed
    assert not (tmp_path / "job.json").exists() and not (tmp_path / "out").exists()


def test_a_name_kubeflow_cannot_take_exits_2_before_the_compile_and_a_local_run_takes_it(capsys, tmp_path):
    (tmp_path / "c.yaml").write_text(taxi_config_text("pipeline_name: My_shop\n"))
    capsys.readouterr()
    code = cli_main(["compile", "--config", str(tmp_path / "c.yaml"), "--data", "gs://b/data", "--image", "i",
                     "--pipeline-root", "gs://b/root", "--output", str(tmp_path / "job.json")])
    assert code == 2 and ("config error: pipeline_name: 'My_shop': Kubeflow Pipelines names a pipeline with lowercase "
                          "letters, digits and '-' only; give one such as 'my-shop' to compile"
                          ) in capsys.readouterr().err
    assert not (tmp_path / "job.json").exists()
    assert load_config(str(tmp_path / "c.yaml"), check_references=False).pipeline_name == "My_shop"


def test_an_object_store_output_directory_exits_2_and_creates_no_local_folder(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert cli_main(["run", "--data", str(tmp_path), "--output", "s3://bucket/x"]) == 2
    assert "config error: output_dir: 's3://bucket/x' must be a local path" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []  # no ./s3: folder holding MLMD


def test_file_uris_are_the_local_paths_they_name(tmp_path):
    config = load_config(check_references=False, output_dir=f"file://{tmp_path}/out",
                         serving_dir=f"file://{tmp_path}/serving", data_root=f"file://{tmp_path}/data")
    assert (config.output_dir, config.push_dir, config.data_root) == (
        f"{tmp_path}/out", f"{tmp_path}/serving", f"{tmp_path}/data")
    assert config.metadata_path == f"{tmp_path}/out/metadata.sqlite"


def test_demo_data_on_a_uri_is_written_once(monkeypatch):
    """`demo --data <URI>`: span-1 is looked up through the filesystem layer, so a second run finds it (and
    its input fingerprint, and so the cache, stays the same) instead of rewriting it every time."""
    from tfx.dsl.io import fileio

    from pipeline.commands import cli

    written = []

    def write_span(root):
        written.append(root)
        fileio.makedirs(root + "/span-1")

    monkeypatch.setattr(cli, "write_bundled_span", write_span)
    assert cli.ensure_demo_data("ram://demo-data") is True
    assert cli.ensure_demo_data("ram://demo-data") is False
    assert written == ["ram://demo-data"]


def test_an_artifact_root_claimed_by_another_output_directory_is_refused_before_anything_runs(capsys, tmp_path):
    """Two output directories (two SQLite stores, each numbering executions from 1) on one artifact root would
    write into, and on recovery delete, each other's folders: the second is refused, exit 2, naming both."""
    from pipeline.runs.run_guard import ROOT_OWNER_FILE, claim_pipeline_root, exclusive_run

    shared_root = tmp_path / "artifacts"
    first = load_config(check_references=False, output_dir=str(tmp_path / "first"), artifact_root=str(shared_root))
    with exclusive_run(first.output_dir):
        claim_pipeline_root(first)
        claim_pipeline_root(first)  # its own root: claimed again without complaint
    left_running = shared_root / "Trainer" / "model" / "1"  # what a killed run of the first store left
    left_running.mkdir(parents=True)
    owner = (shared_root / ROOT_OWNER_FILE).read_text()

    capsys.readouterr()
    code = cli_main(["run", "--data", str(tmp_path / "no-data"), "--output", str(tmp_path / "second"),
                     "--pipeline-root", str(shared_root)])
    stderr = capsys.readouterr().err
    assert code == 2
    assert f"config error: artifact root {shared_root} belongs to the metadata store of {tmp_path / 'first'}" in stderr
    assert left_running.is_dir() and (shared_root / ROOT_OWNER_FILE).read_text() == owner
    assert not (tmp_path / "second" / "metadata.sqlite").exists()


def test_verbose_shows_the_traceback_of_an_unexpected_error(capsys, tmp_path, monkeypatch):
    def broken_run(config, verbose=False):
        raise RuntimeError("a bug somewhere deep")

    monkeypatch.setattr("pipeline.dag.local_runner.run_locked", broken_run)
    code, _, quiet = _run(capsys, tmp_path)
    assert code == 1 and "Traceback" not in quiet
    assert "pipeline failed: RuntimeError: a bug somewhere deep (--verbose shows the traceback)" in quiet
    code, _, verbose = _run(capsys, tmp_path, "--verbose")
    assert code == 1
    assert "Traceback (most recent call last):" in verbose and "in broken_run" in verbose
    assert "pipeline failed: RuntimeError: a bug somewhere deep" in verbose


def _fake_previous_run(config, run_id="2026-11-21T10:00:00.000000"):
    """Records in MLMD a finished run of one step (TFRecordIngest), as a real run would have left it."""
    from ml_metadata.metadata_store import metadata_store
    from ml_metadata.proto import metadata_store_pb2 as mlmd
    from tfx.orchestration import metadata

    os.makedirs(config.output_dir, exist_ok=True)
    store = metadata_store.MetadataStore(metadata.sqlite_metadata_connection_config(config.metadata_path))
    types = {name: store.put_context_type(mlmd.ContextType(name=name)) for name in ("pipeline", "pipeline_run", "node")}
    contexts = store.put_contexts([
        mlmd.Context(type_id=types["pipeline"], name=config.pipeline_name),
        mlmd.Context(type_id=types["pipeline_run"], name=run_id),
        mlmd.Context(type_id=types["node"], name=f"{config.pipeline_name}.TFRecordIngest")])
    [execution] = store.put_executions([mlmd.Execution(
        type_id=store.put_execution_type(mlmd.ExecutionType(name="TFRecordIngest")),
        last_known_state=mlmd.Execution.COMPLETE)])
    store.put_attributions_and_associations(
        [], [mlmd.Association(context_id=context, execution_id=execution) for context in contexts])
    return run_id


def test_a_run_that_never_started_writes_its_own_report_and_leaves_the_previous_one(capsys, tmp_path):
    config = load_config(output_dir=str(tmp_path / "out"), data_root=str(tmp_path / "no-data"))
    previous_id = _fake_previous_run(config)
    assert run_report.write_run_report(config, None) is not None
    previous_page = os.path.join(config.output_dir, run_report.REPORTS_DIR, f"{previous_id.replace(':', '_')}.html")
    previous_bytes = open(previous_page, "rb").read()

    code, _, stderr = _run(capsys, tmp_path)  # the data directory does not exist: create_pipeline raises

    assert code == 2 and "data error:" in stderr and "does not exist" in stderr, stderr
    assert open(previous_page, "rb").read() == previous_bytes
    pages = sorted(os.listdir(os.path.join(config.output_dir, run_report.REPORTS_DIR)))
    [own] = [page for page in pages if page.startswith(NOT_STARTED_PREFIX)]
    assert len(pages) == 2
    text = open(os.path.join(config.output_dir, run_report.REPORTS_DIR, own)).read()
    assert "NEVER STARTED: data error:" in text and "This run never started" in text
    assert previous_id not in text
    assert open(os.path.join(config.output_dir, run_report.REPORT_FILE)).read() == text  # the latest attempt
    assert f"run report: {os.path.join(config.output_dir, run_report.REPORT_FILE)}" in stderr


def test_the_report_is_written_while_the_run_still_holds_the_output_directory(capsys, tmp_path, monkeypatch):
    held = []
    write = run_report.write_run_report

    def write_and_check_the_lock(config, error=None, known_runs=None, facts=None):
        try:
            with exclusive_run(config.output_dir):
                held.append(False)
        except RunLockedError:
            held.append(True)
        return write(config, error, known_runs, facts)

    monkeypatch.setattr(run_report, "write_run_report", write_and_check_the_lock)
    code, _, _ = _run(capsys, tmp_path)
    assert code == 2 and held == [True]  # no data: an input error (exit 2), reported under the lock


def test_deleting_the_holder_file_lets_no_second_run_in(tmp_path):
    output = str(tmp_path / "out")
    with exclusive_run(output):
        holder = open(os.path.join(output, LOCK_FILE)).read()
        assert holder.startswith(f"pid {os.getpid()}, started ")
        with pytest.raises(RunLockedError, match=rf"another pipeline run is using {re.escape(output)} \(pid {os.getpid()},"):
            with exclusive_run(output):
                pass
        os.remove(os.path.join(output, LOCK_FILE))  # a user "cleaning up" mid-run
        with pytest.raises(RunLockedError, match=r"\(unknown process\)"):
            with exclusive_run(output):
                pass
    with exclusive_run(output):  # released with its holder
        pass


QUIET_PROCESS = textwrap.dedent("""
    import os, sys
    from pipeline.commands import cli, stderr_filter
    cli.quiet_logs(verbose=False)
    stderr_filter.drop_native_info_lines()
    import tensorflow as tf
    print(float(tf.function(lambda x: tf.reduce_sum(tf.matmul(x, x)), jit_compile=True)(tf.ones((8, 8)))))
    print("python: a message for the user", file=sys.stderr, flush=True)
    os.write(2, b"E0000 00:00:1795322458.188568    8328 fake.cc:12] a native error stays visible\\n")
    os.write(2, b"F0000 00:00:1795322458.188568    8328 fake.cc:13] and so does the last word of a crash\\n")
    os.abort()
""")


def test_the_line_filter_drops_only_native_info_and_warning_lines():
    import io

    from pipeline.commands import stderr_filter

    lines = [b"I0000 00:00:1795322458.188568    8328 service.cc:145] XLA service 0x5 initialized\n",
             b"W0000 00:00:1795322458.2    8328 gpu_timer.cc:114] Skipping the delay kernel\n",
             b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n",
             b"2026-11-28 17:14:17.400006: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:479] Unable to "
             b"register cuFFT factory: Attempting to register factory for plugin cuFFT when one has already been "
             b"registered\n",
             b"2026-11-28 17:14:17.441082: E external/local_xla/xla/stream_executor/cuda/cuda_dnn.cc:10575] Unable to "
             b"register cuDNN factory: Attempting to register factory for plugin cuDNN when one has already been "
             b"registered\n",
             b"E0000 00:00:1795322458.188568    8328 fake.cc:12] a native error\n",
             b"2026-11-28 17:14:18.1: E tensorflow/core/fake.cc:7] Unable to open the file the user named\n",
             b"I think this line is the user's own\n", b"python: a message\n"]
    target = io.BytesIO()
    stderr_filter.copy_lines(io.BytesIO(b"".join(lines)), target, stderr_filter.NATIVE_INFO_LINE)
    assert target.getvalue() == b"".join(lines[5:])


@pytest.mark.slow
def test_a_quiet_command_line_drops_native_info_lines_but_not_errors_even_on_a_crash():
    result = subprocess.run([sys.executable, "-c", QUIET_PROCESS], capture_output=True, text=True, timeout=300,
                            cwd=PROJECT_ROOT, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert result.returncode == -6 and result.stdout.strip() == "512.0", result.stdout + result.stderr
    stderr = result.stderr
    assert "XLA service" not in stderr and "Compiled cluster using XLA" not in stderr, stderr
    assert "absl::InitializeLog" not in stderr and not re.search(r"^I\d{4} ", stderr, re.MULTILINE), stderr
    assert stderr.splitlines()[-3:] == [
        "python: a message for the user",
        "E0000 00:00:1795322458.188568    8328 fake.cc:12] a native error stays visible",
        "F0000 00:00:1795322458.188568    8328 fake.cc:13] and so does the last word of a crash"], stderr
