"""Shared fixtures: small real data written in the pipeline's record contract, the described-GPU hook, no TF_CONFIG
from the caller, the session's temporary folder under pytest's, and the environment the suite runs in whatever
the caller's shell exports."""
import os

# Set before TensorFlow or Keras load, for this process and every command it starts: what the suite's assertions
# (a command's stderr, compared or read line by line; Keras 3 on TensorFlow; XLA as the Trainer decides) rest on.
CONTROLLED_ENVIRONMENT = {"TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"}
# ...and what a caller may export that would change them: legacy Keras 2, XLA or oneDNN flags, warnings as errors
UNSET_ENVIRONMENT = ("TF_USE_LEGACY_KERAS", "TF_XLA_FLAGS", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS", "PYTHONWARNINGS")
os.environ.update(CONTROLLED_ENVIRONMENT)
for _variable in UNSET_ENVIRONMENT:
    os.environ.pop(_variable, None)

import hashlib  # noqa: E402
import tempfile  # noqa: E402

import pytest  # noqa: E402

# Tests that take minutes (a real DAG run, a real training, a fresh process): see pytest.ini's markers.
LONG_MARKERS = ("e2e", "training", "slow")


def pytest_collection_modifyitems(items):
    """Test files with the most minutes-long tests first, then the others by their number of tests (each file's
    tests keep their order). With the files dealt to workers in this order (`make test`: --dist loadfile
    --no-loadscope-reorder), the last files are short ones: the suite does not end with one worker idle while
    the other runs a long file alone."""
    long_tests, tests = {}, {}
    for item in items:
        tests[item.path] = tests.get(item.path, 0) + 1
        if any(item.get_closest_marker(name) for name in LONG_MARKERS):
            long_tests[item.path] = long_tests.get(item.path, 0) + 1
    items.sort(key=lambda item: (-long_tests.get(item.path, 0), -tests[item.path]))


DESCRIBED_GPUS_VARIABLE = "TEST_DESCRIBED_GPUS"


@pytest.fixture(scope="session", autouse=True)
def described_gpus():
    """With TEST_DESCRIBED_GPUS="NAME:MAJOR.MINOR[,NAME:MAJOR.MINOR...]" set (for example
    "NVIDIA A100-SXM4-40GB:8.0"), TensorFlow's device listing shows those GPUs in this test process, wherever
    the code reads it (`tf.config.list_physical_devices`, `get_device_details`); memory settings on them are
    accepted and ignored, and TensorFlow's soft placement runs their work on the CPU. This is how the suite
    is checked for tests that assume a machine without a GPU. Unset: nothing changes. Tests that start
    processes of their own (trainer jobs, the doctor command) see the real machine there."""
    described = os.environ.get(DESCRIBED_GPUS_VARIABLE, "").strip()
    if not described:
        yield ()
        return
    import tensorflow as tf

    gpus = {}
    for index, entry in enumerate(item.strip() for item in described.split(",")):
        name, _, capability = entry.rpartition(":")
        major, minor = (int(part) for part in capability.split("."))
        device = tf.config.PhysicalDevice(name=f"/physical_device:GPU:{index}", device_type="GPU")
        gpus[device.name] = (device, {"device_name": name, "compute_capability": (major, minor)})
    real_list, real_details = tf.config.list_physical_devices, tf.config.experimental.get_device_details
    real_growth, real_logical = tf.config.experimental.set_memory_growth, tf.config.set_logical_device_configuration
    fake = [device for device, _ in gpus.values()]

    def list_physical_devices(device_type=None):
        if device_type == "GPU":
            return list(fake)
        return real_list(device_type) + (list(fake) if device_type is None else [])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.config, "list_physical_devices", list_physical_devices)
        patch.setattr(tf.config.experimental, "get_device_details",
                      lambda device: dict(gpus[device.name][1]) if device.name in gpus else real_details(device))
        patch.setattr(tf.config.experimental, "set_memory_growth",
                      lambda device, on: None if device.name in gpus else real_growth(device, on))
        patch.setattr(tf.config, "set_logical_device_configuration",
                      lambda device, configs: None if device.name in gpus else real_logical(device, configs))
        yield tuple(details for _, details in gpus.values())


@pytest.fixture(scope="session", autouse=True)
def temporary_files_under_pytest(tmp_path_factory):
    """The session's temporary files, this process's and those of the processes it starts, go under
    pytest's base folder, which pytest prunes to its last three sessions. What a library leaves in the
    temporary folder (TFX's Beam executors run directly by a test, outside the runners, stage a 50 MB
    sdist of TFX each) then does not pile up in the machine's temporary folder, suite after suite."""
    folder = str(tmp_path_factory.mktemp("tmp"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TMPDIR", folder)
        patch.setattr(tempfile, "tempdir", folder)
        yield folder


TF_CONFIG_VARIABLE = "TF_CONFIG"


@pytest.fixture(scope="session", autouse=True)
def no_tf_config_in_session():
    """No TF_CONFIG the caller exported reaches the session's and modules' fixtures (a production run, the
    e2e stages): they run before any function-scoped fixture, and a multi-worker cluster in TF_CONFIG would
    make their Trainer wait for workers that do not exist. Restored at the end of the session."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv(TF_CONFIG_VARIABLE, raising=False)
        yield


@pytest.fixture(autouse=True)
def no_tf_config(monkeypatch):
    """Every test starts without TF_CONFIG (whatever the caller exported, or an earlier test left behind): a
    test that needs one sets it itself, with monkeypatch.setenv or in a subprocess's environment."""
    monkeypatch.delenv(TF_CONFIG_VARIABLE, raising=False)


@pytest.fixture(scope="session")
def taxi_span_root(tmp_path_factory):
    """A data root with span-1 holding the first 3,000 taxi rows as gzip TFRecord shards."""
    from pipeline.onboarding.example_data import write_taxi_span
    root = tmp_path_factory.mktemp("taxi-data")
    write_taxi_span(str(root), span=1, max_rows=3000, num_shards=2)
    return str(root)


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server on 127.0.0.1 for the whole session (tests/s3_server.py)."""
    from tests.s3_server import S3Server
    server = S3Server()
    yield server
    server.stop()


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
