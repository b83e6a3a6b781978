"""The user's own files that `compile` stages on the pipeline root, so that the stock step image runs them.

A compiled step's pod has the image (the project's packages, the bundled schemas) and the object store, not
the machine that compiled it. What the image does not carry is copied under the pipeline root, each item in
a folder named by its content:

    <pipeline_root>/staged/<digest>/schema.pbtxt  the curated schema, when it is a file outside the image's
                                                  project folders (init's schemas/<name>/schema.pbtxt)
    <pipeline_root>/staged/<digest>/config.yaml   the config file compile read, when outside them (a record:
                                                  the steps take their settings from the compiled job)
    <pipeline_root>/staged/<digest>/code/...      the `train.model` module, the module of a `task.type` of one's
                                                  own (module:Class), and the local modules they import, when
                                                  they are neither the project's packages nor installed

`<digest>` is 16 hex digits of SHA-256 over the item's file names and bytes: a compiled job reads the files it
was compiled with, a changed file gets a new folder, and two users' files never share one. Each folder's
MANIFEST.json (each file's SHA-256) is written last and marks a complete copy. The schema's URI goes into
ImportSchemaGen; the code folder's into each step's `--model_code` flag, which the step entrypoint
(pipeline/dag/kfp_entrypoint.py) copies to a local folder put first on the import path.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import os
import sysconfig

from pipeline.config import PROJECT_ROOT, PipelineConfig, user_code
from pipeline.runs.code_fingerprint import imported_modules

STAGED_FOLDER = "staged"
MANIFEST = "MANIFEST.json"
SCHEMA, CONFIG, MODEL_CODE = "schema", "config", "model code"
NAMES = {SCHEMA: "schema.pbtxt", CONFIG: "config.yaml", MODEL_CODE: "code"}
# What the Dockerfile copies into the image's project folder: its packages, and the bundled schemas.
IMAGE_PACKAGES = ("pipeline", "components", "models", "accel_tfx")
IMAGE_FOLDERS = IMAGE_PACKAGES + ("schemas",)
MAX_CODE_BYTES = 20 * 2**20  # staged model code is source files; more is a package to install in the image
SKIPPED = ("__pycache__",)


class StagingError(ValueError):
    """A file to stage cannot be: the message names the config key (train.model, task.type)."""


@dataclasses.dataclass(frozen=True)
class StagedItem:
    """One staged item: the schema, the config, or the model code (one or more files)."""
    what: str  # SCHEMA | CONFIG | MODEL_CODE
    files: tuple[tuple[str, str], ...]  # (local file, its path under `folder`)
    folder: str  # <pipeline_root>/staged/<digest>

    @property
    def uri(self) -> str:
        """What the steps read: the schema or config file, or the code folder (an import root)."""
        return f"{self.folder}/{NAMES[self.what]}"

    def manifest(self) -> bytes:
        """MANIFEST.json's bytes: each staged path -> SHA-256 of its bytes."""
        return json.dumps({name: hashlib.sha256(_read(source)).hexdigest() for source, name in self.files},
                          indent=1, sort_keys=True).encode()


@dataclasses.dataclass(frozen=True)
class Staging:
    """What compile stages; empty when the image carries it all."""
    items: tuple[StagedItem, ...] = ()

    def uri(self, what: str) -> str | None:
        """The URI the steps read for SCHEMA, CONFIG or MODEL_CODE, or None when that is not staged."""
        return next((item.uri for item in self.items if item.what == what), None)

    def listing(self) -> list[str]:
        """One line per staged file, `what  source -> URI`; the source relative to the working directory
        when it is inside it."""
        width = max((len(item.what) for item in self.items), default=0)
        return [f"{item.what:<{width}}  {_shown(source)} -> {item.folder}/{name}"
                for item in self.items for source, name in item.files]


def plan_staging(config: PipelineConfig, config_file: str | None, pipeline_root: str) -> Staging:
    """Input: the checked config, the config file it was read from (None: none), the pipeline root URI.
    Output: what to stage and where; nothing is written. Raises StagingError naming `train.model` or
    `task.type` when its code is too large to stage."""
    root = f"{pipeline_root.rstrip('/')}/{STAGED_FOLDER}"
    items = []
    if "://" not in config.schema_path and not in_image(config.schema_path):
        items.append(_item(root, SCHEMA, [(os.path.abspath(config.schema_path), NAMES[SCHEMA])]))
    if config_file and not in_image(config_file):
        items.append(_item(root, CONFIG, [(os.path.abspath(config_file), NAMES[CONFIG])]))
    code = {}
    for key, module in zip(("train.model", "task.type"), user_code(config)):
        code.update({name: source for source, name in model_code_files(module, key)})
    code = [(code[name], name) for name in sorted(code)]
    if code:
        items.append(_item(root, MODEL_CODE, [(source, f"{NAMES[MODEL_CODE]}/{name}") for source, name in code]))
    return Staging(tuple(items))


def _item(root: str, what: str, files: list[tuple[str, str]]) -> StagedItem:
    """The item `what` of `files` ((local file, staged path)), in <root>/<the digest of their paths and bytes>."""
    digest = hashlib.sha256()
    for source, name in sorted(files, key=lambda file: file[1]):
        digest.update(name.encode() + b"\0" + _read(source) + b"\0")
    return StagedItem(what, tuple(files), f"{root}/{digest.hexdigest()[:16]}")


