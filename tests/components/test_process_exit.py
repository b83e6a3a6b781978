"""Ending a process past native teardown (tensorflow-io's S3 filesystem aborts in its static destructors):
what a normal exit does first still happens, and the exit status and message are the ones asked for."""
import os
import subprocess
import sys
import textwrap

import pytest

from pipeline.config import PROJECT_ROOT

LOAD_TENSORFLOW_IO = "import tensorflow_io, sys; assert 'tensorflow_io' in sys.modules\n"


def _environment() -> dict:
    """This environment with stdout buffered as it is for a pipe (whatever the caller exported)."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONUNBUFFERED"}
    return {**env, "PYTHONPATH": PROJECT_ROOT, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONWARNINGS": "ignore"}


def _python(code: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", LOAD_TENSORFLOW_IO + textwrap.dedent(code)], env=_environment(),
                          cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300, **kwargs)


@pytest.mark.slow
def test_native_stdio_and_atexit_handlers_are_flushed_and_run_and_the_status_kept():
    result = _python("""
        import atexit, ctypes
        from components.process_exit import exit_past_native_teardown
        atexit.register(lambda: print("atexit handler ran", flush=True))
        ctypes.CDLL(None).printf(b"native line written through C stdio, still in its buffer")
        print("python line", end="")
        exit_past_native_teardown(3)
    """)
    assert result.returncode == 3, result.stderr[-2000:]
    assert "native line written through C stdio, still in its buffer" in result.stdout
    assert "python line" in result.stdout and "atexit handler ran" in result.stdout
    assert "pure virtual method called" not in result.stderr


@pytest.mark.slow
def test_a_message_is_printed_with_status_1_and_interrupts_end_with_130():
    result = _python("""
        from components.process_exit import exit_past_native_teardown
        exit_past_native_teardown("step failed: the input has no eval split")
    """)
    assert result.returncode == 1
    assert result.stderr.splitlines()[-1] == "step failed: the input has no eval split"
    interrupted = _python("""
        import runpy
        import pipeline.commands.cli
        def interrupted(argv=None):
            raise KeyboardInterrupt
        pipeline.commands.cli.main = interrupted
        runpy.run_module("pipeline", run_name="__main__")
    """)
    assert interrupted.returncode == 130 and interrupted.stderr.strip().endswith("interrupted"), interrupted.stderr


@pytest.mark.slow
def test_a_reader_that_went_away_does_not_bring_the_abort_back():
    """`python -m pipeline ... | head -1`: stdout's reader is gone when the process flushes at exit."""
    process = subprocess.Popen(
        [sys.executable, "-c", LOAD_TENSORFLOW_IO + textwrap.dedent("""
            import time
            from components.process_exit import exit_past_native_teardown
            print("x" * 4000)  # held in Python's buffer: written only by the flush at exit
            time.sleep(2)  # meanwhile the reader goes away
            exit_past_native_teardown(4)
        """)], env=_environment(), cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    process.stdout.close()  # the reader goes away at once
    stderr = process.stderr.read().decode()
    assert process.wait(timeout=300) == 4, stderr[-2000:]
    assert "Aborted" not in stderr and "pure virtual method called" not in stderr
