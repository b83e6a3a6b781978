"""The installed packages' metadata index, read once per process.

google-api-core checks the Python version when each of its client packages is imported (Beam's Google Cloud
IO imports several of them with TFX), and every check calls `importlib.metadata.packages_distributions()`,
which reads the file list of every installed distribution again: about 0.4 s a call in this project's
environment, four to fifteen calls per command. The installed packages do not change while a command runs,
so the index is kept after its first read. Imports only the standard library.
"""
from __future__ import annotations

import functools
import importlib.metadata


def read_package_index_once() -> None:
    """Makes `importlib.metadata.packages_distributions()` read the installed distributions on its first call
    only and give the same mapping after (a mapping of top-level import names to distribution names; read
    it, do not change it). Calling this again changes nothing."""
    if not hasattr(importlib.metadata.packages_distributions, "cache_info"):
        importlib.metadata.packages_distributions = functools.lru_cache(maxsize=None)(
            importlib.metadata.packages_distributions)
