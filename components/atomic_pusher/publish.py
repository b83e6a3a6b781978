"""Versioned publishing of a model folder, safe for readers that poll version folders (no TFX here).

Two filesystems, two guarantees:
- Local POSIX (a disk or a mounted volume): a version is staged under a unique hidden name in the push
  directory, flushed to disk, then renamed to its number in one rename(2). Readers list only whole
  versions; a push that dies midway leaves a hidden staging folder, never a half-written version. Pushes
  to one directory are serialized by an flock on the directory itself (it cannot vanish mid-push), and a
  rename that loses a race takes the next number.
- Object stores (gs://, s3://, any non-local TensorFlow filesystem): there is no rename and no
  create-if-absent. The files are uploaded to a hidden staging prefix; then the pusher claims a version
  number by writing `<version>/_CLAIM-<writer>` and listing the version prefix: the number is its own only
  when its claim is the only entry there (two pushers that claim one number both see two entries and both
  retry with the next number; on a strongly consistent store, S3 and GCS both, two can never both win).
  The files are then copied into the version prefix with `saved_model.pb` last, and a completion marker is
  written after it. TF Serving loads a version only once its saved_model.pb exists, and by then every
  other file is in place; `versions()` counts a version only with its marker. A push that fails midway
  deletes the version it claimed; one killed midway leaves a claimed prefix with no saved_model.pb and no
  marker, which no reader takes for a version and a later push removes once stale.

Nothing a pusher did not write is ever removed: a later push removes only staging folders (named
`.staging-<host>-<pid>-<random>`) and, on object stores, claimed but unfinished versions. Versions written
by other tools (TFX's Pusher, a copy by hand), which carry no claim, stay as they are, complete or not. A
staging folder is removed only when it is certainly dead: this host's, with its process gone; or any
host's, untouched for STALE_AFTER_SECONDS (a serving directory shared by pods or hosts, where a pid means
nothing elsewhere); a claimed, unfinished version once untouched for STALE_AFTER_SECONDS.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import random
import shutil
import socket
import tempfile
import time
import uuid
from typing import Callable, Iterator

from tfx.dsl.io import fileio

from components.core import artifact_files
from components.core.path_operations import local_path

STAGING_PREFIX = ".staging-"
COMPLETE_MARKER = "_PUBLISHED"  # object stores: written last, after saved_model.pb
CLAIM_PREFIX = "_CLAIM-"  # object stores: <version>/_CLAIM-<writer>, how a pusher takes a version number
CLAIM_ATTEMPTS = 20
SAVED_MODEL_FILE = "saved_model.pb"
STALE_AFTER_SECONDS = 24 * 3600
RENAME_ATTEMPTS = 5


def versions(push_dir: str) -> list[int]:
    """The complete published versions in `push_dir`, oldest first (hidden and non-numeric entries, and on
    object stores versions without their completion marker, are not versions)."""
    numbered = _numbered(push_dir)
    if artifact_files.is_local(push_dir):
        return numbered
    return [v for v in numbered if fileio.exists(os.path.join(push_dir, str(v), COMPLETE_MARKER))]


def publish(files: dict[str, str], push_dir: str, copy: Callable[[str, str], object] | None = None) -> str:
    """Input: {relative path in the version: source file or folder}, the push directory, and the copy
    function for one file (tests pass one that fails midway). Output: the new version's folder.

    The version number is the current Unix time, or one more than the newest version if that is not larger.
    """
    copy = copy or _copy_file
    if artifact_files.is_local(push_dir):
        return _publish_local(files, local_path(push_dir), copy)
    return _publish_object_store(files, push_dir, copy)


def _copy_file(source: str, target: str) -> None:
    """One file from any filesystem to any other (an export on s3:// into a local serving dir, say)."""
    fileio.copy(source, target, overwrite=True)


def _next_version(push_dir: str) -> int:
    return max([int(time.time())] + [v + 1 for v in _numbered(push_dir)])


def _numbered(push_dir: str) -> list[int]:
    if not fileio.isdir(push_dir):
        return []
    return sorted(int(name.rstrip("/")) for name in fileio.listdir(push_dir) if name.rstrip("/").isdigit())


def _writer_name() -> str:
    """<host>-<pid>-: the start of this process's staging folder and claim names."""
    return f"{socket.gethostname()}-{os.getpid()}-"


def _staging_prefix() -> str:
    return STAGING_PREFIX + _writer_name()


# Local POSIX: stage, fsync, rename.

def _publish_local(files: dict[str, str], push_dir: str, copy: Callable[[str, str], object]) -> str:
    os.makedirs(push_dir, exist_ok=True)
    with _locked(push_dir):
        _remove_stale_staging(push_dir)
        staging = tempfile.mkdtemp(prefix=_staging_prefix(), dir=push_dir)  # unique: never copies into another's
        try:
            _upload(files, staging, copy)  # the sources may be on any filesystem (an s3:// pipeline root)
            os.chmod(staging, 0o755)  # mkdtemp makes it 0700; a published version is readable like any folder
            _fsync_tree(staging)
            final = _rename_to_next_version(staging, push_dir)
            _fsync_dir(push_dir)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
    return final


@contextlib.contextmanager
def _locked(push_dir: str) -> Iterator[None]:
    """Holds an exclusive flock on the push directory itself for the block (other pushers wait)."""
    descriptor = os.open(push_dir, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing drops the lock


def _rename_to_next_version(staging: str, push_dir: str) -> str:
    """Renames `staging` to the next free version number; a pusher that does not take the lock (another
    tool, or a filesystem without flock) can take a number first, and the rename then tries the next."""
    for _ in range(RENAME_ATTEMPTS):
        final = os.path.join(push_dir, str(_next_version(push_dir)))
        try:
            os.rename(staging, final)  # atomic on one filesystem; fails rather than merge into an existing folder
            return final
        except OSError:
            if not os.path.exists(final):
                raise
    raise FileExistsError(f"{push_dir}: no free version number after {RENAME_ATTEMPTS} attempts")


def _remove_stale_staging(push_dir: str) -> None:
    """Removes staging folders of interrupted pushes: this host's whose process is gone, or any that has
    not been touched for STALE_AFTER_SECONDS. A name that does not parse is judged by age alone."""
    host = socket.gethostname()
    for name in os.listdir(push_dir):
        if not name.startswith(STAGING_PREFIX):
            continue
        path = os.path.join(push_dir, name)
        owner_host, pid = _staging_owner(name)
        dead_here = owner_host == host and pid is not None and not _alive(pid)
        if dead_here or _age_seconds(path) > STALE_AFTER_SECONDS:
            shutil.rmtree(path, ignore_errors=True)


def _staging_owner(name: str) -> tuple[str | None, int | None]:
    """`.staging-<host>-<pid>-<random>` -> (host, pid); (None, None) for any other name."""
    parts = name[len(STAGING_PREFIX):].rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return None, None
    return parts[0], int(parts[1])


def _age_seconds(path: str) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except OSError:
        return 0.0


def _alive(pid: int) -> bool:
    if pid <= 0:
        return False
    if pid == os.getpid():
        return True  # this process holds the lock, so its own staging folder is one it is writing now
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


# Object stores: staged upload, ordered copy, completion marker.

def _publish_object_store(files: dict[str, str], push_dir: str, copy: Callable[[str, str], object]) -> str:
    _remove_stale_leftovers(push_dir)
    writer = _writer_name() + uuid.uuid4().hex[:8]
    staging = os.path.join(push_dir, STAGING_PREFIX + writer)
    try:
        uploaded = _upload(files, staging, copy)
        final = _claim_version(push_dir, writer)
        try:
            # saved_model.pb last: TF Serving loads a version once that file exists.
            for relative in sorted(uploaded, key=lambda path: (path == SAVED_MODEL_FILE, path)):
                fileio.makedirs(os.path.dirname(os.path.join(final, relative)))
                copy(os.path.join(staging, relative), os.path.join(final, relative))
            artifact_files.write_text(os.path.join(final, COMPLETE_MARKER), f"{time.time():.0f} {writer}\n")
        except BaseException:
            _remove_quietly(final)  # claimed by this push alone: nobody else wrote into it
            raise
        _remove_quietly(os.path.join(final, CLAIM_PREFIX + writer))  # complete: the marker names the writer now
    finally:
        _remove_quietly(staging)
    return final


def _claim_version(push_dir: str, writer: str) -> str:
    """Claims the next free version number for `writer` (module docstring). Output: the version's folder,
    holding only this writer's claim. Raises FileExistsError after CLAIM_ATTEMPTS lost claims."""
    for _ in range(CLAIM_ATTEMPTS):
        final = os.path.join(push_dir, str(_next_version(push_dir)))
        if fileio.isdir(final) and fileio.listdir(final):
            continue  # written meanwhile (another pusher's claim, or another tool's version): never write into it
        claim = os.path.join(final, CLAIM_PREFIX + writer)
        artifact_files.write_text(claim, writer + "\n")
        others = [name.rstrip("/") for name in fileio.listdir(final) if name.rstrip("/") != CLAIM_PREFIX + writer]
        if not others:
            return final
        _remove_quietly(claim)  # the number is another writer's, or contended: ours is withdrawn, theirs kept
        time.sleep(random.uniform(0.05, 0.5))  # two writers that both withdrew do not meet again at once
    raise FileExistsError(f"{push_dir}: no version number could be claimed after {CLAIM_ATTEMPTS} attempts")


def _upload(files: dict[str, str], staging: str, copy: Callable[[str, str], object]) -> list[str]:
    """Copies every source file under `staging`. Output: the relative paths written."""
    written = []
    for relative, source in files.items():
        if fileio.isdir(source):
            for inner in artifact_files.copy_tree(source, os.path.join(staging, relative), copy=copy):
                written.append(os.path.normpath(os.path.join(relative, inner)))
        else:
            fileio.makedirs(os.path.dirname(os.path.join(staging, relative)))
            copy(source, os.path.join(staging, relative))
            written.append(relative)
    return written


def _remove_stale_leftovers(push_dir: str) -> None:
    """Removes what killed pushes of this pusher left, once nothing in it has changed for STALE_AFTER_SECONDS:
    staging prefixes, and version prefixes that hold a claim but no completion marker. A version without a
    claim was written by someone else and is never touched, complete or not."""
    if not fileio.isdir(push_dir):
        return
    for name in fileio.listdir(push_dir):
        name = name.rstrip("/")
        path = os.path.join(push_dir, name)
        if name.isdigit():
            entries = [entry.rstrip("/") for entry in fileio.listdir(path)] if fileio.isdir(path) else []
            ours = any(entry.startswith(CLAIM_PREFIX) for entry in entries) and COMPLETE_MARKER not in entries
        else:
            ours = name.startswith(STAGING_PREFIX)
        if ours and _newest_change_age(path) > STALE_AFTER_SECONDS:
            _remove_quietly(path)


def _newest_change_age(path: str) -> float:
    newest = 0.0
    for folder, _, names in fileio.walk(path):
        for name in names:
            newest = max(newest, fileio.stat(os.path.join(folder, name)).mtime_nsec / 1e9)
    return time.time() - newest if newest else 0.0  # no mtime known (some filesystems): never stale


def _remove_quietly(path: str) -> None:
    """Removes a folder (prefix) or a single file; cleanup errors are swallowed."""
    try:
        if fileio.isdir(path):
            fileio.rmtree(path)
        elif fileio.exists(path):
            fileio.remove(path)
    except Exception:  # noqa: BLE001 - cleanup must not hide the error that caused it
        pass
