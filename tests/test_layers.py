"""The arrows between the project's packages run one way (docs/architecture.md):

    pipeline/  ->  components/<name>/  ->  components/core/
    models/    ->  components/core/

The core imports nothing of the project above it, nor TFMA or Beam; no component imports another
component's modules (only the core and the shared modules beside it); nothing in components/ imports a model
module (components load one only by its configured name, through components.core.model_module); models/
import only the core; nothing imports tests/ or bench/. Every import counts, inside functions too.

Inside pipeline/, the rooms (config.py stays beside them, for all of them):

    commands/  ->  dag/  ->  runs/
    commands/  ->  onboarding/

onboarding/ imports no other room; runs/ imports neither dag/ nor commands/; dag/ imports neither commands/
nor onboarding/; only commands/ and pipeline/__main__.py import commands/."""
import ast
import pathlib

import pytest

from pipeline.config import PROJECT_ROOT

ROOT = pathlib.Path(PROJECT_ROOT)
SHARED = {"components.settings", "components.native_stderr", "components.process_exit"}  # beside the core
HEAVY = ("tensorflow_model_analysis", "apache_beam")
ROOMS = ("commands", "dag", "runs", "onboarding")  # pipeline/'s sub-packages, one per job


def _imports(path: pathlib.Path, package: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import in a file, relative imports resolved against its package."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if package is None:
        package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            found += [(node.lineno, f"{module}.{alias.name}") if _is_module(f"{module}.{alias.name}") else
                      (node.lineno, module) for alias in node.names]
    return found


def _is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def _files(folder: str) -> list[pathlib.Path]:
    return sorted(path for path in (ROOT / folder).rglob("*.py"))


def _component(module: str) -> str | None:
    """The component folder a module belongs to (components.trainer.train -> trainer), or None."""
    parts = module.split(".")
    if len(parts) >= 2 and parts[0] == "components" and parts[1] != "core" and f"components.{parts[1]}" not in SHARED:
        return parts[1]
    return None


def _violations(folder: str, allowed) -> list[str]:
    return [f"{path.relative_to(ROOT)}:{line} imports {module}" for path in _files(folder)
            for line, module in _imports(path) if not allowed(path, module)]


def _room(module: str) -> str | None:
    """The sub-package of pipeline/ a module belongs to (pipeline.dag.wiring -> dag), or None (pipeline.config)."""
    parts = module.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] == "pipeline" and parts[1] in ROOMS else None


def _room_violations(room: str, forbidden: tuple[str, ...]) -> list[str]:
    return _violations(f"pipeline/{room}", lambda path, module: _room(module) not in forbidden)


def _project(module: str) -> bool:
    return module.split(".")[0] in ("components", "models", "pipeline", "tests", "bench", "accel_tfx")


def test_the_core_imports_nothing_of_the_project_above_it_nor_tfma_or_beam():
    def allowed(path, module):
        return (not _project(module) or module.startswith("components.core")) and not module.startswith(HEAVY)

    assert _violations("components/core", allowed) == []


def test_no_component_imports_another_components_modules_and_none_imports_a_model():
    def allowed(path, module):
        own = path.relative_to(ROOT).parts[1]
        if module.startswith(("models", "pipeline", "tests", "bench")):
            return False
        return _component(module) in (None, own)

    assert _violations("components", allowed) == []


def test_models_import_only_the_core():
    def allowed(path, module):
        return not _project(module) or module.startswith(("components.core", "models"))

    assert _violations("models", allowed) == []


@pytest.mark.parametrize("folder", ["components", "models", "pipeline", "accel_tfx"])
def test_nothing_imports_tests_or_bench(folder):
    assert _violations(folder, lambda path, module: not module.startswith(("tests", "bench"))) == []


def test_onboarding_imports_neither_the_dag_nor_the_runs_nor_the_commands():
    assert _room_violations("onboarding", ("dag", "runs", "commands")) == []


def test_runs_import_neither_the_dag_nor_the_commands():
    assert _room_violations("runs", ("dag", "commands")) == []


def test_the_dag_imports_neither_the_commands_nor_onboarding():
    assert _room_violations("dag", ("commands", "onboarding")) == []


@pytest.mark.parametrize("folder", ["components", "models", "pipeline", "accel_tfx"])
def test_only_the_commands_and_the_main_module_import_the_commands(folder):
    def allowed(path, module):
        where = path.relative_to(ROOT).as_posix()
        return _room(module) != "commands" or where.startswith("pipeline/commands/") or where == "pipeline/__main__.py"

    assert _violations(folder, allowed) == []


def test_the_room_rules_see_each_room_an_import_names(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from pipeline.commands import cli\nfrom pipeline import dag\n"
                     "from ..runs import run_guard\nimport pipeline.config\n")
    assert sorted(str(_room(module)) for _, module in _imports(probe, package="pipeline.onboarding")) == [
        "None", "commands", "dag", "runs"]


def test_the_rules_see_an_import_inside_a_function_and_a_relative_one(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from components.trainer import train\n    import apache_beam\n"
                     "from . import tasks\n")
    assert sorted(module for _, module in _imports(probe, package="components.core")) == [
        "apache_beam", "components.core.tasks", "components.trainer.train"]


def test_no_module_of_the_core_imports_one_that_imports_it_again():
    core = {".".join(path.relative_to(ROOT).with_suffix("").parts): path for path in _files("components/core")}
    imports = {name: {module for _, module in _imports(path) if module in core} for name, path in core.items()}

    def reaches(start: str, goal: str, seen: set) -> bool:
        return any(module == goal or (module not in seen and reaches(module, goal, seen | {module}))
                   for module in imports[start])

    assert sorted(name for name in core if reaches(name, name, {name})) == []


@pytest.mark.parametrize("folder", ["components", "models", "pipeline"])
def test_no_module_but_the_task_definitions_asks_which_task_it_is(folder):
    """What differs between tasks is a method of the task: no isinstance or issubclass of a task class elsewhere."""
    def asks(path: pathlib.Path) -> list[int]:
        found = []
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") in ("isinstance", "issubclass") \
                    and len(node.args) == 2:
                names = [getattr(part, "id", getattr(part, "attr", "")) for part in ast.walk(node.args[1])]
                found += [node.lineno for name in names if name.endswith("Task")]
        return found

    tasks_module = ROOT / "components" / "core" / "tasks.py"
    assert [f"{path.relative_to(ROOT)}:{line}" for path in _files(folder) if path != tasks_module
            for line in asks(path)] == []


def test_the_task_rule_sees_an_isinstance_of_a_task(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def f(task):\n    return isinstance(task, (tasks.ClassificationTask, int))\n")
    tree = ast.parse(probe.read_text())
    call = next(node for node in ast.walk(tree) if isinstance(node, ast.Call))
    assert any(getattr(part, "attr", "").endswith("Task") for part in ast.walk(call.args[1]))
