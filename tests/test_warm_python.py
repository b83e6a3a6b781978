"""The warm interpreter that plays commands runs `python -m`, `python -c` and `python script.py` commands as a new
process would, side by side when started, and returns the code or signal that ended each."""
import os
import signal
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
        # a script, and code on the command line: the same output, exit and first entry of the import path
        for command in ([sys.executable, str(pod / "probe.py"), "3"], [sys.executable, "-c", PROBE, "0"]):
            fresh = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
            forked = warm.run(command, cwd=str(tmp_path), timeout=60, env=env)
            assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
        assert "first on path  name __main__" in forked.stdout and "probe_sibling" in forked.stderr  # -c: ''
    finally:
        warm.close()


def test_started_commands_run_side_by_side_and_report_how_they_ended(tmp_path):
    """Two commands that wait for each other both finish; one output file can take both streams; a command
    killed, or killing itself, ends with the signal's negative number, as subprocess reports it."""
    meet = ("import os, sys, time\nopen(sys.argv[1], 'w').close()\nwhile not os.path.exists(sys.argv[2]): "
            "time.sleep(0.01)\nprint('met', file=sys.stderr); print('out')\n")
    warm = WarmPython(dict(os.environ), preload=("json",))
    try:
        logs = [str(tmp_path / f"log-{index}") for index in range(2)]
        flags = [str(tmp_path / f"flag-{index}") for index in range(2)]
        jobs = [warm.start([sys.executable, "-c", meet, flags[index], flags[1 - index]], str(tmp_path), log, log)
                for index, log in enumerate(logs)]
        assert [job.wait(timeout=60) for job in jobs] == [0, 0]
        assert [sorted(open(log).read().split()) for log in logs] == [["met", "out"]] * 2
        sleeper = warm.start([sys.executable, "-c", "import time; time.sleep(600)"], str(tmp_path), logs[0], logs[1])
        assert sleeper.poll() is None
        sleeper.kill()
        assert sleeper.wait(timeout=60) == -signal.SIGKILL
        suicide = warm.start([sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"],
                             str(tmp_path), logs[0], logs[0])
        assert suicide.wait(timeout=60) == -signal.SIGTERM
    finally:
        warm.close()


def test_commands_whose_environments_differ_share_one_interpreter_and_each_sees_its_own(tmp_path):
    from tests import warm_python
    # the command's parent watches it; the parent's parent is the interpreter it forked from
    (tmp_path / "show.py").write_text("import os\nprint(os.environ['WHICH'], "
                                      "open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])\n")
    command = [sys.executable, "-m", "show"]
    outputs = [warm_python.run_warm(command, cwd=str(tmp_path), env={**os.environ, "WHICH": which},
                                    preload=("json",)).stdout.split() for which in ("first", "second")]
    assert [output[0] for output in outputs] == ["first", "second"]
    [warm] = warm_python._SHARED.values()
    assert outputs[0][1] == outputs[1][1] == str(warm._server.pid)  # forked from the same interpreter
