"""`python -m pipeline run|demo|prepare-data|status|doctor|compile`: the pipeline's command line. Quiet unless --verbose."""
from __future__ import annotations

import argparse
import os
import sys
import warnings


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run the whole pipeline locally (LocalDagRunner, SQLite MLMD)")
    demo = commands.add_parser("demo", help="like run, writing the bundled taxi data as span-1 first if missing")
    for command in (run, demo):
        command.add_argument("--config", help="YAML file of config overrides (see pipeline/config.py)")
        command.add_argument("--data", help="data root: TFRecord files or span-N/ folders (overrides data_root)")
        command.add_argument("--output", help="output directory: pipeline root, MLMD, serving (overrides output_dir)")
        command.add_argument("--verbose", action="store_true", help="show TensorFlow, TFX and Beam logs")

    data = commands.add_parser("prepare-data", help="write the bundled Chicago-taxi CSV as TFRecord spans")
    data.add_argument("--data", default="data/taxi", help="data root to write span-N/ into")
    data.add_argument("--span", type=int, default=1)
    data.add_argument("--first-row", type=int, default=0, help="start at this CSV row (0-based)")
    data.add_argument("--rows", type=int, default=None, help="at most N rows (default: all)")
    data.add_argument("--verbose", action="store_true")

    doctor = commands.add_parser("doctor", help="check this machine against the config: GPUs, TPUs, bf16, XLA, "
                                                "strategy and precision, writable output; exit 1 on a problem")
    doctor.add_argument("--config", help="YAML file of config overrides (see pipeline/config.py)")
    doctor.add_argument("--output", help="output directory to check (overrides output_dir)")
    doctor.add_argument("--verbose", action="store_true")

    status = commands.add_parser("status", help="list past runs from MLMD: spans, outcome, AUCs, blessing, "
                                                "pushed version, duration")
    status.add_argument("--config", help="YAML file of config overrides (see pipeline/config.py)")
    status.add_argument("--output", help="output directory whose MLMD to read (overrides output_dir)")
    status.add_argument("--verbose", action="store_true")

    compile_ = commands.add_parser("compile", help="compile the pipeline for Kubeflow Pipelines v2 / Vertex AI")
    compile_.add_argument("--target", choices=["kubeflow"], default="kubeflow")
    compile_.add_argument("--image", required=True, help="the step image (see Dockerfile)")
    compile_.add_argument("--pipeline-root", required=True, help="artifact root URI, e.g. gs://bucket/taxi")
    compile_.add_argument("--output", required=True, help="pipeline spec JSON to write")
    compile_.add_argument("--config", help="YAML file of config overrides (see pipeline/config.py)")
    compile_.add_argument("--data", help="data root as the steps see it (URI or absolute path)")
    compile_.add_argument("--serving-dir", help="push directory as the pusher's pod sees it (absolute path)")
    compile_.add_argument("--verbose", action="store_true")

    args = parser.parse_args(argv)
    quiet_logs(args.verbose)
    if args.command == "compile":
        return run_compile(args)
    if args.command == "prepare-data":
        return prepare_data(args)
    if args.command == "doctor":
        return run_doctor(args)
    if args.command == "status":
        return run_status(args)
    return run_pipeline(args, write_demo_data=args.command == "demo")


def quiet_logs(verbose: bool) -> None:
    """Silences TensorFlow's C++ logs, Python warnings and Beam's INFO lines unless verbose."""
    if verbose:
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    warnings.filterwarnings("ignore")
    import logging
    logging.getLogger().setLevel(logging.ERROR)
    logging.getLogger("apache_beam").setLevel(logging.ERROR)


def prepare_data(args) -> int:
    write_bundled_span(args.data, span=args.span, max_rows=args.rows, first_row=args.first_row)
    return 0


def write_bundled_span(data_root: str, span: int = 1, max_rows: int | None = None, first_row: int = 0) -> None:
    from pipeline.data import write_taxi_span
    span_dir, rows = write_taxi_span(data_root, span=span, max_rows=max_rows, first_row=first_row)
    print(f"wrote {rows} tf.Examples (bundled Chicago-taxi sample) to {span_dir}")


def load_checked_config(args, **overrides):
    """The config from `--config` with the command line's overrides, or None after printing why not."""
    from pipeline.config import ConfigError, load_config
    try:
        return load_config(args.config, **overrides)
    except (ConfigError, OSError) as error:
        print(f"config error: {error}", file=sys.stderr)
        return None


def run_compile(args) -> int:
    config = load_checked_config(args, data_root=args.data, serving_dir=args.serving_dir)
    if config is None:
        return 2
    from pipeline.kubeflow_runner import CompileError, compile_kubeflow
    try:
        job = compile_kubeflow(config, image=args.image, pipeline_root=args.pipeline_root, output_file=args.output)
    except CompileError as error:
        print(f"compile error: {error}", file=sys.stderr)
        return 2
    tasks = job["pipelineSpec"]["root"]["dag"]["tasks"]
    print(f"wrote {args.output}: {len(tasks)} tasks for Kubeflow Pipelines v2, image {args.image}")
    return 0


def run_doctor(args) -> int:
    config = load_checked_config(args, output_dir=args.output)
    if config is None:
        return 2
    from pipeline.doctor import diagnose
    lines, findings = diagnose(config)
    print("\n".join(lines))
    for finding in findings:
        print(f"{finding.severity.upper()}: {finding.key}: {finding.message}")
    errors = [finding for finding in findings if finding.severity == "error"]
    print(f"doctor: {len(errors)} error(s), {len(findings) - len(errors)} warning(s)")
    return 1 if errors else 0


def run_status(args) -> int:
    config = load_checked_config(args, output_dir=args.output)
    if config is None:
        return 2
    from pipeline.status import list_runs, render_runs
    print(render_runs(list_runs(config)))
    return 0


def run_pipeline(args, write_demo_data: bool = False) -> int:
    config = load_checked_config(args, data_root=args.data, output_dir=args.output)
    if config is None:
        return 2
    if write_demo_data and not os.path.isdir(os.path.join(config.data_root, "span-1")):
        write_bundled_span(config.data_root)
    from components.tfrecord_ingest.records import IngestionError
    from pipeline.local_runner import run_local
    from pipeline.run_guard import LOCKED_EXIT_CODE, RunLockedError
    try:
        summary = run_local(config, verbose=args.verbose)
    except RunLockedError as error:  # another run owns the directory: touch nothing, not even the report
        print(f"run refused: {error}", file=sys.stderr)
        return LOCKED_EXIT_CODE
    except IngestionError as error:
        print(f"ingestion error: {error}", file=sys.stderr)
        write_report(config, f"ingestion error: {error}")
        return 1
    except Exception as error:  # a component failed: say which error, exit non-zero
        print(f"pipeline failed: {type(error).__name__}: {error}", file=sys.stderr)
        write_report(config, f"{type(error).__name__}: {error}")
        return 1
    print(summary.render())
    write_report(config, None)
    return 0


def write_report(config, error: str | None) -> None:
    """Writes the HTML run report and says where; a report that cannot be written never changes the exit code."""
    from pipeline.run_report import write_run_report
    try:
        path = write_run_report(config, error)
    except Exception as report_error:  # noqa: BLE001 - the run's own outcome matters more than its report
        print(f"run report not written: {type(report_error).__name__}: {report_error}", file=sys.stderr)
        return
    if path:
        print(f"run report: {os.path.abspath(path)}", file=sys.stderr if error else sys.stdout)
