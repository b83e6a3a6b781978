"""Versioned publishing on real filesystems: whole versions or nothing, previous versions untouched.

Local POSIX directories get the staged rename; object stores (here TensorFlow's in-process ram://
filesystem, and the same algorithm on a local folder where mtimes are real) get the staged upload with
saved_model.pb and the completion marker last.
"""
import os
import shutil
import socket
import subprocess
import sys
import time

import pytest
from tfx.dsl.io import fileio

from components.atomic_pusher import publish as publish_module
from components.atomic_pusher.publish import COMPLETE_MARKER, STAGING_PREFIX, publish, versions
from tests.components.pushing import race_pushers


def _write_model(root) -> dict:
    saved_model = root / "saved_model"
    (saved_model / "variables").mkdir(parents=True)
    (saved_model / "saved_model.pb").write_bytes(os.urandom(4096))
    (saved_model / "variables" / "variables.data-00000-of-00001").write_bytes(os.urandom(65536))
    (root / "model.tflite").write_bytes(os.urandom(1024))
    return {"": str(saved_model), "model.tflite": str(root / "model.tflite")}


@pytest.fixture
def model_files(tmp_path):
    return _write_model(tmp_path)


def _dead_pid() -> int:
    return int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)


def test_publish_writes_a_new_numbered_version_with_every_file(model_files, tmp_path, tree_digest):
    push_dir = tmp_path / "serving"
    first = publish(model_files, str(push_dir))
    second = publish(model_files, str(push_dir))
    assert versions(str(push_dir)) == [int(os.path.basename(first)), int(os.path.basename(second))]
    assert int(os.path.basename(second)) > int(os.path.basename(first))
    assert sorted(os.listdir(second)) == ["model.tflite", "saved_model.pb", "variables"]
    assert oct(os.stat(second).st_mode & 0o777) == "0o755"  # readable by a serving process of another user
    assert tree_digest(second) == tree_digest(first)
    assert not [name for name in os.listdir(push_dir) if name.startswith(STAGING_PREFIX)]


def test_a_push_that_fails_midway_leaves_the_previous_version_exactly_as_it_was(model_files, tmp_path, tree_digest):
    push_dir = tmp_path / "serving"
    previous = publish(model_files, str(push_dir))
    before = tree_digest(push_dir)
    copied = []

    def copy_then_fail(source, target):
        if copied:
            raise OSError("disk full")
        copied.append(target)
        return shutil.copy2(source, target)

    with pytest.raises(OSError, match="disk full"):
        publish(model_files, str(push_dir), copy=copy_then_fail)
    assert copied  # the failure happened after part of the new version was written
    assert os.listdir(push_dir) == [os.path.basename(previous)]
    assert tree_digest(push_dir) == before


def test_stale_staging_is_removed_only_when_certainly_dead(model_files, tmp_path):
    """This host's staging with a dead pid goes; another host's (a pod sharing the volume, whose pid means
    nothing here) stays until it is old; a name that does not parse never crashes the push."""
    push_dir = tmp_path / "serving"
    host = socket.gethostname()
    dead_here = push_dir / f"{STAGING_PREFIX}{host}-{_dead_pid()}-abc123"
    other_host_fresh = push_dir / f"{STAGING_PREFIX}pod-7f9c-1-abc123"  # pid 1 is alive here, and irrelevant
    other_host_old = push_dir / f"{STAGING_PREFIX}pod-7f9c-{_dead_pid()}-def456"
    unparsable_fresh = push_dir / f"{STAGING_PREFIX}not-a-pid"
    unparsable_old = push_dir / f"{STAGING_PREFIX}x"
    for stale in (dead_here, other_host_fresh, other_host_old, unparsable_fresh, unparsable_old):
        (stale / "variables").mkdir(parents=True)
        (stale / "saved_model.pb").write_bytes(b"half")
    long_ago = time.time() - publish_module.STALE_AFTER_SECONDS - 60
    for old in (other_host_old, unparsable_old):
        os.utime(old, (long_ago, long_ago))
    assert versions(str(push_dir)) == []  # readers list only numbered folders

    published = publish(model_files, str(push_dir))
    assert sorted(os.listdir(push_dir)) == sorted([os.path.basename(published), other_host_fresh.name,
                                                   unparsable_fresh.name])


def test_concurrent_pushers_to_one_directory_each_publish_a_whole_version(model_files, tmp_path, tree_digest):
    push_dir = str(tmp_path / "serving")
    os.makedirs(push_dir)
    published = race_pushers(3, model_files, push_dir, timeout=120)
    assert len(set(published)) == 3 and versions(push_dir) == sorted(int(os.path.basename(p)) for p in published)
    assert len({tree_digest(path) for path in published}) == 1  # three identical, whole versions
    assert sorted(os.listdir(push_dir)) == sorted(os.path.basename(p) for p in published)


