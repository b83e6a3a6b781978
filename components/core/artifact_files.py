"""Reading and writing artifact files through TFX's filesystem layer (tfx.dsl.io.fileio, i.e. tf.io.gfile).

Every artifact URI may be a local path, gs://, s3:// or any other filesystem TensorFlow has registered:
Kubeflow and Vertex AI keep artifacts on object storage. Python's open/os/shutil would fail there, or
worse, create a local folder in the pod that is lost with it (tfx#5404). Components read and write
artifact contents only through these helpers; a lint test (tests/components/test_no_local_io_on_artifacts.py)
keeps open/os/shutil off artifact URIs, and the Kubeflow DAG test runs every executor on an S3 server.
"""
from __future__ import annotations

import json
import os
from typing import Any, Callable

from tfx.dsl.io import fileio


# URI schemes whose TensorFlow filesystem comes from tensorflow-io (imported on demand: it is large, and
# TensorFlow itself serves local paths, gs:// and ram://).
TENSORFLOW_IO_SCHEMES = ("s3://", "hdfs://", "az://")


def register_filesystems_for(*uris: str) -> None:
    """Makes tf.io.gfile (and so tfx.dsl.io.fileio) able to open every URI in `uris`: imports tensorflow-io
    when one of them is on a filesystem only it provides. Raises RuntimeError naming the URI when it is
    not installed."""
    needing = [uri for uri in uris if uri and any(scheme in uri for scheme in TENSORFLOW_IO_SCHEMES)]
    if not needing:
        return
    try:
        import tensorflow_io  # noqa: F401 - registers s3://, hdfs:// and az:// with tf.io.gfile
    except ImportError as error:
        raise RuntimeError(f"{needing[0][:120]}: this filesystem needs tensorflow-io "
                           f"(pip install '.[s3]' with the project's constraints.txt)") from error


def is_local(uri: str) -> bool:
    """True for a path on a local (POSIX) filesystem: no scheme, or file://."""
    return "://" not in uri or uri.startswith("file://")


def write_bytes(path: str, data: bytes) -> None:
    """Writes `data` to `path`, creating its parent folders (a no-op on object stores, which have none)."""
    fileio.makedirs(os.path.dirname(path.rstrip("/")))
    with fileio.open(path, "wb") as handle:
        handle.write(data)


def write_text(path: str, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_json(path: str, value: Any) -> None:
    write_text(path, json.dumps(value, indent=2))


def read_bytes(path: str) -> bytes:
    register_filesystems_for(path)  # a reader of MLMD's URIs (status, the run report) may not know them yet
    return _read_registered(path)


def read_json(path: str) -> Any:
    return _parse_json(read_bytes(path))


def read_json_if_exists(path: str) -> Any | None:
    """The JSON at `path`, or None when there is no such file or it does not parse."""
    register_filesystems_for(path)  # once, for both the existence check and the read
    try:
        return _parse_json(_read_registered(path)) if path and fileio.exists(path) else None
    except (ValueError, OSError):
        return None


def _read_registered(path: str) -> bytes:
    """The bytes at `path`, whose filesystem register_filesystems_for has made known."""
    with fileio.open(path, "rb") as handle:
        return handle.read()


def _parse_json(data: bytes) -> Any:
    return json.loads(data.decode("utf-8"))


def copy_tree(source: str, destination: str, copy: Callable[[str, str], object] | None = None) -> list[str]:
    """Copies the folder `source` to `destination` (any filesystems), each file with `copy` (default:
    fileio.copy, overwriting). Output: the relative paths copied, sorted."""
    copy = copy or (lambda from_path, to_path: fileio.copy(from_path, to_path, overwrite=True))
    files = []
    for folder, _, names in fileio.walk(source):
        relative = os.path.relpath(str(folder).rstrip("/"), source.rstrip("/"))
        files += [os.path.normpath(os.path.join(relative, str(name).rstrip("/"))) for name in names]
    for relative in sorted(files):
        target = os.path.join(destination, relative)
        fileio.makedirs(os.path.dirname(target))
        copy(os.path.join(source, relative), target)
    return sorted(files)
