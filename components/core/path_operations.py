"""File operations for a path: the standard library's for a local path, tf.io.gfile's for a URI (gs://, s3://),
so that what touches only a local data root (finding spans, fingerprinting them, writing a CSV's span) never
loads TensorFlow."""
from __future__ import annotations

import os
import shutil
import types


def local_path(uri: str) -> str:
    """A local path as the OS takes it: `file:///srv/models` -> `/srv/models`; anything else as it is."""
    return uri[len("file://"):] if uri.startswith("file://") else uri


def file_system(path: str) -> types.SimpleNamespace:
    """Input: a local path or a URI. Output: exists, isdir, listdir, makedirs, remove, rmtree, rename (over an
    existing target), open, size and mtime_nsec (whole seconds in nanoseconds, as tf.io.gfile reports local
    files) for paths of its kind."""
    if "://" not in path:
        return types.SimpleNamespace(
            exists=os.path.exists, isdir=os.path.isdir, listdir=os.listdir,
            makedirs=lambda p: os.makedirs(p, exist_ok=True), remove=os.remove, rmtree=shutil.rmtree,
            rename=os.replace, open=open, size=os.path.getsize,
            mtime_nsec=lambda p: os.stat(p).st_mtime_ns // 10**9 * 10**9)
    import tensorflow as tf
    return types.SimpleNamespace(
        exists=tf.io.gfile.exists, isdir=tf.io.gfile.isdir, listdir=tf.io.gfile.listdir,
        makedirs=tf.io.gfile.makedirs, remove=tf.io.gfile.remove, rmtree=tf.io.gfile.rmtree,
        rename=lambda a, b: tf.io.gfile.rename(a, b, overwrite=True), open=tf.io.gfile.GFile,
        size=lambda p: tf.io.gfile.stat(p).length, mtime_nsec=lambda p: tf.io.gfile.stat(p).mtime_nsec)
