"""The container command of every compiled Kubeflow step: TFX's Kubeflow V2 entrypoint, with the
object-store filesystems its URIs need registered first.

TFX's `kubeflow_v2_run_executor` reads artifacts through tf.io.gfile. TensorFlow serves gs:// itself, but
s3:// (MinIO and S3 on self-hosted Kubeflow) comes from tensorflow-io, which must be imported in the step's
process before the first read, including in steps whose executors are TFX's own (StatisticsGen,
ExampleValidator). This module imports it when the step's arguments name such a URI, then runs TFX's
entrypoint module as `python -m` would, with the same arguments. A Beam step whose flags select the
DirectRunner (the pod is its own worker) stages no copy of TFX (pipeline/dag/beam_workers.py).

A pipeline compiled with a model module of the user's own (staged on the pipeline root, pipeline/dag/staging.py)
passes `--model_code=<folder URI>` first: that folder is copied to a local temporary folder, which goes first on
the import path (sys.path, and PYTHONPATH for the processes the step starts) before TFX's entrypoint runs, so
that `train.model`'s name (and a `task.type` of one's own) imports as it did where the pipeline was compiled.
The flag is removed from the arguments TFX sees, and the local copy when the step ends.
"""
from __future__ import annotations

import contextlib
import os
import runpy
import shutil
import sys
import tempfile
import traceback
from typing import Iterator

TFX_ENTRYPOINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
MODEL_CODE_FLAG = "--model_code"


def split_model_code(argv: list[str]) -> tuple[str | None, list[str]]:
    """Input: a step's arguments. Output: the `--model_code` folder URI (None when absent) and the arguments
    without that flag."""
    code, rest = None, []
    for arg in argv:
        if arg.startswith(MODEL_CODE_FLAG + "="):
            code = arg.split("=", 1)[1]
        else:
            rest.append(arg)
    return code, rest


@contextlib.contextmanager
def model_code_importable(code_uri: str | None) -> Iterator[str | None]:
    """Within the block, the modules in folder `code_uri` (a local path or a URI that tfx.dsl.io.fileio reads)
    import: a local copy of it is first on sys.path and PYTHONPATH. Yields the local copy (None without a URI);
    it is removed at the end. Raises FileNotFoundError naming the URI when it holds no file."""
    if not code_uri:
        yield None
        return
    from tfx.dsl.io import fileio

    local = tempfile.mkdtemp(prefix="model-code-")
    try:
        base = code_uri.rstrip("/")
        copied = 0
        for folder, _, files in fileio.walk(base):
            folder = str(folder).rstrip("/")
            relative = folder[len(base):].strip("/")  # fileio.walk starts at `base`
            for name in files:
                target = os.path.join(local, *relative.split("/"), str(name))
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with fileio.open(f"{folder}/{name}", "rb") as source, open(target, "wb") as copy:
                    copy.write(source.read())
                copied += 1
        if not copied:
            raise FileNotFoundError(f"{MODEL_CODE_FLAG}={code_uri}: no staged model code there")
        sys.path.insert(0, local)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [local, os.environ.get("PYTHONPATH")]))
        import importlib
        importlib.invalidate_caches()
        yield local
    finally:
        shutil.rmtree(local, ignore_errors=True)


def main() -> None:
    from components.package_metadata import read_package_index_once

    read_package_index_once()  # before the imports below
    from components.core.artifact_files import register_filesystems_for
    from components.process_exit import exit_past_native_teardown
    from pipeline.dag.beam_workers import beam_workers_in_this_environment

    register_filesystems_for(" ".join(sys.argv[1:]))
    model_code, sys.argv[1:] = split_model_code(sys.argv[1:])
    try:
        with model_code_importable(model_code), beam_workers_in_this_environment(sys.argv[1:]):  # TFX's flags ignored
            runpy.run_module(TFX_ENTRYPOINT, run_name="__main__", alter_sys=True)  # app.run ends in SystemExit
    except SystemExit as done:
        exit_past_native_teardown(done.code)  # a message (SystemExit("...")) is printed, status 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        exit_past_native_teardown(INTERRUPTED_EXIT_CODE)
    except BaseException:  # noqa: BLE001 - the step failed: say why, exit non-zero
        traceback.print_exc()
        exit_past_native_teardown(1)
    exit_past_native_teardown(0)


if __name__ == "__main__":
    main()
