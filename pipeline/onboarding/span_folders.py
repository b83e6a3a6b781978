"""A data root's span folders: which there are, the note each one holds (SPAN_NOTE_FILE), and a span written aside
and put in place whole (publish), the staging folder removed quietly when a write fails.
"""
from __future__ import annotations

import json
import os
import re

from components.core.path_operations import file_system

SPAN_NOTE_FILE = ".span.json"  # in a span folder: how it was prepared (its source, the rows left out and why)


def span_names(data_root: str) -> list[str]:
    """The span-N folders of a data root (none when it does not exist)."""
    files = file_system(data_root)
    if not files.isdir(data_root):
        return []
    return sorted(name.rstrip("/") for name in files.listdir(data_root)
                  if re.fullmatch(r"span-[0-9]+", name.rstrip("/")))


def publish(files, staging: str, span_dir: str) -> None:
    """Puts a completely written span folder in place of `span_dir`: a rename of the folder (a local path),
    or of each file (an object store, where folders cannot be renamed); an existing span is moved aside first
    and removed after."""
    if "://" in span_dir:
        files.makedirs(span_dir)
        for name in files.listdir(staging):
            files.rename(os.path.join(staging, name.rstrip("/")), os.path.join(span_dir, name.rstrip("/")))
        remove_quietly(files, staging)
        return
    replaced = os.path.join(os.path.dirname(span_dir), "." + os.path.basename(span_dir) + ".replaced")
    if files.exists(span_dir):
        remove_quietly(files, replaced)
        files.rename(span_dir, replaced)
        try:
            files.rename(staging, span_dir)
        except BaseException:
            files.rename(replaced, span_dir)
            raise
        remove_quietly(files, replaced)
    else:
        files.rename(staging, span_dir)


def remove_quietly(files, path: str) -> None:
    """Removes a file or folder if it is there; a failure to remove is ignored (it runs while cleaning up)."""
    try:
        if files.isdir(path):
            files.rmtree(path)
        elif files.exists(path):
            files.remove(path)
    except Exception:  # noqa: BLE001 - cleaning up after a failure must not hide the failure
        pass


def write_json(files, path: str, value: dict) -> None:
    """Writes `value` as indented JSON (UTF-8 kept) to `path` through `files` (file_system's operations)."""
    with files.open(path, "w") as handle:
        handle.write(json.dumps(value, indent=2, ensure_ascii=False))


def read_span_note(span_dir: str) -> dict:
    """A span folder's SPAN_NOTE_FILE ({} when there is none): its CSV, the rows written, `left_out` as
    [{rows, why}], the empty rows skipped."""
    files = file_system(span_dir)
    path = os.path.join(span_dir, SPAN_NOTE_FILE)
    if not files.exists(path):
        return {}
    with files.open(path) as handle:
        return json.loads(handle.read())
