"""Runs create_pipeline(config) with LocalDagRunner (SQLite MLMD, caching) and summarizes the run.

Prints one line per component as it starts and ends; returns a RunSummary: the steps as they were printed
and the run's facts read back from MLMD (pipeline/runs/run_facts.py), which the run report renders too.
`locked_run(config)` holds the output directory (see pipeline/runs/run_guard.py) for whatever must happen under the same
lock as the run, such as writing its report; `run_local(config)` is that lock plus `run_locked(config)`.
"""
from __future__ import annotations

import contextlib
import logging
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Iterator

from components.core import contract
from components.core.records import format_number
from pipeline.dag.beam_workers import beam_workers_in_this_environment
from pipeline.config import PipelineConfig
from pipeline.runs.run_facts import RunFacts, read_run_facts
from pipeline.runs.run_guard import claim_pipeline_root, exclusive_run, recover_interrupted_runs


@dataclass
class StepTiming:
    name: str
    status: str = "running"  # running | ran | cached | failed
    seconds: float = 0.0


@dataclass
class RunSummary:
    facts: RunFacts  # what the run did, from MLMD
    steps: list[StepTiming] = field(default_factory=list)  # as the run printed them ([] when read back later)
    wall_seconds: float = 0.0

    def render(self) -> str:
        facts = self.facts
        lines = ["", "Run summary", "-----------"]
        for step in self.steps:
            lines.append(f"  {step.name:<32} {step.status:<7} {step.seconds:6.1f} s")
        if (t := facts.training.get(contract.TRAINER_NODE)) and not t.skipped:
            lines.append(f"  training: {t.task_name}, {t.strategy} x{t.replicas}, {t.precision}, "
                         f"XLA {'on' if t.xla else 'off'}, {t.examples_per_second:,.0f} examples/s, "
                         f"{t.input_line()}")
            lines.append(f"    {t.schedule_line()}" + (f"; {t.model_description}" if t.model_description else ""))
            if search := t.search_line():
                lines.append(f"    search: {search}")
        if metrics := facts.candidate_metrics:
            lines.append("  eval metrics: " + ", ".join(f"{k} {format_number(v)}" for k, v in sorted(metrics.items())))
        if facts.evaluation:
            lines.append(f"  evaluation: {facts.evaluation.summary}")
            for check in facts.evaluation.checks:
                lines.append(f"    {check.describe()}")
            for note in facts.evaluation.notes:  # e.g. why the production model was not compared
                lines.append(f"    note: {note}")
        if facts.export and facts.export.exported:
            recommended = facts.export.recommended
            variant = facts.export.variants.get(recommended, {})
            primary = facts.export.task.primary
            lines.append(f"  TFLite for devices: {recommended or 'none accepted'}" + (
                f" ({facts.export.inputs} in, {variant['size_bytes']:,} bytes, {primary.label} "
                f"{variant[primary.name]:.4f}, {variant['median_latency_us']:.1f} µs/example)" if variant else ""))
        lines.append(f"  blessed: {'yes' if facts.blessed else 'no' if facts.blessed is False else 'not evaluated'}")
        lines.append(f"  pushed to: {facts.pushed_to or 'nothing pushed'}")
        if time_line := facts.time_line():
            lines.append(f"  where the time went: {time_line}")
        lines.append(f"  total wall time: {self.wall_seconds:.1f} s")
        return "\n".join(lines)


class ProgressReporter(logging.Handler):
    """Turns LocalDagRunner's absl log lines into one printed line per component start and end, and a step's
    progress lines (contract.PROGRESS) into lines under its name."""

    _RUNNING = re.compile(r"^Component (\S+) is running\.$")
    _FINISHED = re.compile(r"^Component (\S+) is finished\.$")
    _CACHED = re.compile(r"^A cached execution \d+ is used\.$")
    _PROGRESS = re.compile("^" + re.escape(contract.PROGRESS) + "(.+)$")

    def __init__(self, stream=sys.stdout):
        super().__init__(level=logging.INFO)
        self.stream = stream
        self.steps: list[StepTiming] = []
        self._started = 0.0

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if match := self._RUNNING.match(message):
            self.steps.append(StepTiming(match.group(1)))
            self._started = time.monotonic()
            print(f"[{match.group(1)}] started", file=self.stream, flush=True)
        elif (match := self._PROGRESS.match(message)) and self.steps:
            print(f"[{self.steps[-1].name}] {match.group(1)}", file=self.stream, flush=True)
        elif self._CACHED.match(message) and self.steps:
            self.steps[-1].status = "cached"
        elif (match := self._FINISHED.match(message)) and self.steps:
            step = self.steps[-1]
            step.seconds = time.monotonic() - self._started
            step.status = "cached" if step.status == "cached" else "ran"
            print(f"[{step.name}] {step.status} in {step.seconds:.1f} s", file=self.stream, flush=True)

    def mark_failure(self) -> None:
        if self.steps and self.steps[-1].status == "running":
            self.steps[-1].status = "failed"
            self.steps[-1].seconds = time.monotonic() - self._started
            print(f"[{self.steps[-1].name}] FAILED after {self.steps[-1].seconds:.1f} s", file=self.stream, flush=True)


@contextlib.contextmanager
def locked_run(config: PipelineConfig) -> Iterator[None]:
    """Holds the output directory for one run, claims the pipeline root for its metadata store and first
    cleans up after runs that were killed (printing a line for each). Raises RunLockedError when another
    run is using the directory, PipelineRootTakenError when another output directory's store owns the root."""
    with exclusive_run(config.output_dir):
        claim_pipeline_root(config)
        for line in recover_interrupted_runs(config):
            print(f"recovered: {line}", flush=True)
        yield


def run_local(config: PipelineConfig, verbose: bool = False) -> RunSummary:
    """Input: a config. Output: the run's summary. Raises whatever the failing component raised, or
    RunLockedError when another run is using the output directory."""
    with locked_run(config):
        return run_locked(config, verbose)


def run_locked(config: PipelineConfig, verbose: bool = False) -> RunSummary:
    """Runs the pipeline; call inside locked_run. Output: the run's summary. Raises what the failing step
    (or create_pipeline, for a run that never starts) raised."""
    from absl import logging as absl_logging
    from tfx.orchestration.local.local_dag_runner import LocalDagRunner

    from pipeline.dag.wiring import create_pipeline

    absl_logger = absl_logging.get_absl_logger()
    verbosity = absl_logging.get_verbosity()
    absl_logging.set_verbosity(absl_logging.INFO)  # sets the flag too, so a later flag parse keeps INFO
    absl_logger.propagate = verbose  # quiet: TFX's INFO chatter reaches only the reporter
    reporter = ProgressReporter()
    absl_logger.addHandler(reporter)
    start = time.monotonic()
    try:
        with beam_workers_in_this_environment(config.beam_pipeline_args):
            LocalDagRunner().run(create_pipeline(config))
        summary = summarize_latest_run(config)
    except BaseException:
        reporter.mark_failure()
        raise
    finally:
        absl_logger.removeHandler(reporter)
        absl_logger.propagate = True
        absl_logging.set_verbosity(verbosity)  # what comes after the run (the report) is quiet again
    summary.steps = reporter.steps
    summary.wall_seconds = time.monotonic() - start
    return summary


def summarize_latest_run(config: PipelineConfig) -> RunSummary:
    """The newest run's summary, its facts read from MLMD (no step timings: those are the run's own).
    Raises RuntimeError when MLMD records no run."""
    facts = read_run_facts(config)
    if facts is None:
        raise RuntimeError(f"{config.metadata_path} records no run of {config.pipeline_name}")
    return RunSummary(facts)
