"""TFX's Beam steps without a copy of TFX staged for remote workers, when the workers are local.

Every Beam step of TFX builds an sdist of the installed TFX for remote Beam workers to install (about 2 s,
and 50 MB in a temporary folder never removed: a scheduled run would fill the disk), unless a flag names the
workers' packages or image. Under the DirectRunner the workers run in this environment (this process, or
processes started from it) and install nothing: the local runner and the Kubeflow step entrypoint (whose pod
runs its Beam step with the DirectRunner unless the pipeline's Beam flags say otherwise) run TFX inside
`beam_workers_in_this_environment`.
"""
from __future__ import annotations

import contextlib
from typing import Iterator


@contextlib.contextmanager
def beam_workers_in_this_environment(flags: list[str]) -> Iterator[None]:
    """Within the block, TFX's Beam steps stage no copy of TFX when `flags` (Beam's, possibly among others,
    which are ignored) select the DirectRunner; any other runner keeps TFX's behaviour."""
    from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions
    from tfx.utils import dependency_utils

    runner = PipelineOptions(list(flags)).view_as(StandardOptions).runner
    if runner not in (None, "DirectRunner", "direct"):
        yield
        return
    build_flags = dependency_utils.make_beam_dependency_flags
    dependency_utils.make_beam_dependency_flags = lambda args: list(args)
    try:
        yield
    finally:
        dependency_utils.make_beam_dependency_flags = build_flags
