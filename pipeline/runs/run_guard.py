"""One local run at a time per output directory, and a clean store after a run that was killed.

`exclusive_run(output_dir)` holds an flock on the output directory itself for the whole run: a second run
on the same directory fails at once with RunLockedError naming the holder, which the running process
describes in `<output_dir>/.run.lock`. The lock is on the directory, not on that file, so deleting the
file mid-run lets no second run in. The kernel drops the lock when its process dies, so a killed run
never blocks the next one.

`claim_pipeline_root(config)`, called while holding the lock, makes the pipeline root (artifact_root) this
metadata store's own: TFX names artifact folders `<node>/<output>/<execution id>` and every SQLite store
numbers its executions from 1, so two output directories sharing one pipeline root would write into, and
clean up, each other's folders. A root that another store has claimed is refused (PipelineRootTakenError).

`recover_interrupted_runs(config)`, called while holding the lock, finds executions a dead run left
RUNNING in MLMD, marks them CANCELED and deletes the folders they were writing. TFX registers output
artifacts only when an execution succeeds, so those folders are referenced by nothing.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import sys
import uuid
from typing import Iterator

from tfx.dsl.io import fileio

from pipeline.config import PipelineConfig
from pipeline.runs.mlmd import node_ids, open_store

LOCK_FILE = ".run.lock"  # who holds the output directory: pid, start time, command (the lock itself is on the directory)
LOCKED_EXIT_CODE = 75  # EX_TEMPFAIL: try again once the other run has finished
STORE_ID_FILE = ".store_id"  # in the output directory: a random id naming its metadata store
ROOT_OWNER_FILE = ".owner.json"  # in the pipeline root: the store id (and output directory) it belongs to


class RunLockedError(RuntimeError):
    """Another run holds the output directory; the message names the holder file and the holder."""


@contextlib.contextmanager
def exclusive_run(output_dir: str) -> Iterator[None]:
    """Holds an exclusive flock on `output_dir` (created if missing) until the block ends, and describes
    this process in `<output_dir>/.run.lock`. Raises RunLockedError naming the holder when another process
    holds the directory."""
    os.makedirs(output_dir, exist_ok=True)
    holder_file = os.path.join(output_dir, LOCK_FILE)
    directory = os.open(output_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(directory, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunLockedError(f"{holder_file}: another pipeline run is using {output_dir} "
                                 f"({_read_holder(holder_file)}); wait for it to finish or give this run "
                                 f"another --output") from None
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        staged = f"{holder_file}.{os.getpid()}"
        with open(staged, "w") as handle:  # renamed into place: a refused run never reads it half-written
            handle.write(f"pid {os.getpid()}, started {started}, command {' '.join(sys.argv)[:300]}\n")
        os.replace(staged, holder_file)
        yield
    finally:
        os.close(directory)  # closing releases the flock


class PipelineRootTakenError(RuntimeError):
    """The pipeline root belongs to another metadata store; the message names both."""


def claim_pipeline_root(config: PipelineConfig) -> None:
    """Makes `config.pipeline_root` (a path or a URI) belong to this output directory's metadata store, or
    raises PipelineRootTakenError naming the output directory that holds it. Call inside exclusive_run."""
    store_id = _store_id(config)
    owner_file = os.path.join(config.pipeline_root, ROOT_OWNER_FILE)
    owner = _read_json(owner_file)
    if owner is None:
        from components.core.artifact_files import write_json
        write_json(owner_file, {"store_id": store_id, "output_dir": os.path.abspath(config.output_dir)})
        owner = _read_json(owner_file)  # two first runs at once: the file holds one of them, the other refuses
    if not owner or owner.get("store_id") != store_id:
        raise PipelineRootTakenError(
            f"artifact root {config.pipeline_root} belongs to the metadata store of "
            f"{(owner or {}).get('output_dir', 'another output directory')} ({owner_file}): each store numbers "
            f"its executions from 1, so their artifact folders would collide; give this output directory an "
            f"artifact_root (--pipeline-root) of its own, or remove {config.pipeline_root} to start afresh")


def _store_id(config: PipelineConfig) -> str:
    """This output directory's store id (made on its first run)."""
    path = os.path.join(config.output_dir, STORE_ID_FILE)
    if os.path.exists(path):
        with open(path) as handle:
            return handle.read().strip()
    store_id = uuid.uuid4().hex
    with open(path, "w") as handle:
        handle.write(store_id + "\n")
    return store_id


def _read_json(path: str) -> dict | None:
    from components.core.artifact_files import read_json_if_exists
    return read_json_if_exists(path)


def _read_holder(holder_file: str) -> str:
    """The holder's description, or "unknown process" when the file is missing or empty."""
    try:
        with open(holder_file) as handle:
            return handle.read().strip() or "unknown process"
    except OSError:
        return "unknown process"


def recover_interrupted_runs(config: PipelineConfig) -> list[str]:
    """Input: the config (MLMD path, pipeline root). Output: one line per execution that was cleaned up.

    Only call this while holding exclusive_run: then no live run owns a RUNNING execution.
    """
    store = open_store(config)
    pipeline = store and store.get_context_by_type_and_name("pipeline", config.pipeline_name)
    if pipeline is None:
        return []
    from ml_metadata.proto import metadata_store_pb2

    state = metadata_store_pb2.Execution.State
    cleaned = []
    for execution in store.get_executions_by_context(pipeline.id):
        if execution.last_known_state not in (state.NEW, state.RUNNING):
            continue
        nodes = node_ids(store, execution)
        removed = []
        for node in nodes:
            removed += _remove_execution_folders(os.path.join(config.pipeline_root, node), execution.id)
        execution.last_known_state = state.CANCELED
        store.put_executions([execution])
        cleaned.append(f"execution {execution.id} ({', '.join(nodes) or 'unknown step'}) was left running by a "
                       f"killed run: marked CANCELED, removed {len(removed)} unpublished folder(s)")
    return cleaned


def _remove_execution_folders(node_root: str, execution_id: int) -> list[str]:
    """Deletes `<node_root>/<output key>/<execution id>`, its executor folder and stale working dirs (on any
    filesystem the artifacts live on)."""
    if not fileio.isdir(node_root):
        return []
    targets = [os.path.join(node_root, key.rstrip("/"), str(execution_id)) for key in fileio.listdir(node_root)]
    targets.append(os.path.join(node_root, ".system", "executor_execution", str(execution_id)))
    working = os.path.join(node_root, ".system", "stateful_working_dir")
    if fileio.isdir(working):  # TFX removes a working dir when its execution succeeds; what is left is stale
        targets += [os.path.join(working, name.rstrip("/")) for name in fileio.listdir(working)]
    removed = [target for target in targets if fileio.isdir(target)]
    for target in removed:
        fileio.rmtree(target)
    return removed
