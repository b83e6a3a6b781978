"""Nothing new since the last successful run: decided from fingerprints before TensorFlow, TFX or Beam load.

A scheduled `run` with the same data, config, schema and code as the last run that succeeded would only
find every step cached, after seconds of importing TensorFlow, TFX and Beam and starting LocalDagRunner.
`check(...)` decides that case with the standard library, YAML and the project's own light modules, and
touches nothing: no MLMD run, no report, no lock file.

The fingerprint (`run_fingerprint`) has four parts:
  data    the spans ingestion would read now: components.tfrecord_ingest.spans.fingerprint_input, the
          digest ingestion records (a local data root is read without TensorFlow);
  config  dataclasses.asdict of the config, as read_config reads it (references unchecked);
  schema  the schema file's bytes;
  code    every .py file of the project's components/, models/ and pipeline/, and the model module's
          file (and a task of one's own's) and the .py files beside it (`code_digest`). Not pipeline.runs.code_fingerprint.code_fingerprint:
          it finds modules with importlib.util.find_spec, which imports the parent of each name it resolves
          (`from components.trainer.vertex import VertexTrainer` imports components.trainer.vertex, so TFX,
          TensorFlow and the Vertex AI SDK): seconds of imports. Broader than the steps' own digests, so a change
          to any project file means a real run (its unchanged steps then come from TFX's cache).

`<output_dir>/last_run.json` holds the fingerprint and the run id of the last run, written only when that
run ended with exit 0 (blessed or not) and removed when any run starts: a run that failed or was killed
leaves no record, and the next one runs for real. A record counts only while MLMD's newest run is that run
and no execution is left unfinished (read from its SQLite file, read-only). Anything this module cannot
decide cheaply (a data root, schema or output on an object store, caching off, a config error, a missing
file) means "run", as before.
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime
import fcntl
import hashlib
import json
import os
import sqlite3
import sys
from typing import Iterator

from pipeline.config import PROJECT_ROOT, PipelineConfig, user_code
from components.tfrecord_ingest.spans import IngestionError, fingerprint_input

RECORD_FILE = "last_run.json"
CODE_DIRS = tuple(os.path.join(PROJECT_ROOT, name) for name in ("components", "models", "pipeline"))
# MLMD's Execution.State values for an execution not finished (NEW, RUNNING).
UNFINISHED_STATES = (1, 2)


def input_fingerprint(data_root: str, window: int = 1) -> str | None:
    """The fingerprint of the spans ingestion would read now (components.tfrecord_ingest.spans, which reads a
    local data root without TensorFlow). None for a URI, or input that ingestion would refuse (no such
    folder, no files, a window below 1)."""
    if "://" in data_root:
        return None
    try:
        return fingerprint_input(data_root, window)
    except (IngestionError, OSError):
        return None


def run_fingerprint(config: PipelineConfig) -> dict[str, str] | None:
    """{"data", "config", "schema", "code"}: digests of what a run of `config` would read now. None when
    they cannot be taken without TensorFlow (data or schema on an object store, missing files) or would
    not decide anything (caching off: every run retrains)."""
    if not config.enable_cache or "://" in config.schema_path:
        return None
    data = input_fingerprint(config.data_root, config.ingest.span_window)
    if data is None:
        return None
    try:
        with open(config.schema_path, "rb") as handle:
            schema = hashlib.sha256(handle.read()).hexdigest()[:16]
    except OSError:
        return None
    settings = json.dumps(dataclasses.asdict(config), sort_keys=True, default=str)
    return {"data": data, "config": hashlib.sha256(settings.encode()).hexdigest()[:16], "schema": schema,
            "code": code_digest(*user_code(config))}


def code_digest(*user_modules: str, roots: tuple[str, ...] = CODE_DIRS) -> str:
    """A 16-hex-digit digest of every .py file under `roots` and of each user module's file (the model module, a
    task of one's own) and the .py files in its folder (found on sys.path without importing anything), each
    with its path."""
    files = set()
    for root in roots:
        for folder, subfolders, names in os.walk(root):
            subfolders[:] = sorted(name for name in subfolders if name != "__pycache__")
            files.update(os.path.join(folder, name) for name in names if name.endswith(".py"))
    for user_file in filter(None, map(module_file, user_modules)):
        folder = os.path.dirname(user_file)
        files.update(os.path.join(folder, name) for name in os.listdir(folder) if name.endswith(".py"))
    digest = hashlib.sha256()
    for path in sorted(files):
        with open(path, "rb") as handle:
            digest.update(path.encode() + b"\0" + handle.read() + b"\0")
    return digest.hexdigest()[:16]


def module_file(name: str) -> str | None:
    """The source file `import name` would load from sys.path (a module's .py, a package's __init__.py),
    found by path, without running any package's __init__; None when there is none."""
    parts = name.split(".")
    for entry in sys.path:
        base = os.path.join(entry or os.getcwd(), *parts)
        for candidate in (os.path.join(base, "__init__.py"), base + ".py"):
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
    return None


