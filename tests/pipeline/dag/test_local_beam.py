"""Beam steps run locally or in a Kubeflow pod: with the DirectRunner, TFX's Beam executors stage no copy of
TFX (its sdist takes about 2 s per step and 50 MB of the temporary folder that nothing removes). TFX's
StatisticsGen executor, no pipeline."""
import os
import tempfile

import pytest
from tfx.components.statistics_gen.executor import Executor as StatisticsGenExecutor
from tfx.dsl.components.base.base_beam_executor import BaseBeamExecutor
from tfx.utils import dependency_utils

from pipeline.dag.beam_workers import beam_workers_in_this_environment

LOCAL = ["--direct_running_mode=in_memory"]


@pytest.fixture
def temporary_folder(tmp_path, monkeypatch):
    """tempfile's folder (where TFX builds its sdist), here an empty folder of the test's own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _staged(executor):
    return [flag for flag in executor._beam_pipeline_args if flag.startswith("--extra_package")]


def test_a_beam_step_under_the_direct_runner_stages_nothing_and_leaves_no_file(temporary_folder):
    with beam_workers_in_this_environment(LOCAL):
        executor = StatisticsGenExecutor(BaseBeamExecutor.Context(beam_pipeline_args=list(LOCAL)))
    assert _staged(executor) == [] and os.listdir(temporary_folder) == []
    # Outside the block TFX's own helper is back: the same step builds and stages its sdist there.
    executor = StatisticsGenExecutor(BaseBeamExecutor.Context(beam_pipeline_args=list(LOCAL)))
    assert len(_staged(executor)) == 1 and _staged(executor)[0].endswith(".tar.gz")
    assert os.listdir(temporary_folder) != []


def test_the_kubeflow_entrypoints_whole_command_line_selects_the_same_way():
    """The step entrypoint passes its whole command line: TFX's own flags are ignored, Beam's decide."""
    original = dependency_utils.make_beam_dependency_flags
    tfx_flags = ["--executor_class_path", "tfx.components.statistics_gen.executor.Executor",
                 "--json_serialized_invocation_args", '{"outputs": {}, "runner": "DataflowRunner"}']
    with beam_workers_in_this_environment([*tfx_flags, *LOCAL, "--s3_region_name=us-east-1"]):
        assert dependency_utils.make_beam_dependency_flags is not original
    with beam_workers_in_this_environment([*tfx_flags, "--runner=DataflowRunner"]):
        assert dependency_utils.make_beam_dependency_flags is original


def test_any_other_runner_keeps_tfxs_staging():
    original = dependency_utils.make_beam_dependency_flags
    with beam_workers_in_this_environment(["--runner=DataflowRunner", "--project=p"]):
        assert dependency_utils.make_beam_dependency_flags is original
    with beam_workers_in_this_environment(["--runner=DirectRunner"]):
        assert dependency_utils.make_beam_dependency_flags is not original
    assert dependency_utils.make_beam_dependency_flags is original
