"""A production output directory shared by the fault suite and the run-report tests: one real run that
blessed and pushed a model, through the command line, as a user would have left it."""
import os
import shutil
from dataclasses import dataclass

import pytest

from pipeline.commands.cli import main as cli_main
from pipeline.config import PipelineConfig, load_config
from pipeline.runs.run_report import REPORT_FILE
from tests.config_text import taxi_config_text

CONFIG_TEXT = """\
# over the taxi example's config (configs/taxi.yaml)
train: {epochs: 3}
evaluate: {absolute_bar: 0.8}
export: {latency_examples: 50}
"""


@dataclass
class Production:
    data_root: str  # holds span-1, the data the pushed model was trained on
    config_file: str  # the YAML every later run on this output directory uses
    config: PipelineConfig
    pushed_dir: str  # the pushed version's folder
    report: str  # a copy of the first run's HTML report


@pytest.fixture(scope="session")
def production(taxi_span_root, tmp_path_factory):
    root = tmp_path_factory.mktemp("production")
    data_root = str(root / "data")
    shutil.copytree(os.path.join(taxi_span_root, "span-1"), os.path.join(data_root, "span-1"))
    config_file = root / "config.yaml"
    config_file.write_text(taxi_config_text(CONFIG_TEXT))
    output = str(root / "output")
    assert cli_main(["run", "--config", str(config_file), "--data", data_root, "--output", output]) == 0
    config = load_config(str(config_file), data_root=data_root, output_dir=output)
    versions = os.listdir(config.push_dir)
    assert len(versions) == 1, versions
    report = str(root / "first_run_report.html")
    shutil.copyfile(os.path.join(output, REPORT_FILE), report)
    return Production(data_root, str(config_file), config, os.path.join(config.push_dir, versions[0]), report)
