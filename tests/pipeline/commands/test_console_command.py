"""The installed console command `accel-tfx` is `python -m pipeline`: setup.py declares it, the installed
distribution's entry point resolves to the same function, and the installed script exits with the same
status and message, importing a model module from the working directory as `python -m` does."""
import ast
import importlib.metadata
import os
import shutil
import subprocess
import sys

import pytest

from pipeline.commands import cli
from pipeline.config import PROJECT_ROOT

COMMAND = "accel-tfx"


def _declared() -> list[str]:
    """setup.py's console_scripts, read from its source."""
    tree = ast.parse(open(os.path.join(PROJECT_ROOT, "setup.py")).read())
    call = next(node for node in ast.walk(tree)
                if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "setup")
    entry_points = ast.literal_eval(next(keyword.value for keyword in call.keywords if keyword.arg == "entry_points"))
    return entry_points["console_scripts"]


def test_setup_declares_the_command_and_the_installed_entry_point_is_the_same_function():
    assert _declared() == [f"{COMMAND} = pipeline.commands.cli:command_line"]
    found = importlib.metadata.entry_points(group="console_scripts", name=COMMAND)
    assert found, f"no {COMMAND} entry point installed: pip install -e . (make reinstalls when setup.py changes)"
    (entry_point,) = found
    assert entry_point.value == "pipeline.commands.cli:command_line" and entry_point.load() is cli.command_line
    assert open(os.path.join(PROJECT_ROOT, "pipeline", "__main__.py")).read().count("command_line()") == 1


def _both(folder, *argv) -> list[subprocess.CompletedProcess]:
    script = os.path.join(os.path.dirname(sys.executable), COMMAND)
    assert os.path.exists(script), f"{script}: not installed (pip install -e .)"
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}  # as a user's shell has it
    return [subprocess.run(command + list(argv), cwd=folder, env=env, capture_output=True, text=True, timeout=300)
            for command in ([script], [sys.executable, "-m", "pipeline"])]


def test_the_installed_command_exits_as_python_m_pipeline_does(tmp_path):
    installed, module = _both(tmp_path, "init", "--data", "nowhere", "--label", "y")
    assert installed.returncode == module.returncode == 2
    assert installed.stderr == module.stderr and "init error: nowhere: input directory does not exist" in module.stderr
    installed, module = _both(tmp_path, "compile", "--image", "i")  # a usage error: argparse's status
    assert installed.returncode == module.returncode == 2
    assert installed.stderr.startswith(f"usage: {COMMAND} compile")
    assert module.stderr.startswith("usage: python -m pipeline compile")


def test_a_model_module_in_the_working_directory_imports_under_both_names(tmp_path):
    shutil.copy(os.path.join(PROJECT_ROOT, "schemas", "taxi", "schema.pbtxt"), tmp_path / "schema.pbtxt")
    (tmp_path / "mine.yaml").write_text("pipeline_name: mine\ndata_root: data\nschema_path: schema.pbtxt\n"
                                        "train:\n  model: model_beside_the_config\n")
    (tmp_path / "model_beside_the_config.py").write_text("def build_model(preprocessing):\n    pass\n\n\n"
                                                         "raise RuntimeError('found in the working directory')\n")
    for result in _both(tmp_path, "doctor", "--config", "mine.yaml"):
        assert result.returncode == 2, result.stderr
        assert "importing 'model_beside_the_config' failed: RuntimeError: found in the working directory" in \
            result.stderr


def _command(folder, *argv, **environment) -> subprocess.CompletedProcess:
    """`python -m pipeline ...` of the code under test, with `environment` over this process's."""
    return subprocess.run([sys.executable, "-m", "pipeline", *argv], cwd=folder, capture_output=True, text=True,
                          timeout=300, env={**os.environ, **environment})


@pytest.mark.slow
def test_a_command_prints_no_tensorflow_registration_noise_whatever_log_level_the_caller_exported(tmp_path):
    (tmp_path / "empty").mkdir()  # init reads the data with TensorFlow's libraries before it finds no file
    for level in ("0", "1", "2", "3"):
        result = _command(tmp_path, "init", "--data", "empty", "--label", "y", TF_CPP_MIN_LOG_LEVEL=level)
        assert result.returncode == 2 and "init error: empty: no TFRecord files in the input directory" in result.stderr
        assert "Unable to register" not in result.stderr, (level, result.stderr)


PROBE = """
import sys
from pipeline.commands.cli import main
code = main(sys.argv[1:])
print(code, "tensorflow" in sys.modules)
"""


@pytest.mark.parametrize("argv, message", [
    (["init", "--data", "nowhere", "--label", "y"], "init error: nowhere: input directory does not exist"),
    (["init", "--data", ".", "--label", "y", "--name", "my.project"], "init error: --name 'my.project': must be"),
    (["prepare-data", "--csv", "nowhere.csv", "--data", "d"], "data error: nowhere.csv: no such file"),
    (["run", "--config", "nowhere.yaml"], "config error: [Errno 2] No such file or directory: 'nowhere.yaml'"),
], ids=["init_no_data", "init_bad_name", "prepare_no_csv", "run_no_config"])
def test_a_command_that_fails_on_its_arguments_says_so_before_tensorflow_loads(tmp_path, argv, message):
    result = subprocess.run([sys.executable, "-c", PROBE, *argv], cwd=tmp_path, capture_output=True, text=True,
                            timeout=300)
    assert result.stdout.split() == ["2", "False"], result.stdout + result.stderr
    assert message in result.stderr, result.stderr
