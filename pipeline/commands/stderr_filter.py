"""Native INFO lines kept off a quiet command line's stderr.

TensorFlow 2.16's XLA logs INFO and WARNING lines in Abseil's format ("I0000 00:00:1795322458.188568    8328
service.cc:145] ...") through a private copy of Abseil that TF_CPP_MIN_LOG_LEVEL does not reach and no
environment variable configures; and importing TensorFlow logs, as errors, three timestamped lines "Unable to
register cuFFT (cuDNN, cuBLAS) factory", noise on any machine, which a TF_CPP_MIN_LOG_LEVEL of 2 or less that the
caller exported lets through. `drop_native_info_lines()` routes file descriptor 2 through a child
process running this file as a script, which writes every line but those; Python's own stderr, native
errors and fatal messages reach the terminal unchanged and in order, even what a crashing process wrote
last. Run as a script, this module imports only the standard library (the child starts isolated).
"""
from __future__ import annotations

import re
import sys

NATIVE_INFO_LINE = re.compile(r"^(?:[IW]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] |"
                              r"WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
                              r"STDERR|"
                              # TensorFlow's import, whatever TF_CPP_MIN_LOG_LEVEL below 3 the caller exported:
                              # its CUDA plugins registered twice, on a machine with or without a GPU
                              r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: E \S+\] Unable to register "
                              r"cu(?:FFT|DNN|BLAS) factory: )")


def copy_lines(source, target, pattern: re.Pattern) -> None:
    """Writes each line of the binary stream `source` to `target`, flushed, except lines `pattern` matches."""
    pattern = re.compile(pattern.pattern.encode()) if isinstance(pattern.pattern, str) else pattern
    for line in source:
        if not pattern.match(line):
            target.write(line)
            target.flush()


def drop_native_info_lines():
    """From now on, lines on file descriptor 2 matching NATIVE_INFO_LINE are dropped. Output: a function that
    ends the filtering (fd 2 is the terminal again once the child has written what it holds); it also runs
    at exit."""
    import atexit
    import os
    import subprocess

    sys.stderr.flush()
    terminal = os.dup(2)
    child = subprocess.Popen([sys.executable, "-I", "-S", os.path.abspath(__file__), NATIVE_INFO_LINE.pattern],
                             stdin=subprocess.PIPE, stdout=terminal, stderr=terminal, start_new_session=True)
    os.dup2(child.stdin.fileno(), 2)
    child.stdin.close()  # fd 2 is now this process's only handle on the pipe

    ended = []

    def end() -> None:
        if ended:
            return
        ended.append(True)
        sys.stderr.flush()
        os.dup2(terminal, 2)  # closes the pipe: the child writes what is left and ends
        try:
            child.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a child of ours still holds the pipe: let it be
            pass

    atexit.register(end)  # also when the process exits some other way
    return end


if __name__ == "__main__":
    copy_lines(sys.stdin.buffer, sys.stdout.buffer, re.compile(sys.argv[1]))
