"""The container command of every compiled Kubeflow step: TFX's Kubeflow V2 entrypoint, with the
object-store filesystems its URIs need registered first.

TFX's `kubeflow_v2_run_executor` reads artifacts through tf.io.gfile. TensorFlow serves gs:// itself, but
s3:// (MinIO and S3 on self-hosted Kubeflow) comes from tensorflow-io, which must be imported in the step's
process before the first read, including in steps whose executors are TFX's own (StatisticsGen,
ExampleValidator). This module imports it when the step's arguments name such a URI, then runs TFX's
entrypoint module as `python -m` would, with the same arguments. A Beam step whose flags select the
DirectRunner (the pod is its own worker) stages no copy of TFX (pipeline/dag/beam_workers.py).
"""
from __future__ import annotations

import runpy
import sys
import traceback

TFX_ENTRYPOINT = "tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor"
INTERRUPTED_EXIT_CODE = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C


def main() -> None:
    from components.core.artifact_files import register_filesystems_for
    from components.process_exit import exit_past_native_teardown
    from pipeline.dag.beam_workers import beam_workers_in_this_environment

    register_filesystems_for(" ".join(sys.argv[1:]))
    try:
        with beam_workers_in_this_environment(sys.argv[1:]):  # TFX's own flags are ignored there
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
