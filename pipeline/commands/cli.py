"""`python -m pipeline run|demo|prepare-data|init|status|doctor|compile`, also installed as the console command
`accel-tfx`: the pipeline's command line. Quiet unless --verbose.

`run` and `demo` exit 0 at once, printing one line and touching nothing, when nothing is new since the last
successful run on the output directory (same data, config, schema and code; pipeline/runs/nothing_new.py);
--force runs anyway.

Exit status: 0 success, 1 a failed step or an unexpected error (--verbose adds its traceback), 2 a bad config
(malformed YAML, unknown key, wrong type or value, a `train.model` or `schema_path` that cannot be used, a
model whose task, labels and output do not fit, a credential in a Beam flag, an artifact root that belongs to
another output directory) or labels the task does not allow (a class id outside the model's classes, a
label missing from some records); for prepare-data and init, input that cannot make a dataset or a project
(the message names the file and line, or the column); 75 another run holds the output directory.
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
import warnings

from components.core.tasks import TASK_NAMES
from pipeline.commands.stderr_filter import drop_native_info_lines


EXAMPLES = ("taxi", "penguins")  # pipeline.onboarding.example_data.EXAMPLES, without importing TensorFlow for --help
CONFIG_HELP = "YAML file of config overrides (keys and defaults: components/settings.py)"


CONSOLE_COMMAND = "accel-tfx"  # setup.py's console script: command_line, as `python -m pipeline` runs it


def build_parser(prog: str = "python -m pipeline") -> argparse.ArgumentParser:
    """The command line: one subcommand per command, each with its options."""
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run_commands(commands)
    _add_data_commands(commands)
    _add_inspection_commands(commands)
    return parser


def _add_run_commands(commands) -> None:
    """run and demo."""
    run = commands.add_parser("run", help="run the whole pipeline locally (LocalDagRunner, SQLite MLMD)")
    demo = commands.add_parser("demo", help="like run, writing the bundled taxi data as span-1 first if missing")
    for command in (run, demo):
        command.add_argument("--config", help=CONFIG_HELP)
        command.add_argument("--data", help="data root: TFRecord files or span-N/ folders (overrides data_root)")
        command.add_argument("--output", help="output directory: pipeline root, MLMD, serving (overrides output_dir)")
        command.add_argument("--pipeline-root", help="where artifacts live, a path or URI such as s3://bucket/taxi "
                                                     "(overrides artifact_root; MLMD stays in --output)")
        command.add_argument("--serving-dir", help="where blessed models are pushed, a path or URI "
                                                   "(overrides serving_dir)")
        command.add_argument("--verbose", action="store_true", help="show TensorFlow, TFX and Beam logs")
        command.add_argument("--force", action="store_true",
                             help="run even when nothing is new since the last successful run (same data, "
                                  "config, schema and code), which otherwise exits 0 at once doing nothing")


def _add_data_commands(commands) -> None:
    """prepare-data and init."""
    data = commands.add_parser("prepare-data", help="write a CSV file of yours, or an example dataset (the bundled taxi "
                                                    "CSV, TFX's penguins), as a span of TFRecord tf.Examples")
    data.add_argument("--csv", help="your CSV file (a header row, then one row per example)")
    data.add_argument("--example", choices=EXAMPLES, default="taxi", help="without --csv: which example dataset")
    data.add_argument("--data", help="data root to write span-N/ into (default: data/<example>; required with --csv)")
    data.add_argument("--span", type=int, default=1)
    data.add_argument("--delimiter", help="--csv: the delimiter (default: detected among , ; tab |)")
    data.add_argument("--na", action="append", default=None,
                      help="--csv: comma-separated cell values that mean missing, besides an empty cell, compared "
                           "without case (default: NA, N/A, #N/A, null, None, nan, inf, -inf, infinity, -, ?); "
                           "repeatable")
    data.add_argument("--date-format", action="append", default=[], metavar="COLUMN=FORMAT",
                      help="--csv: read COLUMN as dates of this strptime FORMAT (e.g. 'day=%%d/%%m/%%Y'); repeatable")
    data.add_argument("--schema", help="--csv: write the columns with the types of this curated schema (default: "
                                       "the types the data root's first span fixed)")
    data.add_argument("--require", action="append", default=[],
                      help="--csv: comma-separated columns a row must have a value in (rows missing one are left "
                           "out and counted), e.g. the label; repeatable")
    data.add_argument("--decimal", choices=[".", ","], default=None,
                      help="--csv: the decimal mark of the numbers: ',' reads 4,5 and 1.466,14 (default: the data "
                           "root's first span's, else '.')")
    data.add_argument("--dates", action="append", default=[],
                      help="--csv: comma-separated integer columns of Unix seconds (since 1970-01-01 UTC) to read as "
                           "dates; repeatable")
    data.add_argument("--first-row", type=int, default=0, help="taxi: start at this CSV row (0-based)")
    data.add_argument("--rows", type=int, default=None, help="taxi: at most N rows (default: all)")

    init = commands.add_parser("init", help="your data in, a curated schema and a config out (in this folder): "
                                            "NAME.yaml and schemas/NAME/schema.pbtxt, for the schema-driven model")
    init.add_argument("--data", required=True, help="data root: TFRecord files or span-N/ folders (prepare-data --csv)")
    init.add_argument("--label", required=True, help="the column to predict")
    init.add_argument("--task", help=f"{', '.join(TASK_NAMES)} or a registered task; default: chosen from the "
                      "label's values")
    init.add_argument("--name", help="names the config, the schema folder and the pipeline (default: the data "
                                     "folder's name)")
    init.add_argument("--exclude", action="append", default=[],
                      help="comma-separated columns the model leaves out; repeatable (--exclude a --exclude b)")
    init.add_argument("--force", action="store_true", help="overwrite an existing NAME.yaml and schema")
    init.add_argument("--dates", action="append", default=[],
                      help="comma-separated integer columns of Unix seconds the model reads as dates (calendar "
                           "features); repeatable")
    init.add_argument("--refuse-unlabelled", action="store_true",
                      help="stop when some records have no label, instead of leaving them out of the spans "
                           "prepare-data wrote (and counting them)")
    for command in (data, init):
        command.add_argument("--verbose", action="store_true")


def _add_inspection_commands(commands) -> None:
    """doctor, status and compile."""
    doctor = commands.add_parser("doctor", help="check this machine against the config: GPUs, TPUs, bf16, XLA, "
                                                "strategy and precision, writable output; exit 1 on a problem")
    doctor.add_argument("--config", help=CONFIG_HELP)
    doctor.add_argument("--output", help="output directory to check (overrides output_dir)")
    doctor.add_argument("--verbose", action="store_true")

    status = commands.add_parser("status", help="list past runs from MLMD: spans, outcome, the primary metric per "
                                                "model, blessing, pushed version, duration")
    status.add_argument("--config", help=CONFIG_HELP)
    status.add_argument("--output", help="output directory whose MLMD to read (overrides output_dir)")
    status.add_argument("--verbose", action="store_true")

    compile_ = commands.add_parser("compile", help="compile the pipeline for Kubeflow Pipelines v2 / Vertex AI")
    compile_.add_argument("--target", choices=["kubeflow"], default="kubeflow")
    compile_.add_argument("--image", required=True, help="the step image (see Dockerfile)")
    compile_.add_argument("--pipeline-root", required=True, help="artifact root URI, e.g. gs://bucket/taxi")
    compile_.add_argument("--output", required=True, help="pipeline spec JSON to write")
    compile_.add_argument("--config", help=CONFIG_HELP)
    compile_.add_argument("--data", help="data root as the steps see it (URI or absolute path)")
    compile_.add_argument("--serving-dir", help="push directory as the pusher's pod sees it (absolute path or gs:// / s3:// URI)")
    compile_.add_argument("--verbose", action="store_true")


def command_line() -> None:
    """`accel-tfx ...` and `python -m pipeline ...`: runs main() on the process's arguments and ends the process
    with its exit status (past tensorflow-io's native teardown, see components/process_exit.py); Ctrl-C
    exits 130. The working directory comes first on the import path, as `python -m` puts it, so that a model
    module beside the config imports under both names. The installed packages' index is read once
    (components/package_metadata.py)."""
    from components.package_metadata import read_package_index_once
    from components.process_exit import exit_past_native_teardown
    from pipeline.dag.kfp_entrypoint import INTERRUPTED_EXIT_CODE

    read_package_index_once()
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        code = main()
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = INTERRUPTED_EXIT_CODE
    except SystemExit as done:  # argparse's usage errors (2) and --help (0)
        code = done.code
    exit_past_native_teardown(code)


def main(argv: list[str] | None = None) -> int:
    """Runs one command. Input: the arguments (None: the process's). Output: the exit status."""
    prog = CONSOLE_COMMAND if argv is None and os.path.basename(sys.argv[0]) == CONSOLE_COMMAND else None
    args = build_parser(*([prog] if prog else [])).parse_args(argv)
    quiet_logs(args.verbose)
    # The real command line only: in-process callers (tests) keep their stderr as it is.
    end_filter = drop_native_info_lines() if argv is None and not args.verbose else (lambda: None)
    commands = {"compile": run_compile, "prepare-data": prepare_data, "init": run_init, "doctor": run_doctor,
                "status": run_status, "run": run_pipeline, "demo": lambda args: run_pipeline(args, write_demo_data=True)}
    try:
        return commands[args.command](args)
    except Exception as error:  # noqa: BLE001 - a bug or an environment problem: say what, exit 1
        report_unexpected(error, args.verbose, "failed")
        return 1
    finally:
        end_filter()


def report_unexpected(error: BaseException, verbose: bool, what: str) -> None:
    """Prints `<what>: Type: message` to stderr, preceded by the traceback when verbose."""
    if verbose:
        traceback.print_exception(error, file=sys.stderr)
    print(f"{what}: {type(error).__name__}: {error}" + ("" if verbose else " (--verbose shows the traceback)"),
          file=sys.stderr)


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
    if args.span < 1:
        print(f"data error: --span {args.span}: span numbers start at 1", file=sys.stderr)
        return 2
    if args.csv:
        if not args.data:
            print("data error: --csv needs --data, the data root to write span-N/ into", file=sys.stderr)
            return 2
        from components.core.missing_values import MISSING_TOKENS
        from pipeline.onboarding.csv_reading import CsvError
        from pipeline.onboarding.prepare_csv import write_csv_span
        try:
            summary = write_csv_span(args.csv, args.data, span=args.span, delimiter=args.delimiter,
                                     missing_tokens=MISSING_TOKENS if args.na is None else _names(args.na),
                                     required=_names(args.require), date_formats=_date_formats(args.date_format),
                                     schema_path=args.schema, decimal=args.decimal, dates=_names(args.dates))
        except CsvError as error:
            print(f"data error: {error}", file=sys.stderr)
            return 2
        except OSError as error:  # a full disk, a folder that cannot be written: the span was not written
            print(f"write error: {error}; nothing was written (span-{args.span} under {args.data} is as it was)",
                  file=sys.stderr)
            return 1
        print(summary.render())
        return 0
    data_root = args.data or os.path.join("data", args.example)
    if args.example == "penguins":
        from pipeline.onboarding.example_data import write_penguin_span
        span_dir, records = write_penguin_span(data_root, span=args.span)
        print(f"wrote {records:,} tf.Examples (TFX's penguin data) to {span_dir}")
        return 0
    write_bundled_span(data_root, span=args.span, max_rows=args.rows, first_row=args.first_row)
    return 0


def _date_formats(values: list[str]) -> dict[str, str]:
    """--date-format COLUMN=FORMAT values as {column: format}; CsvError for one without '='."""
    from pipeline.onboarding.csv_reading import CsvError

    formats = {}
    for value in values:
        column, equals, form = value.partition("=")
        if not equals or not column.strip() or not form:
            raise CsvError(f"--date-format {value!r}: expected COLUMN=FORMAT, e.g. 'day=%d/%m/%Y'")
        formats[column.strip()] = form
    return formats


def _names(given: list[str]) -> tuple[str, ...]:
    """The names of a repeatable, comma-separated option (--exclude a,b --exclude c: a, b, c), each once."""
    return tuple(dict.fromkeys(name.strip() for text in given for name in text.split(",") if name.strip()))


def run_init(args) -> int:
    from pipeline.onboarding.init import InitError, plan_project
    try:
        project = plan_project(os.getcwd(), args.data, args.label, task=args.task, name=args.name,
                               exclude=list(_names(args.exclude)), refuse_unlabelled=args.refuse_unlabelled,
                               dates=list(_names(args.dates)))
        project.write(force=args.force)
    except InitError as error:
        print(f"init error: {error}", file=sys.stderr)
        return 2
    print(project.render())
    return 0


def ensure_demo_data(data_root: str) -> bool:
    """Writes the bundled taxi sample as <data_root>/span-1 unless that folder exists (a path or a URI such as
    s3://...). Output: True when it wrote the span."""
    from tfx.dsl.io import fileio

    if fileio.isdir(os.path.join(data_root, "span-1")):
        return False
    write_bundled_span(data_root)
    return True


def write_bundled_span(data_root: str, span: int = 1, max_rows: int | None = None, first_row: int = 0) -> None:
    from pipeline.onboarding.example_data import write_taxi_span
    span_dir, rows = write_taxi_span(data_root, span=span, max_rows=max_rows, first_row=first_row)
    print(f"wrote {rows:,} tf.Examples (bundled Chicago-taxi sample) to {span_dir}")


def load_checked_config(args, check_references: bool = True, **overrides):
    """The config from `--config` with the command line's overrides, or None after printing why not.
    `check_references`: also check that `train.model` imports and `schema_path` parses (see load_config)."""
    from pipeline.config import ConfigError, load_config
    try:
        return load_config(args.config, check_references=check_references, **overrides)
    except (ConfigError, OSError) as error:
        print(f"config error: {error}", file=sys.stderr)
        return None


def run_compile(args) -> int:
    """Compiles for Kubeflow, staging the files the image lacks on the pipeline root; prints what was staged
    and where, the Beam flags added for the workers, and the job file written."""
    config = load_checked_config(args, data_root=args.data, serving_dir=args.serving_dir)
    if config is None:
        return 2
    from pipeline.config import ConfigError, check_kubeflow_name
    try:
        check_kubeflow_name(config)
    except ConfigError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    from pipeline.dag.kubeflow_runner import CompileError, compile_job
    try:
        compiled = compile_job(config, image=args.image, pipeline_root=args.pipeline_root, output_file=args.output,
                               config_file=args.config)
    except CompileError as error:
        print(f"compile error: {error}", file=sys.stderr)
        return 2
    if compiled.staging.items:
        fresh = sum(compiled.uploaded)
        print(f"staged for the steps ({fresh} item(s) copied, {len(compiled.uploaded) - fresh} already there):")
        print("\n".join("  " + line for line in compiled.staging.listing()))
    else:
        print("staged nothing: the schema and the model module are in the image (or on an object store)")
    if compiled.beam_flags_added:
        print(f"Beam workers run the step image: added {' '.join(compiled.beam_flags_added)}")
    tasks = compiled.job["pipelineSpec"]["root"]["dag"]["tasks"]
    print(f"wrote {args.output}: {len(tasks)} tasks for Kubeflow Pipelines v2, image {args.image}")
    return 0


def run_doctor(args) -> int:
    config = load_checked_config(args, output_dir=args.output)
    if config is None:
        return 2
    from pipeline.commands.doctor import diagnose
    lines, findings = diagnose(config)
    print("\n".join(lines))
    for finding in findings:
        print(f"{finding.severity.upper()}: {finding.key}: {finding.message}")
    errors = [finding for finding in findings if finding.severity == "error"]
    print(f"doctor: {len(errors)} error(s), {len(findings) - len(errors)} warning(s)")
    return 1 if errors else 0


def run_status(args) -> int:
    config = load_checked_config(args, check_references=False, output_dir=args.output)
    if config is None:
        return 2
    from pipeline.runs.run_facts import list_runs, render_runs
    print(render_runs(list_runs(config)))
    return 0


def run_pipeline(args, write_demo_data: bool = False) -> int:
    from pipeline.config import ConfigError, read_config, with_references_checked
    overrides = dict(data_root=args.data, output_dir=args.output, artifact_root=args.pipeline_root,
                     serving_dir=args.serving_dir)
    try:
        config = read_config(args.config, **overrides)  # the run's one read of the file
    except (ConfigError, OSError) as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    if not args.force and (line := _nothing_new(config)):
        print(line)  # decided before TensorFlow, TFX or Beam load; nothing touched, the last report stays
        return 0
    try:
        config = with_references_checked(config)
    except (ConfigError, OSError) as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    from components.core.artifact_files import register_filesystems_for
    try:
        register_filesystems_for(config.data_root, config.pipeline_root, config.push_dir)
    except RuntimeError as error:
        print(f"config error: {error}", file=sys.stderr)
        return 2
    if write_demo_data:
        ensure_demo_data(config.data_root)
    from pipeline.dag.local_runner import locked_run
    from pipeline.runs.run_guard import LOCKED_EXIT_CODE, PipelineRootTakenError, RunLockedError
    from pipeline.runs.mlmd import recorded_run_ids
    from pipeline.runs import nothing_new
    try:
        with locked_run(config):  # the report and the nothing-new record are written under the same lock as the run
            fingerprint = nothing_new.run_fingerprint(config)  # what this run reads, taken before it
            nothing_new.forget_last_run(config)  # a run that fails or is killed leaves no record
            known_runs = recorded_run_ids(config)
            code = _run_and_report(config, args.verbose, known_runs=known_runs)
            if code == 0 and fingerprint and len(new_runs := recorded_run_ids(config) - known_runs) == 1:
                _record_run(config, fingerprint, next(iter(new_runs)))
            return code
    except RunLockedError as error:  # another run owns the directory: touch nothing, not even the report
        print(f"run refused: {error}", file=sys.stderr)
        return LOCKED_EXIT_CODE
    except PipelineRootTakenError as error:  # the artifacts belong to another output directory: a config fault
        print(f"config error: {error}", file=sys.stderr)
        return 2


def _record_run(config, fingerprint: dict, run_id: str) -> None:
    """Records a successful run's fingerprint for the next run's nothing-new check; a record that cannot be
    written only costs the next run its shortcut, never this run its exit code."""
    from pipeline.runs.nothing_new import record_run
    try:
        record_run(config, fingerprint, run_id)
    except OSError as error:
        print(f"nothing-new record not written: {error}", file=sys.stderr)


def _nothing_new(config) -> str | None:
    """The nothing-new line (pipeline/runs/nothing_new.py) when the last successful run read the same data,
    config, schema and code, else None; None too when the check itself fails: then the pipeline runs."""
    try:
        from pipeline.runs.nothing_new import check
        return check(config)
    except Exception:  # noqa: BLE001 - a check that cannot decide must never stop a run
        return None


def _run_and_report(config, verbose: bool, known_runs: frozenset[str]) -> int:
    """Runs the pipeline (call inside locked_run), prints how it ended and writes its report. Output: the
    exit status. `known_runs`: the run ids MLMD held before this run, so the report is this run's own."""
    from components.core.tasks import TaskError
    from components.tfrecord_ingest.tfrecord_files import IngestionError
    from components.tfrecord_ingest.spans import MissingInputError
    from pipeline.dag.local_runner import run_locked
    try:
        summary = run_locked(config, verbose=verbose)
    except MissingInputError as error:  # no data to read: an input error, named before any step ran
        print(f"data error: {error}", file=sys.stderr)
        write_report(config, f"data error: {error}", known_runs)
        return 2
    except IngestionError as error:
        print(f"ingestion error: {error}", file=sys.stderr)
        write_report(config, f"ingestion error: {error}", known_runs)
        return 1
    except TaskError as error:  # the labels do not fit the task the model declares: the user's to fix, as a config
        print(f"task error: {error}", file=sys.stderr)
        write_report(config, f"task error: {error}", known_runs)
        return 2
    except Exception as error:  # a component failed: say which error, exit non-zero
        report_unexpected(error, verbose, "pipeline failed")
        write_report(config, f"{type(error).__name__}: {error}", known_runs)
        return 1
    print(_with_data_lines(summary.render(), summary.facts.data_lines))
    write_report(config, None, known_runs, summary.facts)
    return 0


def _with_data_lines(rendered: str, data_lines: list[str]) -> str:
    """The run summary with what it says of the data (RunFacts.data_lines: columns the model left out, rows
    left out of the spans) after its step lines, before the training line."""
    if not data_lines:
        return rendered
    lines = rendered.split("\n")
    at = next((i for i, line in enumerate(lines) if line.startswith(("  training:", "  eval metrics:", "  evaluation:",
                                                                     "  blessed:"))), len(lines))
    return "\n".join(lines[:at] + data_lines + lines[at:])


def write_report(config, error: str | None, known_runs: frozenset[str] | None = None, facts=None) -> None:
    """Writes the HTML report of the run whose `facts` the summary read, else of the run that MLMD did not
    hold as `known_runs` (or of a run that never started), and says where; a report that cannot be written
    never changes the exit code."""
    from pipeline.runs.run_report import write_run_report
    try:
        path = write_run_report(config, error, known_runs, facts)
    except Exception as report_error:  # noqa: BLE001 - the run's own outcome matters more than its report
        print(f"run report not written: {type(report_error).__name__}: {report_error}", file=sys.stderr)
        return
    if path:
        print(f"run report: {os.path.abspath(path)}", file=sys.stderr if error else sys.stdout)
