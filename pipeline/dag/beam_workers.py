"""TFX's Beam steps without a copy of TFX staged for remote workers, when the workers are local.

Every Beam step of TFX builds an sdist of the installed TFX for remote Beam workers to install (about 2 s,
and 50 MB in a temporary folder never removed: a scheduled run would fill the disk), unless a flag names the
workers' packages or image. Under the DirectRunner the workers run in this environment (this process, or
processes started from it) and install nothing: the local runner and the Kubeflow step entrypoint (whose pod
runs its Beam step with the DirectRunner unless the pipeline's Beam flags say otherwise) run TFX inside
`beam_workers_in_this_environment`.

Under any other runner (Dataflow, or the portable runner of Flink and Spark) the workers are containers of
their own; the compile makes them run the step image, which holds TFX, TFDV, TFMA and this project
(`cluster_beam_args`): `--sdk_container_image=<image>`, which is also one of the flags that stop TFX's sdist,
and for the portable runner on a cluster its Docker environment, `--environment_type=DOCKER
--environment_config=<image>`.
"""
from __future__ import annotations

import contextlib
import re
from typing import Iterator

DIRECT_RUNNERS = ("direct", "bundlebaseddirect", "switchingdirect")  # lower case, without "Runner"
PORTABLE_RUNNERS = ("portable", "flink", "spark")
# The Beam options with which TFX's Beam executors build no sdist of TFX for the workers: any of them says the
# workers have their packages (tfx.utils.dependency_utils.make_beam_dependency_flags reads exactly these).
WORKER_PACKAGE_OPTIONS = ("extra_packages", "setup_file", "requirements_file", "worker_harness_container_image",
                          "sdk_container_image")


def _runner_name(flags: list[str]) -> str:
    """The --runner's name, lower case, without a module path or "Runner" ("direct" when none is given)."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

    runner = PipelineOptions(list(flags)).view_as(StandardOptions).runner
    return (runner or "direct").rsplit(".", 1)[-1].lower().removesuffix("runner")


def runner_kind(flags: list[str]) -> str:
    """Input: Beam flags (others among them are ignored). Output: "direct" (no --runner, or a DirectRunner),
    "portable" (PortableRunner, FlinkRunner, SparkRunner) or "remote" (any other: DataflowRunner...)."""
    name = _runner_name(flags)
    if name in DIRECT_RUNNERS:
        return "direct"
    return "portable" if name in PORTABLE_RUNNERS else "remote"


def _engine_in_the_pod(flags: list[str]) -> bool:
    """A FlinkRunner or SparkRunner whose master is local ([auto], [local], local[N]): Beam starts the engine
    in the step's process and, unless told otherwise, runs the workers there too (LOOPBACK)."""
    from apache_beam.options.pipeline_options import FlinkRunnerOptions, PipelineOptions, SparkRunnerOptions

    options, name = PipelineOptions(list(flags)), _runner_name(flags)
    if name == "flink":
        return options.view_as(FlinkRunnerOptions).flink_master in ("[auto]", "[local]")
    if name == "spark":
        return bool(re.match(r"^local(\[.+\])?$", options.view_as(SparkRunnerOptions).spark_master_url))
    return False


def cluster_beam_args(flags: list[str], image: str) -> list[str]:
    """Input: the config's Beam flags and the step image. Output: the flags to add so that a runner other than
    the DirectRunner runs its workers in the step image: `--sdk_container_image=<image>` unless a flag already
    names the workers' image or packages (WORKER_PACKAGE_OPTIONS; it also stops TFX from building and staging
    an sdist of itself in every Beam step), and for the portable runner on a cluster (PortableRunner, or Flink
    and Spark with a master that is not local) `--environment_type=DOCKER` (when no environment type is set)
    and `--environment_config=<image>` (when the Docker environment names no image). [] under the
    DirectRunner."""
    from apache_beam.options.pipeline_options import PipelineOptions, PortableOptions

    kind = runner_kind(flags)
    if kind == "direct":
        return []
    options = PipelineOptions(list(flags))
    given = options.get_all_options(drop_default=True)
    added = [] if any(given.get(name) for name in WORKER_PACKAGE_OPTIONS) else [f"--sdk_container_image={image}"]
    portable = options.view_as(PortableOptions)
    if kind == "portable" and (portable.environment_type or not _engine_in_the_pod(flags)):
        if not portable.environment_type:
            added.append("--environment_type=DOCKER")
        if (portable.environment_type or "DOCKER").upper() == "DOCKER" and not (
                portable.environment_config or portable.lookup_environment_option("docker_container_image")):
            added.append(f"--environment_config={image}")
    return added


@contextlib.contextmanager
def beam_workers_in_this_environment(flags: list[str]) -> Iterator[None]:
    """Within the block, TFX's Beam steps stage no copy of TFX when `flags` (Beam's, possibly among others,
    which are ignored) select the DirectRunner; any other runner keeps TFX's behaviour."""
    from tfx.utils import dependency_utils

    if runner_kind(flags) != "direct":
        yield
        return
    build_flags = dependency_utils.make_beam_dependency_flags
    dependency_utils.make_beam_dependency_flags = lambda args: list(args)
    try:
        yield
    finally:
        dependency_utils.make_beam_dependency_flags = build_flags
