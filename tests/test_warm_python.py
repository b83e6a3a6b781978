"""The warm interpreter that plays commands runs a `python -m` command as a new process would."""
import os
import subprocess
import sys

from tests.warm_python import WarmPython

PROBE = '''
import atexit, os, sys
atexit.register(lambda: print("exit handler ran"))
print("cwd", os.getcwd(), "argv", sys.argv[1:], "first on path", sys.path[0], "name", __name__)
print("imported", "probe_sibling" in sys.modules, "env", os.environ.get("POD_VALUE"))
import probe_sibling
print("to stderr", file=sys.stderr)
sys.exit(int(sys.argv[1]))
'''


def test_a_forked_command_prints_exits_and_imports_from_its_folder_as_a_new_process_does(tmp_path):
    pod = tmp_path / "pod"
    pod.mkdir()
    (pod / "probe.py").write_text(PROBE)
    (pod / "probe_sibling.py").write_text("")
    env = {**os.environ, "POD_VALUE": "from the environment"}
    warm = WarmPython(env, preload=("json",))
    try:
        for code in ("0", "3"):
            command = [sys.executable, "-m", "probe", code, "--flag=x"]
            fresh = subprocess.run(command, cwd=pod, env=env, capture_output=True, text=True)
            forked = warm.run(command, cwd=str(pod), timeout=60)
            assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
            assert fresh.returncode == int(code) and "exit handler ran" in fresh.stdout
        # A second command does not see the first one's imports: each forks from the interpreter as it started.
        assert "imported False" in forked.stdout
        failing = warm.run([sys.executable, "-m", "no_such_module_here"], cwd=str(pod), timeout=60)
        assert failing.returncode == 1 and "no_such_module_here" in failing.stderr
    finally:
        warm.close()
