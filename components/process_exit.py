"""Ending a process past the interpreter's native teardown, where tensorflow-io's S3 filesystem aborts.

Imports only the standard library, so a command line can end through it without loading TensorFlow.
"""
from __future__ import annotations

import os
import sys
import typing


def exit_past_native_teardown(code: int | str | None) -> typing.NoReturn:
    """Ends the process as `sys.exit(code)` would: an int is the exit status, None is 0, any other value is
    printed to stderr and the status is 1. When tensorflow-io is loaded, the interpreter's teardown is
    skipped: its S3 filesystem aborts in native static destructors at exit ("pure virtual method called",
    SIGABRT), which would turn a run that finished and wrote everything into a crash. Everything a normal
    exit does first still happens: atexit handlers run, logging and Python's streams are flushed, and so is
    the C library's stdio (native output to a pipe, a pod's log, would otherwise be lost). A stream whose
    reader has gone (a broken pipe) changes nothing. Call only after all work is done."""
    if code is not None and not isinstance(code, int):
        _write_quietly(sys.stderr, f"{code}\n")
        code = 1
    code = code or 0
    if "tensorflow_io" not in sys.modules:
        sys.exit(code)
    import atexit
    import logging

    try:
        atexit._run_exitfuncs()  # what interpreter teardown would run first (CPython's own hook)
    except BaseException:  # noqa: BLE001 - a failing handler must not change how the process ends
        pass
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        _write_quietly(stream, "")
    try:
        import ctypes
        ctypes.CDLL(None).fflush(None)  # every C stdio stream of the process
    except (OSError, AttributeError):
        pass
    os._exit(code)


def _write_quietly(stream, text: str) -> None:
    """Writes `text` to a Python stream and flushes it; a closed or broken stream is ignored."""
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # BrokenPipeError is an OSError; ValueError: the stream is closed
        pass
