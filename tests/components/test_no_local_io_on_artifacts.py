"""Lint: components/ reads and writes artifacts only through TFX's filesystem layer.

Python's open/os/shutil on an artifact URI fails on gs:// or s3://, or silently writes into the pod's
local disk (tfx#5404). Every such call in components/ must sit in a function listed here, each of which
touches only a local path by construction.
"""
import ast
import os

from pipeline.config import PROJECT_ROOT

LOCAL_IO_CALLS = {"open", "os.open", "os.makedirs", "os.mkdir", "os.listdir", "os.walk", "os.rename", "os.replace",
                  "os.remove", "os.unlink", "os.stat", "os.chmod", "os.path.exists", "os.path.isdir",
                  "os.path.isfile", "os.path.getsize", "tempfile.mkdtemp"}
LOCAL_ONLY = {  # (file, function): why it is local by construction
    ("components/atomic_pusher/publish.py", "_publish_local"): "chosen only for a local push directory",
    ("components/atomic_pusher/publish.py", "_locked"): "flock on a local push directory",
    ("components/atomic_pusher/publish.py", "_rename_to_next_version"): "rename(2) in a local push directory",
    ("components/atomic_pusher/publish.py", "_remove_stale_staging"): "local push directory",
    ("components/atomic_pusher/publish.py", "_age_seconds"): "local push directory",
    ("components/atomic_pusher/publish.py", "_fsync_tree"): "fsync of a local staging folder",
    ("components/atomic_pusher/publish.py", "_fsync_dir"): "fsync of a local folder",
    ("components/core/path_operations.py", "file_system"): "chosen only for a local path (a URI: tf.io.gfile)",
    ("components/trainer/device.py", "cpu_has_bf16"): "/proc/cpuinfo",
    ("components/trainer/train.py", "_log_dir"): "a scratch folder on a non-chief worker's own disk",
}


def _calls(tree: ast.AST):
    """(enclosing function name, dotted name, line) for every call in a module, and for every local-I/O
    function named without a call (`copy=shutil.copy2` hands it to code that calls it later)."""
    def dotted(node):
        if isinstance(node, ast.Name):
            return node.id
        if isinstance(node, ast.Attribute):
            inner = dotted(node.value)
            return inner and f"{inner}.{node.attr}"
        return None

    def visit(node, function):
        for child in ast.iter_child_nodes(node):
            name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
            if isinstance(child, ast.Call):
                yield function, dotted(child.func), child.lineno
            elif isinstance(child, (ast.Attribute, ast.Name)) and not _called(node, child):
                reference = dotted(child)
                if reference and (reference in LOCAL_IO_CALLS - {"open"} or reference.startswith("shutil.")):
                    yield function, reference, child.lineno
            yield from visit(child, name)

    yield from visit(tree, "<module>")


def _called(parent: ast.AST, child: ast.AST) -> bool:
    """True when `child` is what `parent` calls (already seen as a call) or part of a longer dotted name."""
    return (isinstance(parent, ast.Call) and parent.func is child) or isinstance(parent, ast.Attribute)


def test_components_touch_files_only_through_tfx_fileio_outside_local_only_functions():
    offenders = []
    components = os.path.join(PROJECT_ROOT, "components")
    for folder, _, names in os.walk(components):
        for name in sorted(names):
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            relative = os.path.relpath(path, PROJECT_ROOT)
            with open(path) as handle:
                tree = ast.parse(handle.read())
            for function, call, line in _calls(tree):
                shutil_call = call is not None and call.startswith("shutil.")
                if (call in LOCAL_IO_CALLS or shutil_call) and (relative, function) not in LOCAL_ONLY:
                    offenders.append(f"{relative}:{line} {call}() in {function}")
    assert not offenders, "use tfx.dsl.io.fileio / components.core.artifact_files instead:\n" + "\n".join(offenders)


def test_the_lint_sees_a_local_call_on_an_artifact():
    tree = ast.parse("def write(uri):\n    with open(uri + '/x.json', 'w') as h:\n        pass\n"
                     "def copy(a, b):\n    shutil.copytree(a, b)\n"
                     "def publish(files, copy=None):\n    return _publish(files, copy or shutil.copy2)\n"
                     "def check(path):\n    return filter(os.path.isdir, [path])\n")
    found = [(function, call) for function, call, _ in _calls(tree)
             if call in ("open", "os.path.isdir") or (call or "").startswith("shutil.")]
    assert found == [("write", "open"), ("copy", "shutil.copytree"), ("publish", "shutil.copy2"),
                     ("check", "os.path.isdir")]
