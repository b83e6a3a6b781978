"""Test code: runs Python commands (`python -m module args`, `python -c code args`, `python script.py args`) as forks
of one interpreter that has already imported the heavy modules (TensorFlow, TFX, Beam), so that a command a test
plays does not pay the 10 to 20 s of imports a new process pays.

`WarmPython(env, preload).start(command, cwd, stdout, stderr)` behaves as `subprocess.Popen(command, cwd=cwd,
env=env)` with its output going to those files: the command runs as `__main__` with its arguments, in `cwd`, with
the first entry of the import path a new interpreter would give it; its exit handlers run and its exit code (or
the signal that ended it) is its return code. `.run(command, cwd, timeout)` behaves as `subprocess.run(...,
capture_output=True, text=True)`. Each command forks from the same interpreter, which has run nothing but the
imports: no command sees another's state, and commands may run side by side. What a new process would add is only
the time of the imports; the command, environment, working directory and exit code are the same. A test that
checks what a new interpreter does before or while it imports (what loads, what prints) starts a new process.
`run_warm` and `start_warm` use one interpreter per PYTHONPATH and preload, shared by the calls that need it.
"""
import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

KUBEFLOW_PRELOAD = ("tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor",)  # a played pod's
CLI_PRELOAD = ("tensorflow", "apache_beam", "tensorflow_data_validation", "tfx.components",
               "tfx.orchestration.local.local_dag_runner")  # what `python -m pipeline run` imports

# The interpreter: imports `preload`, then per request line forks a supervisor, which forks the command, sends its
# pid back and writes its exit code to the request's exit file once it ends.
SERVER = r'''
import atexit, importlib, json, os, runpy, sys, tempfile, traceback, types
for name in sys.argv[1:]:
    importlib.import_module(name)
replies = os.fdopen(os.dup(1), "w")  # the protocol's channel; what the imports print goes to stderr
os.dup2(2, 1)


def run_main(argv):
    """What `python *argv` runs as __main__."""
    if argv[0] == "-m":
        sys.path[0], sys.argv = os.getcwd(), [argv[1], *argv[2:]]
        runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
    elif argv[0] == "-c":
        sys.path[0], sys.argv = "", ["-c", *argv[2:]]
        main = sys.modules["__main__"] = types.ModuleType("__main__")
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        sys.path[0], sys.argv = os.path.dirname(os.path.abspath(argv[0])), list(argv)
        runpy.run_path(argv[0], run_name="__main__")


def command(request):
    code = 1
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # found again from TMPDIR and the others, as a new process finds it
        os.chdir(request["cwd"])
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = out if request["stderr"] == request["stdout"] else os.open(
            request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        for fd, target in ((0, os.open(os.devnull, os.O_RDONLY)), (1, out), (2, err)):
            os.dup2(target, fd)
        try:
            run_main(request["argv"])
            code = 0
        except SystemExit as exit_:
            if exit_.code is None or isinstance(exit_.code, int):
                code = exit_.code or 0
            else:
                print(exit_.code, file=sys.stderr)
        except BaseException as error:  # printed from the command's own frames on, as Python prints it
            frames = error.__traceback__
            while frames and (frames.tb_frame.f_code in (command.__code__, run_main.__code__)
                              or frames.tb_frame.f_code.co_filename == runpy.__file__):
                frames = frames.tb_next
            traceback.print_exception(type(error), error, frames)
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def supervise(request, pid_channel):
    try:
        pid = os.fork()
        if pid == 0:
            os.close(pid_channel)
            command(request)
        os.write(pid_channel, str(pid).encode())
        os.close(pid_channel)
        code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        with open(request["exit_file"] + ".part", "w") as handle:
            handle.write(str(code))
        os.rename(request["exit_file"] + ".part", request["exit_file"])
    finally:
        os._exit(0)


supervisors = []
for line in sys.stdin:
    supervisors = [pid for pid in supervisors if not os.waitpid(pid, os.WNOHANG)[0]]
    request = json.loads(line)
    read, write = os.pipe()
    supervisor = os.fork()
    if supervisor == 0:
        replies.close()
        os.close(read)
        supervise(request, write)
    os.close(write)
    with os.fdopen(read) as channel:
        pid = channel.read()
    supervisors.append(supervisor)
    replies.write(json.dumps({"pid": int(pid) if pid else None}) + "\n")
    replies.flush()
'''


