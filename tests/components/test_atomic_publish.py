"""Atomic versioned publishing on a real filesystem: whole versions or nothing, previous versions untouched."""
import os
import shutil
import subprocess
import sys

import pytest

from components.atomic_pusher.publish import STAGING_PREFIX, publish, versions


@pytest.fixture
def model_files(tmp_path):
    saved_model = tmp_path / "saved_model"
    (saved_model / "variables").mkdir(parents=True)
    (saved_model / "saved_model.pb").write_bytes(os.urandom(4096))
    (saved_model / "variables" / "variables.data-00000-of-00001").write_bytes(os.urandom(65536))
    (tmp_path / "model.tflite").write_bytes(os.urandom(1024))
    return {"": str(saved_model), "model.tflite": str(tmp_path / "model.tflite")}


def test_publish_writes_a_new_numbered_version_with_every_file(model_files, tmp_path, tree_digest):
    push_dir = tmp_path / "serving"
    first = publish(model_files, str(push_dir))
    second = publish(model_files, str(push_dir))
    assert versions(str(push_dir)) == [int(os.path.basename(first)), int(os.path.basename(second))]
    assert int(os.path.basename(second)) > int(os.path.basename(first))
    assert sorted(os.listdir(second)) == ["model.tflite", "saved_model.pb", "variables"]
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


def test_staging_left_by_a_killed_push_is_invisible_and_cleaned_up(model_files, tmp_path):
    push_dir = tmp_path / "serving"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = push_dir / f"{STAGING_PREFIX}123-{int(dead.stdout)}"
    (stale / "variables").mkdir(parents=True)
    (stale / "saved_model.pb").write_bytes(b"half")
    assert versions(str(push_dir)) == []  # readers list only numbered folders
    published = publish(model_files, str(push_dir))
    assert os.listdir(push_dir) == [os.path.basename(published)]