def check(config: PipelineConfig) -> str | None:
    """Input: the run's config (pipeline.config.read_config's, references unchecked). Output: the line to print
    when nothing is new since the last successful run (same data, config, schema and code, and MLMD's newest
    run is that run, finished), else None: then the caller runs the pipeline. Touches nothing; never imports
    TensorFlow."""
    if not os.path.isdir(config.output_dir):
        return None
    with _shared_lock(config.output_dir) as held:
        if not held:  # a run holds the directory: the full path says so (exit 75)
            return None
        record = read_record(config)
        if not record or not record.get("run_id") or not record.get("fingerprint"):
            return None
        if not _newest_finished_run(config.metadata_path, record["run_id"]):
            return None
        if run_fingerprint(config) != record["fingerprint"]:
            return None
    return (f"nothing new since run {record['run_id']} (same data, config, schema and code): nothing to do; "
            f"--force runs anyway")


@contextlib.contextmanager
def _shared_lock(output_dir: str) -> Iterator[bool]:
    """A shared flock on the output directory, the one run_guard.exclusive_run takes exclusively: yields
    False at once when a run holds it. Writes nothing."""
    directory = os.open(output_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(directory, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(directory)


def _newest_finished_run(metadata_path: str, run_id: str) -> bool:
    """True when MLMD's newest pipeline_run is `run_id` and no execution is NEW or RUNNING (a killed run's
    are, until the next run recovers them). Read-only; False on any doubt (no store, another schema)."""
    if not os.path.isfile(metadata_path):
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{metadata_path}?mode=ro", uri=True)) as store:
            newest = store.execute(
                "SELECT c.name FROM Context c JOIN Type t ON c.type_id = t.id WHERE t.name = 'pipeline_run' "
                "ORDER BY c.id DESC LIMIT 1").fetchone()
            unfinished = store.execute(
                f"SELECT COUNT(*) FROM Execution WHERE last_known_state IN "
                f"({', '.join('?' * len(UNFINISHED_STATES))})", UNFINISHED_STATES).fetchone()[0]
    except sqlite3.Error:
        return False
    return bool(newest) and newest[0] == run_id and unfinished == 0


def read_record(config: PipelineConfig) -> dict | None:
    """<output_dir>/last_run.json, or None when missing or unreadable."""
    try:
        with open(os.path.join(config.output_dir, RECORD_FILE)) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def forget_last_run(config: PipelineConfig) -> None:
    """Removes the record as a run starts (call under the run lock): until it ends with exit 0, nothing is
    known to be done."""
    with contextlib.suppress(FileNotFoundError):
        os.remove(os.path.join(config.output_dir, RECORD_FILE))


def record_run(config: PipelineConfig, fingerprint: dict[str, str], run_id: str) -> None:
    """Writes the record of a run that ended with exit 0 (call under the run lock), `fingerprint` taken
    before it started. Written aside and renamed into place."""
    path = os.path.join(config.output_dir, RECORD_FILE)
    staged = f"{path}.{os.getpid()}"
    recorded = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    with open(staged, "w") as handle:
        json.dump({"run_id": run_id, "fingerprint": fingerprint, "recorded": recorded}, handle, indent=2)
    os.replace(staged, path)