class WarmProcess:
    """A command WarmPython.start forked: the part of subprocess.Popen the tests use."""

    def __init__(self, args: list[str], pid: int, exit_file: str):
        self.args, self.pid, self.returncode, self._exit_file = args, pid, None, exit_file

    def poll(self) -> int | None:
        if self.returncode is None and os.path.exists(self._exit_file):
            with open(self._exit_file) as handle:
                self.returncode = int(handle.read())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:  # it ended a moment ago; its exit file is being written
                pass

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class WarmPython:
    def __init__(self, env: dict[str, str], preload: tuple[str, ...]):
        """`env`: the interpreter's environment (each command's by default); it imports the modules `preload`."""
        self.env = dict(env)
        self._server = subprocess.Popen([sys.executable, "-c", SERVER, *preload], env=env, cwd=tempfile.gettempdir(),
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._jobs = tempfile.mkdtemp(prefix="warm-jobs-")  # the exit files

    def start(self, command: list[str], cwd: str, stdout: str, stderr: str,
              env: dict[str, str] | None = None) -> WarmProcess:
        """Input: `[python, *arguments]`, the working directory, the files its standard output and error go to
        (the same path for both: one stream) and its environment (default: the interpreter's), which must give
        the same PYTHONPATH: the import path was set when the interpreter started. Output: the running command."""
        env = dict(self.env if env is None else env)
        assert env.get("PYTHONPATH") == self.env.get("PYTHONPATH"), "a warm interpreter keeps its import path"
        exit_file = tempfile.mktemp(dir=self._jobs)
        request = {"argv": command[1:], "cwd": cwd, "env": env, "stdout": stdout, "stderr": stderr,
                   "exit_file": exit_file}
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        reply = self._server.stdout.readline()
        assert reply, f"the warm interpreter ended (exit {self._server.poll()}) while starting {command[1:3]}"
        pid = json.loads(reply)["pid"]
        assert pid, f"the warm interpreter could not fork {command[1:3]} (see the test's stderr)"
        return WarmProcess(command, pid, exit_file)

    def run(self, command: list[str], cwd: str, timeout: float,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """What `subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)`
        returns (start's inputs); TimeoutExpired, the command killed, past `timeout`."""
        with tempfile.TemporaryDirectory(prefix="warm-run-") as captured:
            stdout, stderr = os.path.join(captured, "stdout"), os.path.join(captured, "stderr")
            process = self.start(command, cwd, stdout, stderr, env)
            try:
                code = process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
            with open(stdout) as out, open(stderr) as err:
                return subprocess.CompletedProcess(command, code, out.read(), err.read())

    def close(self) -> None:
        if self._server.poll() is None:
            self._server.stdin.close()
            self._server.wait(timeout=60)


_SHARED: dict[tuple, WarmPython] = {}  # at most one: each holds the memory of its imports


def _shared(env: dict[str, str], preload: tuple[str, ...]) -> WarmPython:
    """The interpreter for this PYTHONPATH and preload: started at the first call that needs it, ended by a call
    that needs another or when this process exits (commands it started run on)."""
    key = (env.get("PYTHONPATH"), preload)
    if key not in _SHARED:
        if not _SHARED:
            atexit.register(lambda: [warm.close() for warm in _SHARED.values()])
        for warm in _SHARED.values():
            warm.close()
        _SHARED.clear()
        _SHARED[key] = WarmPython(env, preload)
    return _SHARED[key]


def run_warm(command: list[str], cwd: str, timeout: float = 1800, env: dict[str, str] | None = None,
             preload: tuple[str, ...] = CLI_PRELOAD) -> subprocess.CompletedProcess:
    """`WarmPython.run` with the environment `env` (default: this process's at the call) in a shared interpreter."""
    env = dict(os.environ if env is None else env)
    return _shared(env, preload).run(command, cwd=cwd, timeout=timeout, env=env)


def start_warm(command: list[str], cwd: str, stdout: str, stderr: str, env: dict[str, str] | None = None,
               preload: tuple[str, ...] = CLI_PRELOAD) -> WarmProcess:
    """`WarmPython.start` with the environment `env` (default: this process's at the call) in a shared
    interpreter."""
    env = dict(os.environ if env is None else env)
    return _shared(env, preload).start(command, cwd, stdout, stderr, env)
