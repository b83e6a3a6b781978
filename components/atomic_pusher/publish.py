"""Atomic, versioned publishing of a model folder (no TFX here).

A version is staged under a hidden name in the push directory, flushed to disk, then renamed to its
number in one rename(2): a reader (TF Serving, a device sync) lists only whole versions, and a push that
dies midway leaves a hidden staging folder, never a half-written version. Stale staging folders from
interrupted pushes (their process gone) are removed by the next push.
"""
from __future__ import annotations

import os
import shutil
import time
from typing import Callable

STAGING_PREFIX = ".staging-"


def versions(push_dir: str) -> list[int]:
    """The published versions in `push_dir`, oldest first (hidden and non-numeric entries are not versions)."""
    if not os.path.isdir(push_dir):
        return []
    return sorted(int(name) for name in os.listdir(push_dir) if name.isdigit())


def publish(files: dict[str, str], push_dir: str, copy: Callable[[str, str], object] = shutil.copy2) -> str:
    """Input: {relative path in the version: source file or folder}, the push directory, and the copy
    function (shutil.copy2; tests pass one that fails midway). Output: the new version's folder.

    The version number is the current Unix time, or one more than the newest version if that is not larger.
    """
    os.makedirs(push_dir, exist_ok=True)
    _remove_stale_staging(push_dir)
    version = max([int(time.time())] + [v + 1 for v in versions(push_dir)])
    staging = os.path.join(push_dir, f"{STAGING_PREFIX}{version}-{os.getpid()}")
    try:
        for relative, source in files.items():
            target = os.path.join(staging, relative)
            if os.path.isdir(source):
                shutil.copytree(source, target, copy_function=copy, dirs_exist_ok=True)
            else:
                os.makedirs(os.path.dirname(target), exist_ok=True)
                copy(source, target)
        _fsync_tree(staging)
        final = os.path.join(push_dir, str(version))
        os.rename(staging, final)  # atomic on one filesystem; fails rather than merge if `final` exists
        _fsync_dir(push_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def _remove_stale_staging(push_dir: str) -> None:
    """Removes staging folders whose push process is gone (a push running elsewhere keeps its own)."""
    for name in os.listdir(push_dir):
        if name.startswith(STAGING_PREFIX) and not _alive(int(name.rsplit("-", 1)[-1] or 0)):
            shutil.rmtree(os.path.join(push_dir, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    if pid <= 0 or pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _fsync_tree(root: str) -> None:
    for folder, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(folder, name), "rb") as handle:
                os.fsync(handle.fileno())
        _fsync_dir(folder)


def _fsync_dir(folder: str) -> None:
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
