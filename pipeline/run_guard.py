"""One local run at a time per output directory, and a clean store after a run that was killed.

`exclusive_run(output_dir)` holds an flock on `<output_dir>/.run.lock` for the whole run: a second run on
the same directory fails at once with RunLockedError naming the holder. The kernel drops the lock when
its process dies, so a killed run never blocks the next one.

`recover_interrupted_runs(config)`, called while holding the lock, finds executions a dead run left
RUNNING in MLMD, marks them CANCELED and deletes the folders they were writing. TFX registers output
artifacts only when an execution succeeds, so those folders are referenced by nothing.
"""
from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import shutil
import sys
from typing import Iterator

from pipeline.config import PipelineConfig
from pipeline.status import node_ids, open_store

LOCK_FILE = ".run.lock"
LOCKED_EXIT_CODE = 75  # EX_TEMPFAIL: try again once the other run has finished


class RunLockedError(RuntimeError):
    """Another run holds the output directory; the message names the lock file and the holder."""


@contextlib.contextmanager
def exclusive_run(output_dir: str) -> Iterator[None]:
    """Holds `<output_dir>/.run.lock` until the block ends; raises RunLockedError when another process holds it."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, LOCK_FILE)
    handle = open(path, "a+")
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown process"
            raise RunLockedError(f"{path}: another pipeline run is using {output_dir} ({holder}); wait for it to "
                                 f"finish or give this run another --output") from None
        handle.seek(0)
        handle.truncate()
        started = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
        handle.write(f"pid {os.getpid()}, started {started}, command {' '.join(sys.argv)[:300]}\n")
        handle.flush()
        yield
    finally:
        handle.close()  # closing releases the flock


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
    """Deletes `<node_root>/<output key>/<execution id>`, its executor folder and stale working dirs."""
    if not os.path.isdir(node_root):
        return []
    targets = [os.path.join(node_root, key, str(execution_id)) for key in os.listdir(node_root)]
    targets.append(os.path.join(node_root, ".system", "executor_execution", str(execution_id)))
    working = os.path.join(node_root, ".system", "stateful_working_dir")
    if os.path.isdir(working):  # TFX removes a working dir when its execution succeeds; what is left is stale
        targets += [os.path.join(working, name) for name in os.listdir(working)]
    removed = [target for target in targets if os.path.isdir(target)]
    for target in removed:
        shutil.rmtree(target)
    return removed
