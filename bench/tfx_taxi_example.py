"""Runs TFX's own `taxi_pipeline_native_keras` example (shipped in the tfx wheel) with LocalDagRunner.

This is the reference that `make demo` is measured against: same CSV, same machine.
Usage:  .venv/bin/python bench/tfx_taxi_example.py [WORKDIR]
Prints wall time, max RSS of this process tree, and the Evaluator's AUC / accuracy.
"""
import os
import resource
import shutil
import sys
import tempfile
import time


def main() -> None:
    workdir = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="tfx-taxi-ref-")
    os.environ["HOME"] = workdir  # the example builds every path from $HOME
    import tfx
    from tfx.examples.chicago_taxi_pipeline import taxi_pipeline_native_keras as example
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    example_dir = os.path.dirname(example.__file__)
    os.makedirs(os.path.join(workdir, "taxi", "data"), exist_ok=True)
    shutil.copytree(os.path.join(example_dir, "data", "simple"),
                    os.path.join(workdir, "taxi", "data", "simple"), dirs_exist_ok=True)
    shutil.copy(os.path.join(example_dir, "taxi_utils_native_keras.py"), os.path.join(workdir, "taxi"))
    # The module reads $HOME at import time, so rebuild its paths for this workdir.
    taxi_root = os.path.join(workdir, "taxi")
    tfx_root = os.path.join(workdir, "tfx")
    name = example._pipeline_name
    start = time.monotonic()
    LocalDagRunner().run(example._create_pipeline(
        pipeline_name=name,
        pipeline_root=os.path.join(tfx_root, "pipelines", name),
        data_root=os.path.join(taxi_root, "data", "simple"),
        module_file=os.path.join(taxi_root, "taxi_utils_native_keras.py"),
        serving_model_dir=os.path.join(taxi_root, "serving_model", name),
        metadata_path=os.path.join(tfx_root, "metadata", name, "metadata.db"),
        beam_pipeline_args=example._beam_pipeline_args))
    wall = time.monotonic() - start
    import tensorflow_model_analysis as tfma
    eval_root = os.path.join(tfx_root, "pipelines", name, "Evaluator", "evaluation")
    run_dir = os.path.join(eval_root, sorted(os.listdir(eval_root), key=int)[-1])
    metrics = tfma.load_metrics(run_dir)
    values = {}
    for per_slice in metrics:
        if per_slice.slice_key.single_slice_keys:
            continue
        for kv in per_slice.metric_keys_and_values:
            values[kv.key.name] = kv.value.double_value.value
    peak_kb = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    print(f"tfx {tfx.__version__} taxi_pipeline_native_keras (LocalDagRunner): "
          f"pipeline wall {wall:.1f} s, max RSS {peak_kb / 1e6:.2f} GB")
    print("eval metrics:", {k: round(v, 4) for k, v in sorted(values.items())})


if __name__ == "__main__":
    main()
