"""The installed packages' index, read once per process (components/package_metadata.py)."""
import pathlib
import subprocess
import sys
import textwrap

import pytest

COUNT_READS = textwrap.dedent("""
    import importlib.metadata as metadata
    from components.package_metadata import read_package_index_once
    reads = []
    real = metadata.distributions
    metadata.distributions = lambda **kwargs: (reads.append(1), real(**kwargs))[1]
    if {once}:
        read_package_index_once()
        read_package_index_once()
    first, second = metadata.packages_distributions(), metadata.packages_distributions()
    assert first == second and "numpy" in first, sorted(first)[:5]
    import google.api_core  # checks the Python version, which reads the index
    print(len(reads))
""")


@pytest.mark.parametrize("once, reads", [(True, 1), (False, 3)])
def test_the_package_index_is_read_once_however_often_it_is_asked_for(once, reads):
    done = subprocess.run([sys.executable, "-c", COUNT_READS.format(once=once)], capture_output=True, text=True,
                          timeout=120, cwd=pathlib.Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr[-2000:]
    assert int(done.stdout.split()[-1]) == reads