def test_a_rename_that_loses_the_race_for_a_number_takes_the_next_one(model_files, tmp_path, monkeypatch):
    """A pusher that does not take the lock publishes version N between our choice of N and our rename."""
    push_dir = tmp_path / "serving"
    taken = int(time.time()) + 1000
    real_next = publish_module._next_version
    calls = []

    def next_version_racing(directory):
        calls.append(1)
        if len(calls) == 1:
            (push_dir / str(taken) / "variables").mkdir(parents=True)  # the other pusher's whole version
            return taken
        return real_next(directory)

    monkeypatch.setattr(publish_module, "_next_version", next_version_racing)
    published = publish(model_files, str(push_dir))
    assert int(os.path.basename(published)) == taken + 1
    assert os.listdir(push_dir / str(taken)) == ["variables"]  # the other version was not merged into


# Object stores -------------------------------------------------------------------------------------------

def _ram_model(name: str) -> dict:
    root = f"ram://models/{name}"
    files = {"saved_model.pb": b"graph" * 100, "variables/variables.index": b"index",
             "variables/variables.data-00000-of-00001": os.urandom(65536), "fingerprint.pb": b"fp"}
    for relative, data in files.items():
        fileio.makedirs(os.path.dirname(f"{root}/saved_model/{relative}"))
        with fileio.open(f"{root}/saved_model/{relative}", "wb") as handle:
            handle.write(data)
    with fileio.open(f"{root}/model.tflite", "wb") as handle:
        handle.write(b"tflite")
    return {"": f"{root}/saved_model", "model.tflite": f"{root}/model.tflite"}


def _ram_tree(root: str) -> dict:
    tree = {}
    for folder, _, names in fileio.walk(root):
        for name in names:
            with fileio.open(os.path.join(folder, name), "rb") as handle:
                tree[os.path.relpath(os.path.join(folder, name), root)] = handle.read()
    return tree


def test_on_an_object_store_saved_model_pb_then_the_marker_come_last(tmp_path):
    files = _ram_model("a")
    push_dir = "ram://serving-a"
    order = []

    def recording_copy(source, target):
        order.append(target)
        fileio.copy(source, target, overwrite=True)

    published = publish(files, push_dir, copy=recording_copy)
    version_copies = [os.path.relpath(path, published) for path in order if path.startswith(published)]
    assert version_copies[-1] == "saved_model.pb"
    assert sorted(version_copies) == ["fingerprint.pb", "model.tflite", "saved_model.pb",
                                      "variables/variables.data-00000-of-00001", "variables/variables.index"]
    assert sorted(_ram_tree(published)) == sorted(version_copies + [COMPLETE_MARKER])
    assert versions(push_dir) == [int(os.path.basename(published))]
    assert [name.rstrip("/") for name in fileio.listdir(push_dir)] == [os.path.basename(published)]  # staging gone


def test_on_an_object_store_a_failed_push_leaves_no_version_that_looks_complete():
    files = _ram_model("b")
    push_dir = "ram://serving-b"
    previous = publish(files, push_dir)
    before = _ram_tree(push_dir)

    def copy_failing_in_the_version(source, target):
        if "/.staging-" not in target and target.endswith("variables.index"):
            raise OSError("connection reset")
        fileio.copy(source, target, overwrite=True)

    with pytest.raises(OSError, match="connection reset"):
        publish(files, push_dir, copy=copy_failing_in_the_version)
    assert versions(push_dir) == [int(os.path.basename(previous))]
    assert _ram_tree(push_dir) == before  # the partial version and the staging prefix were deleted


def test_on_an_object_store_a_killed_push_is_not_a_version_and_is_removed_once_stale(tmp_path, monkeypatch):
    """The object-store algorithm on a local folder, where mtimes are real: a version prefix with no marker
    (a push killed after its first copies) is no version, and the next push removes it once stale."""
    push_dir = tmp_path / "serving"
    files = _write_model(tmp_path)
    killed = push_dir / "1700000000"
    (killed / "variables").mkdir(parents=True)
    (killed / "variables" / "variables.index").write_bytes(b"partial")
    fresh_killed = push_dir / "1700000001"
    (fresh_killed / "variables").mkdir(parents=True)
    (fresh_killed / "variables" / "variables.index").write_bytes(b"partial")
    long_ago = time.time() - publish_module.STALE_AFTER_SECONDS - 60
    os.utime(killed / "variables" / "variables.index", (long_ago, long_ago))
    monkeypatch.setattr(publish_module.artifact_files, "is_local", lambda uri: False)  # take the object-store path

    assert versions(str(push_dir)) == []
    published = publish(files, str(push_dir))
    assert versions(str(push_dir)) == [int(os.path.basename(published))]
    assert int(os.path.basename(published)) > 1700000001  # never merged into a killed push's prefix
    assert sorted(os.listdir(push_dir)) == sorted([fresh_killed.name, os.path.basename(published)])
