"""Shared fixtures: small real data written in the pipeline's record contract."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import hashlib  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def taxi_span_root(tmp_path_factory):
    """A data root with span-1 holding the first 3,000 taxi rows as gzip TFRecord shards."""
    from pipeline.data import write_taxi_span
    root = tmp_path_factory.mktemp("taxi-data")
    write_taxi_span(str(root), span=1, max_rows=3000, num_shards=2)
    return str(root)


@pytest.fixture(scope="session")
def tree_digest():
    """A function: folder -> SHA-256 over every file's relative path and bytes (equal digests: identical trees)."""
    def digest(root):
        result = hashlib.sha256()
        for folder, dirs, names in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(names):
                path = os.path.join(folder, name)
                with open(path, "rb") as handle:
                    result.update(os.path.relpath(path, root).encode() + handle.read())
        return result.hexdigest()
    return digest
