"""Loading a bench script as a module, as `python bench/<name>.py` runs it: the bench folder first on sys.path
(the scripts import each other by their file names)."""
import contextlib
import importlib.util
import os
import sys

from pipeline.config import PROJECT_ROOT

BENCH = os.path.join(PROJECT_ROOT, "bench")


@contextlib.contextmanager
def bench_script(name: str):
    """Input: a script's name without .py. Yields it loaded as a module; sys.path is restored after."""
    sys.path.insert(0, BENCH)
    try:
        spec = importlib.util.spec_from_file_location(name, os.path.join(BENCH, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(BENCH)