def upload(staging: Staging) -> list[bool]:
    """Copies each item's files to its folder (tfx.dsl.io.fileio: a local path, gs://, s3://), its manifest
    last. Output: per item, False when a complete copy was already there (the same manifest), else True."""
    from tfx.dsl.io import fileio

    from components.core.artifact_files import register_filesystems_for, write_bytes

    written = []
    for item in staging.items:
        manifest, manifest_uri = item.manifest(), f"{item.folder}/{MANIFEST}"
        try:
            register_filesystems_for(item.folder)
            if fileio.exists(manifest_uri):
                with fileio.open(manifest_uri, "rb") as handle:
                    if handle.read() == manifest:
                        written.append(False)
                        continue
            for source, name in item.files:
                write_bytes(f"{item.folder}/{name}", _read(source))
            write_bytes(manifest_uri, manifest)
        except Exception as error:  # noqa: BLE001 - an object store's own error types: say which copy failed
            raise RuntimeError(f"staging the {item.what} in {item.folder}: {type(error).__name__}: {error}") from error
        written.append(True)
    return written


def in_image(path: str) -> bool:
    """True for a local path inside one of the project folders the step image carries (IMAGE_FOLDERS)."""
    path = os.path.abspath(path)
    return any(path.startswith(os.path.join(PROJECT_ROOT, folder) + os.sep) for folder in IMAGE_FOLDERS)


def model_code_files(module_name: str, key: str = "train.model") -> list[tuple[str, str]]:
    """Input: a module name of the user's code (it imports) and the config key that names it. Output: (local
    file, path relative to an import root)
    for the module and the modules it imports, directly or not, from the folder it was imported from, that
    the image lacks: not one of the project's packages and not installed. A module inside packages brings
    their __init__.py files; a module that is a package, its whole folder. [] when the image has it all.
    Raises StagingError naming `key` when that is more than MAX_CODE_BYTES."""
    files: dict[str, str] = {}
    for name in sorted(_local_modules(module_name)):
        for source, relative in _module_files(name, key):
            files.setdefault(relative, source)
    size = sum(os.path.getsize(source) for source in files.values())
    if size > MAX_CODE_BYTES:
        raise StagingError(f"{key}: {module_name} brings {size / 2**20:.0f} MB of files to stage (more than "
                           f"{MAX_CODE_BYTES // 2**20} MB): install that package in the step image instead")
    return [(files[relative], relative) for relative in sorted(files)]


def _local_modules(module_name: str) -> set[str]:
    """`module_name` and the modules it imports, directly or not, that live in the folder its top-level
    package (or module) was imported from and that the image lacks; empty when the image has the module."""
    spec = _find(module_name.split(".")[0])
    if spec is None or _in_image_or_installed(module_name):
        return set()
    top = next(iter(spec.submodule_search_locations or []), None) or spec.origin
    root = os.path.dirname(os.path.abspath(top))
    found: set[str] = set()
    pending = [module_name]
    while pending:
        name = pending.pop()
        spec = _find(name)
        if name in found or spec is None or not (spec.origin or "").endswith(".py"):
            continue  # seen, or an attribute (`from pkg import function`), or no source
        if not os.path.abspath(spec.origin).startswith(root + os.sep) or _in_image_or_installed(name):
            continue
        found.add(name)
        pending += imported_modules(name, spec.origin)
    return found


def _find(name: str):
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None


def _in_image_or_installed(name: str) -> bool:
    """True when module `name`'s top-level package is one the image carries, or installed, or built in."""
    top = name.split(".")[0]
    spec = _find(top)
    if spec is None:
        return False  # _module_files names it
    origin = spec.origin or next(iter(spec.submodule_search_locations or []), "")  # a namespace package: its folder
    if not origin or origin in ("built-in", "frozen"):
        return True  # the interpreter's own
    if top in IMAGE_PACKAGES and os.path.abspath(origin).startswith(PROJECT_ROOT + os.sep):
        return True
    return _installed(origin)


def _installed(path: str) -> bool:
    """True for a file of the Python installation: the standard library or an installed distribution."""
    path = os.path.abspath(path)
    if f"{os.sep}site-packages{os.sep}" in path or f"{os.sep}dist-packages{os.sep}" in path:
        return True
    roots = {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return any(path.startswith(os.path.abspath(root) + os.sep) for root in roots)


def _module_files(name: str, key: str) -> list[tuple[str, str]]:
    """(local file, relative path) that make module `name` importable from a folder: its parent packages'
    __init__.py, then its own file, or its whole folder when it is a package."""
    parts = name.split(".")
    found = []
    for depth in range(1, len(parts)):
        parent = importlib.util.find_spec(".".join(parts[:depth]))
        if parent and parent.origin and parent.origin.endswith("__init__.py"):  # a namespace package has none
            found.append((parent.origin, "/".join(parts[:depth]) + "/__init__.py"))
    spec = importlib.util.find_spec(name)
    if spec is None:
        raise StagingError(f"{key}: {name} cannot be found to stage")
    if spec.submodule_search_locations:
        folder = next(iter(spec.submodule_search_locations))
        for current, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d not in SKIPPED and not d.startswith("."))
            for file in sorted(names):
                if file.startswith(".") or file.endswith((".pyc", ".pyo")):
                    continue
                relative = os.path.relpath(os.path.join(current, file), folder).replace(os.sep, "/")
                found.append((os.path.join(current, file), "/".join(parts) + "/" + relative))
    elif spec.origin:
        found.append((spec.origin, "/".join(parts[:-1] + [os.path.basename(spec.origin)])))
    return found


def _read(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _shown(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
