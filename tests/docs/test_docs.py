"""The docs site builds strictly (a broken link or a missing page fails), its configuration reference is the
code's, neither the README, the docs nor the code's docstrings carry issue numbers, session history or
machine paths, and every project file they cite exists."""
import ast
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import typing

import pytest

from tests.config_text import taxi_config_text

from components import settings
from pipeline.config import PROJECT_ROOT

HISTORY = re.compile(r"\bissues? #?\d+\b|\(issue\b|\bthis session\b|\bearlier session\b|\blast session\b|"
                     r"\bthe session before\b|/work/|/home/\w+|/Users/\w+", re.IGNORECASE)


def _keys(section, prefix=""):
    hints = typing.get_type_hints(type(section))
    for field in dataclasses.fields(section):
        value = getattr(section, field.name)
        if dataclasses.is_dataclass(hints[field.name]) or dataclasses.is_dataclass(value):
            yield from _keys(value, prefix + field.name + ".")
        else:
            yield prefix + field.name


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site_dir = tmp_path_factory.mktemp("site")
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site_dir)],
                            cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return site_dir


def test_the_site_builds_with_every_page(site):
    pages = sorted(name[:-3] for name in os.listdir(os.path.join(PROJECT_ROOT, "docs")) if name.endswith(".md"))
    assert len(pages) >= 10
    for page in pages:
        target = site / ("index.html" if page == "index" else os.path.join(page, "index.html"))
        assert target.exists(), page


def test_the_configuration_reference_lists_every_field_with_its_default(site):
    page = (site / "configuration" / "index.html").read_text()
    config = settings.PipelineConfig()
    for key in _keys(config):
        assert f"<code>{key}</code>" in page, key
    assert "must be between 0 and 1 (exclusive)" in page and "<code>ingest.span_window</code>" in page


def test_the_readme_is_short_and_runs_what_ci_runs():
    readme = open(os.path.join(PROJECT_ROOT, "README.md")).read()
    assert len(readme.splitlines()) < 150
    ci = open(os.path.join(PROJECT_ROOT, ".ci", "run")).read()
    assert "make test    #" in readme and re.search(r"^make test$", ci, re.MULTILINE)
    for link in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert os.path.exists(os.path.join(PROJECT_ROOT, link)), link


def _docstrings(path: str):
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node)
            if docstring:
                yield getattr(node, "name", "<module>"), docstring


def test_no_history_or_machine_path_in_the_readme_the_docs_or_the_docstrings():
    found = []
    texts = [os.path.join(PROJECT_ROOT, "README.md")] + [
        os.path.join(PROJECT_ROOT, "docs", name) for name in os.listdir(os.path.join(PROJECT_ROOT, "docs"))
        if name.endswith(".md")]
    for path in texts:
        for number, line in enumerate(open(path).read().splitlines(), start=1):
            if HISTORY.search(line):
                found.append(f"{os.path.relpath(path, PROJECT_ROOT)}:{number}: {line.strip()[:100]}")
    for package in ("components", "pipeline", "models", "bench", "tests", "accel_tfx"):
        for folder, _, names in os.walk(os.path.join(PROJECT_ROOT, package)):
            for name in (n for n in names if n.endswith(".py")):
                path = os.path.join(folder, name)
                for owner, docstring in _docstrings(path):
                    if HISTORY.search(docstring):
                        found.append(f"{os.path.relpath(path, PROJECT_ROOT)} {owner}: {HISTORY.search(docstring)[0]}")
    assert not found, "\n".join(found)


CITED_PATH = re.compile(r"(?<![\w/.-])((?:tests|components|pipeline|models|bench|configs|examples|docs)"
                        r"/[\w/.-]*\w\.(?:py|md|yaml|pbtxt|csv|json))\b")


def _project_texts():
    yield os.path.join(PROJECT_ROOT, "README.md")
    for package in ("docs", "components", "pipeline", "models", "bench", "tests", "accel_tfx"):
        for folder, _, names in os.walk(os.path.join(PROJECT_ROOT, package)):
            yield from (os.path.join(folder, n) for n in names if n.endswith((".py", ".md")))


def test_every_project_file_the_code_and_docs_cite_exists():
    missing = []
    for path in _project_texts():
        for number, line in enumerate(open(path).read().splitlines(), start=1):
            for cited in CITED_PATH.findall(line):
                placeholder = any(part.isupper() or "<" in part for part in re.split(r"[/.]", cited))
                if not placeholder and not os.path.exists(os.path.join(PROJECT_ROOT, cited)):
                    missing.append(f"{os.path.relpath(path, PROJECT_ROOT)}:{number}: {cited}")
    assert not missing, "\n".join(missing)


def test_every_config_sample_in_the_docs_loads(tmp_path, monkeypatch):
    """Each ```yaml block of the docs is a config a user may copy, or (without a pipeline_name) keys to add to
    one, here the taxi example's: it loads and passes every check (a schema it names is stood in for by the
    taxi-fare schema, whose columns the samples use; a task of one's own it names, module:Class, by the
    quantile task of tests/pipeline/dag/quantile_task.py under that name)."""
    pages = [os.path.join(PROJECT_ROOT, "docs", name) for name in os.listdir(os.path.join(PROJECT_ROOT, "docs"))
             if name.endswith(".md")] + [os.path.join(PROJECT_ROOT, "README.md")]
    samples = [(page, block) for page in pages
               for block in re.findall(r"^```yaml\n(.*?)^```", open(page).read(), re.MULTILINE | re.DOTALL)]
    assert len(samples) >= 3
    from pipeline.config import load_config
    for number, (page, block) in enumerate(samples):
        folder = tmp_path / str(number)
        folder.mkdir()
        full = re.search(r"^pipeline_name:", block, re.MULTILINE)
        text = block if full else taxi_config_text(block)
        own_task = re.search(r"^  type: (\w+):(\w+)", block, re.MULTILINE)
        if own_task:  # a task of one's own is the schema-driven model's (the taxi example declares its task)
            text = text.replace("model: models.taxi", "model: models.tabular")
        (folder / "config.yaml").write_text(text)
        named_schema = re.search(r"^schema_path: (\S+)", block, re.MULTILINE)
        if named_schema:
            (folder / named_schema.group(1)).parent.mkdir(parents=True)
            shutil.copy(os.path.join(PROJECT_ROOT, "schemas", "taxi_fare", "schema.pbtxt"), folder / named_schema.group(1))
        if own_task:
            (folder / f"{own_task.group(1)}.py").write_text(
                f"from tests.pipeline.dag.quantile_task import QuantileTask as {own_task.group(2)}\n")
            monkeypatch.syspath_prepend(str(folder))
            monkeypatch.delitem(sys.modules, own_task.group(1), raising=False)  # another test's, imported before
        try:
            load_config(str(folder / "config.yaml"))
        except Exception as error:  # noqa: BLE001 - the page and the block name the failure
            pytest.fail(f"{os.path.basename(page)}: the sample\n{block}does not load: {error}")
