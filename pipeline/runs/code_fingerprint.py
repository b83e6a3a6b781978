"""Digests of the project code a step runs, so that a code change reruns the step instead of reusing its cache.

`code_fingerprint(*modules)` hashes the source of the named modules or packages (every .py file of a
package) and of every local module they import, directly or not, found by reading their imports (ast):
modules of this project and modules beside a named one, wherever it lives. Installed packages (TFX,
TensorFlow, ...) and the standard library are left out: the pinned versions in constraints.txt stand for them.
"""
from __future__ import annotations

import ast
import hashlib
import importlib.util
import os

from pipeline.config import PROJECT_ROOT


def code_fingerprint(*module_names: str) -> str:
    """Input: module or package names. Output: a 16-hex-digit digest of the source of code_files(*names)."""
    digest = hashlib.sha256()
    for path, name in sorted(code_files(*module_names).items(), key=lambda item: item[1]):
        with open(path, "rb") as handle:
            digest.update(name.encode() + b"\0" + handle.read() + b"\0")
    return digest.hexdigest()[:16]


def code_files(*module_names: str) -> dict[str, str]:
    """Input: module or package names. Output: {.py path: module name} of their source (every .py file of a
    package) and of every local module they import, directly or not: modules of this project and modules
    beside a named one, wherever it lives; installed packages (TFX, TensorFlow...) and the standard
    library are left out."""
    roots = [PROJECT_ROOT]
    pending: list[tuple[str, str]] = []
    for name in module_names:
        files = _source_files(name, whole_package=True)
        roots += [os.path.dirname(path) for _, path in files]
        pending += files
    seen: dict[str, str] = {}
    while pending:
        name, path = pending.pop()
        if path in seen:
            continue
        seen[path] = name
        for imported in imported_modules(name, path):
            if _is_local_package(imported, roots):  # resolving a name deeper in TensorFlow would import it
                pending += [item for item in _source_files(imported) if _is_local(item[1], roots)]
    return seen


def _source_files(name: str, whole_package: bool = False) -> list[tuple[str, str]]:
    """(module name, .py path) of module `name`: a package's __init__.py, or with `whole_package` each .py
    file in its folder. [] for what has no Python source or does not exist (a name that is an attribute)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return []
    if not (spec.submodule_search_locations and whole_package):
        return [(name, spec.origin)]
    folder = os.path.dirname(spec.origin)
    return [(name if file == "__init__.py" else f"{name}.{file[:-3]}", os.path.join(folder, file))
            for file in sorted(os.listdir(folder)) if file.endswith(".py")]


def imported_modules(name: str, path: str) -> list[str]:
    """The absolute names of the modules a source file imports, and of `from X import Y`'s possible
    submodules X.Y."""
    with open(path, "rb") as handle:
        tree = ast.parse(handle.read(), filename=path)
    is_package = os.path.basename(path) == "__init__.py"
    names = []
    for statement in ast.walk(tree):
        if isinstance(statement, ast.Import):
            names += [alias.name for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom):
            base = statement.module or ""
            if statement.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - statement.level + 1]
                base = ".".join(package + ([base] if base else []))
            names += [base] + [f"{base}.{alias.name}" for alias in statement.names if alias.name != "*"]
    return [module for module in names if module]


def _is_local_package(module: str, roots: list[str]) -> bool:
    """True when the top-level package (or module) of `module` has its source under one of `roots`."""
    try:
        spec = importlib.util.find_spec(module.split(".")[0])
    except (ImportError, ValueError):
        return False
    return bool(spec and spec.origin) and _is_local(spec.origin, roots)


def _is_local(path: str, roots: list[str]) -> bool:
    """True for a file under one of `roots` that is not inside an installed package (the .venv is in the project)."""
    return not _installed(path) and any(path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def _installed(path: str) -> bool:
    return f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path
