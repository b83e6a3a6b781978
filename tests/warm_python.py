"""Test code: runs `python -m <module> <args>` commands as forks of one interpreter that has already imported
the heavy modules (TensorFlow, TFX, Beam), so that a command a test plays does not pay the 10 to 20 s of imports a
new process pays.

`WarmPython(env, preload).run(command, cwd, timeout)` behaves as `subprocess.run(command, cwd=cwd, env=env,
capture_output=True, text=True)` for a command of the form `python -m module args...`: the module runs as
`__main__` with those arguments, in `cwd` (first on the import path, as `python -m` puts it), its standard output
and error captured, its exit handlers run, its exit code returned. Each command forks from the same interpreter,
which has run nothing but the imports: no command sees another's state. What a new process would add is only the
time of the imports; the command, environment, working directory and exit code are the same. A test that checks
what a new interpreter does before or while it imports (what loads, what prints) starts a new process instead.
`run_warm(command, cwd)` runs a command with the caller's environment in a shared interpreter that imported
`CLI_PRELOAD`.
"""
import atexit
import json
import os
import subprocess
import sys
import tempfile

KUBEFLOW_PRELOAD = ("tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",)  # a played pod's
CLI_PRELOAD = ("tensorflow", "apache_beam", "tensorflow_data_validation", "tfx.components",
               "tfx.orchestration.local.local_dag_runner")  # what `python -m pipeline run` imports

SERVER = r'''
import atexit, importlib, json, os, runpy, signal, sys, tempfile, time, traceback
for name in sys.argv[1:]:
    importlib.import_module(name)
replies = os.fdopen(os.dup(1), "w")  # the protocol's channel; what the imports or steps print goes to stderr
os.dup2(2, 1)


def child(request):
    code = 1
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from TMPDIR and the others, as a new process finds it
        os.chdir(request["cwd"])
        for fd, path in ((0, os.devnull), (1, request["stdout"]), (2, request["stderr"])):
            os.dup2(os.open(path, os.O_RDONLY if fd == 0 else os.O_WRONLY | os.O_CREAT | os.O_TRUNC), fd)
        sys.path[0] = request["cwd"]
        sys.argv = [request["module"], *request["args"]]
        try:
            runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
        except BaseException:
            traceback.print_exc()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        replies.close()
        child(request)
    deadline = time.monotonic() + request["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            code = "timeout"
            break
        time.sleep(0.05)
    replies.write(json.dumps({"code": code}) + "\n")
    replies.flush()
'''


class WarmPython:
    def __init__(self, env: dict[str, str], preload: tuple[str, ...]):
        """`env`: the interpreter's environment (each command's by default); it imports the modules `preload`."""
        self.env = dict(env)
        self._server = subprocess.Popen([sys.executable, "-c", SERVER, *preload], env=env, cwd=tempfile.gettempdir(),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def run(self, command: list[str], cwd: str, timeout: float,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """Input: `[python, -m, module, *args]`, the working directory, seconds before the command is killed and
        the command's environment (default: the interpreter's), which must give the same PYTHONPATH: the import
        path was set when the interpreter started. Output: what `subprocess.run(..., capture_output=True,
        text=True)` returns; TimeoutExpired past `timeout`."""
        assert command[1] == "-m", f"only `python -m module` commands run warm: {command[:3]}"
        env = dict(self.env if env is None else env)
        assert env.get("PYTHONPATH") == self.env.get("PYTHONPATH"), "a warm interpreter keeps its import path"
        with tempfile.TemporaryDirectory(prefix="warm-pod-") as captured:
            stdout, stderr = os.path.join(captured, "stdout"), os.path.join(captured, "stderr")
            request = {"module": command[2], "args": command[3:], "cwd": cwd, "env": env, "stdout": stdout,
                       "stderr": stderr, "timeout": timeout}
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            reply = self._server.stdout.readline()
            assert reply, f"the warm interpreter ended (exit {self._server.poll()}) while running {command[2]}"
            code = json.loads(reply)["code"]
            if code == "timeout":
                raise subprocess.TimeoutExpired(command, timeout)
            with open(stdout) as out, open(stderr) as err:
                return subprocess.CompletedProcess(command, code, out.read(), err.read())

    def close(self) -> None:
        if self._server.poll() is None:
            self._server.stdin.close()
            self._server.wait(timeout=60)


_SHARED: dict[tuple, WarmPython] = {}  # at most one: each holds the memory of its imports


def run_warm(command: list[str], cwd: str, timeout: float = 1800, env: dict[str, str] | None = None,
             preload: tuple[str, ...] = CLI_PRELOAD) -> subprocess.CompletedProcess:
    """`WarmPython.run` with the environment `env` (default: this process's at the call) in an interpreter shared
    by the calls with the same PYTHONPATH and preload: started at the first such call, ended by a call that needs
    another or when this process exits."""
    env = dict(os.environ if env is None else env)
    key = (env.get("PYTHONPATH"), preload)
    if key not in _SHARED:
        if not _SHARED:
            atexit.register(lambda: [warm.close() for warm in _SHARED.values()])
        for warm in _SHARED.values():
            warm.close()
        _SHARED.clear()
        _SHARED[key] = WarmPython(env, preload)
    return _SHARED[key].run(command, cwd=cwd, timeout=timeout, env=env)
