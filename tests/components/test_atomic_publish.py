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


@pytest.mark.slow
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


def test_on_an_object_store_only_what_this_pusher_claimed_is_ever_removed(tmp_path, monkeypatch):
    """The object-store algorithm on a local folder, where mtimes are real. A version prefix this pusher
    claimed but never finished (a push killed after its first copies) is no version, and the next push
    removes it once stale. Versions another tool wrote (TFX's Pusher, a copy by hand: no claim, no marker),
    which TF Serving may be serving, stay whatever their age."""
    push_dir = tmp_path / "serving"
    files = _write_model(tmp_path)
    long_ago = time.time() - publish_module.STALE_AFTER_SECONDS - 60

    def folder(name, *entries, old=True):
        for entry in entries:
            (push_dir / name / entry).parent.mkdir(parents=True, exist_ok=True)
            (push_dir / name / entry).write_bytes(b"x")
            if old:
                os.utime(push_dir / name / entry, (long_ago, long_ago))
        return push_dir / name

    killed_old = folder("1700000000", "_CLAIM-pod-1-abc", "variables/variables.index")
    killed_fresh = folder("1700000001", "_CLAIM-pod-2-def", "variables/variables.index", old=False)
    other_tool = folder("1700000002", "saved_model.pb", "variables/variables.index")  # TFX's Pusher, no marker
    other_tool_partial = folder("1700000003", "variables/variables.index")
    monkeypatch.setattr(publish_module.artifact_files, "is_local", lambda uri: False)  # take the object-store path

    assert versions(str(push_dir)) == []
    published = publish(files, str(push_dir))
    assert versions(str(push_dir)) == [int(os.path.basename(published))]
    assert int(os.path.basename(published)) > 1700000003  # never merged into an existing prefix
    assert sorted(os.listdir(push_dir)) == sorted([killed_fresh.name, other_tool.name, other_tool_partial.name,
                                                   os.path.basename(published)])
    assert not killed_old.exists()
    assert sorted(os.listdir(published)) == sorted([COMPLETE_MARKER, "model.tflite", "saved_model.pb", "variables"])


def test_a_local_serving_dir_takes_an_export_that_lives_on_an_object_store(tmp_path, tree_digest):
    """`run --pipeline-root s3://...` with the default (local) serving dir: the export's files are URIs."""
    files = _ram_model("local-target")
    push_dir = tmp_path / "serving"
    published = publish(files, str(push_dir))
    assert versions(str(push_dir)) == [int(os.path.basename(published))]
    assert sorted(os.listdir(published)) == ["fingerprint.pb", "model.tflite", "saved_model.pb", "variables"]
    with open(os.path.join(published, "variables", "variables.data-00000-of-00001"), "rb") as handle:
        with fileio.open(files[""] + "/variables/variables.data-00000-of-00001", "rb") as source:
            assert handle.read() == source.read()
    assert publish(files, f"file://{push_dir}").startswith(str(push_dir) + "/")  # a file:// URI is this folder
    assert not os.path.exists("file:")


def test_on_an_object_store_a_number_taken_meanwhile_is_skipped_and_a_failure_then_deletes_only_its_own():
    """Another pusher finished version N between our choice of N and our claim: we take N + 1, and when our
    push then fails, N is untouched (the old algorithm copied into N and then deleted it)."""
    files = _ram_model("c")
    push_dir = "ram://serving-c"
    theirs = publish(files, push_dir)
    their_tree = _ram_tree(theirs)
    real_next = publish_module._next_version
    calls = []

    def next_version_racing(directory):
        calls.append(1)
        return int(os.path.basename(theirs)) if len(calls) == 1 else real_next(directory)

    def copy_failing_in_the_version(source, target):
        if "/.staging-" not in target and target.endswith("variables.index"):
            raise OSError("connection reset")
        fileio.copy(source, target, overwrite=True)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(publish_module, "_next_version", next_version_racing)
        with pytest.raises(OSError, match="connection reset"):
            publish(files, push_dir, copy=copy_failing_in_the_version)
    assert len(calls) >= 2  # the taken number was skipped, not written into
    assert _ram_tree(theirs) == their_tree
    assert versions(push_dir) == [int(os.path.basename(theirs))]
    assert [name.rstrip("/") for name in fileio.listdir(push_dir)] == [os.path.basename(theirs)]


def test_on_an_object_store_two_claims_on_one_number_both_withdraw_and_neither_writes_into_it(monkeypatch):
    """Claim-then-verify: a writer keeps a number only when its claim is the only entry in the version prefix."""
    push_dir = "ram://serving-d"
    number = int(time.time()) + 5000
    rival_claim = f"{push_dir}/{number}/{publish_module.CLAIM_PREFIX}rival-host-1-aaaa"
    real_write = publish_module.artifact_files.write_text
    attempts = []

    def write_with_a_rival(path, text):
        real_write(path, text)
        if os.path.basename(path).startswith(publish_module.CLAIM_PREFIX) and not attempts:
            attempts.append(path)
            real_write(rival_claim, "rival\n")  # the rival claims the same number at the same moment

    monkeypatch.setattr(publish_module, "_next_version", lambda directory: number if not attempts else number + 1)
    monkeypatch.setattr(publish_module.artifact_files, "write_text", write_with_a_rival)
    monkeypatch.setattr(publish_module.random, "uniform", lambda low, high: 0.0)
    final = publish_module._claim_version(push_dir, "me-host-2-bbbb")
    assert final == f"{push_dir}/{number + 1}"
    assert [name.rstrip("/") for name in fileio.listdir(f"{push_dir}/{number}")] == [os.path.basename(rival_claim)]


# A real S3 server ---------------------------------------------------------------------------------------

@pytest.mark.slow
def test_on_s3_concurrent_pushers_each_publish_a_whole_version_and_other_tools_versions_stay(s3_server, tmp_path):
    """Three pushers (processes, as pods would be) race on one serving prefix of an S3 server, beside a
    version another tool wrote long ago (no claim, no marker): each publishes its own whole version, none
    mixes its files with another's, and the other tool's version is untouched."""
    bucket = s3_server.bucket("push-race", tmp_path / "download")
    source = _write_model(tmp_path)
    push_dir = bucket.uri("serving")
    bucket.write(f"{push_dir}/1600000000/saved_model.pb", b"TFX's Pusher wrote this")
    bucket.write(f"{push_dir}/1600000000/variables/variables.index", b"index")
    env = {**s3_server.env, "PYTHONPATH": os.pathsep.join(sys.path)}
    published = race_pushers(3, source, push_dir, timeout=300, env=env)

    assert len(set(published)) == 3
    expected = {"model.tflite", "saved_model.pb", "variables/variables.data-00000-of-00001", COMPLETE_MARKER}
    markers = set()
    for version in published:
        tree = bucket.tree(version)
        assert set(tree) == expected, (version, sorted(tree))  # whole, and no other pusher's claim or marker
        assert tree["saved_model.pb"] == open(source[""] + "/saved_model.pb", "rb").read()
        markers.add(tree[COMPLETE_MARKER].split()[1])  # the writer that completed it
    assert len(markers) == 3
    assert bucket.tree(f"{push_dir}/1600000000") == {"saved_model.pb": b"TFX's Pusher wrote this",
                                                       "variables/variables.index": b"index"}
    assert not [key for key in bucket.keys(push_dir) if key.startswith(STAGING_PREFIX)]
