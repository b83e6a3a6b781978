"""The warm interpreter that plays commands runs a `python -m` command as a new process would."""
import os
import subprocess
import sys

from tests.warm_python import WarmPython

PROBE = '''
import atexit, os, sys, tempfile
atexit.register(lambda: print("exit handler ran"))
print("cwd", os.getcwd(), "argv", sys.argv[1:], "first on path", sys.path[0], "name", __name__)
print("imported", "probe_sibling" in sys.modules, "env", os.environ.get("POD_VALUE"), "tmp", tempfile.gettempdir())
import probe_sibling
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
'''


def test_a_forked_command_prints_exits_and_imports_from_its_folder_as_a_new_process_does(tmp_path):
    pod = tmp_path / "pod"
    pod.mkdir()
    (pod / "probe.py").write_text(PROBE)
    (pod / "probe_sibling.py").write_text("")
    env = {**os.environ, "POD_VALUE": "from the environment", "TMPDIR": str(tmp_path)}
    warm = WarmPython({**os.environ, "POD_VALUE": "the interpreter's"}, preload=("json",))
    try:
        for code in ("0", "3"):
            command = [sys.executable, "-m", "probe", code, "--flag=x"]
            fresh = subprocess.run(command, cwd=pod, env=env, capture_output=True, text=True)
            forked = warm.run(command, cwd=str(pod), timeout=60, env=env)
            assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
            assert fresh.returncode == int(code) and "exit handler ran" in fresh.stdout
        # A second command does not see the first one's imports: each forks from the interpreter as it started.
        assert "imported False" in forked.stdout
        failing = warm.run([sys.executable, "-m", "no_such_module_here"], cwd=str(pod), timeout=60)
        assert failing.returncode == 1 and "no_such_module_here" in failing.stderr
    finally:
        warm.close()


def test_commands_whose_environments_differ_share_one_interpreter_and_each_sees_its_own(tmp_path):
    from tests import warm_python
    (tmp_path / "show.py").write_text("import os\nprint(os.environ['WHICH'], os.getppid())\n")
    command = [sys.executable, "-m", "show"]
    outputs = [warm_python.run_warm(command, cwd=str(tmp_path), env={**os.environ, "WHICH": which},
                                    preload=("json",)).stdout.split() for which in ("first", "second")]
    assert [output[0] for output in outputs] == ["first", "second"]
    assert outputs[0][1] == outputs[1][1]  # forked from the same interpreter
