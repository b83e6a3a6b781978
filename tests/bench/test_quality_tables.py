"""The quality benchmark's split: each table's half follows the rule its module states (the SHA-256 of the
name), the benchmarks page lists the halves the rule gives, and each half holds every kind of task."""
import hashlib
import importlib.util
import os
import re
import sys

from pipeline.config import PROJECT_ROOT


def _quality_tables():
    spec = importlib.util.spec_from_file_location("quality_tables",
                                                  os.path.join(PROJECT_ROOT, "bench", "quality_tables.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("quality_tables", module)  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def _listed_on_benchmarks_page(half: str) -> list[str]:
    with open(os.path.join(PROJECT_ROOT, "docs", "benchmarks.md")) as handle:
        page = handle.read()
    match = re.search(rf"\*\*{half.capitalize()} half \((\d+)\)\*\*: (.*?)\.\n", page, re.DOTALL)
    assert match, f"docs/benchmarks.md lists no {half} half"
    names = [name.strip() for name in match.group(2).replace("\n", " ").split(",")]
    assert int(match.group(1)) == len(names)
    return names


def test_each_table_is_in_the_half_the_hash_of_its_name_gives():
    tables = _quality_tables()
    for name in tables.TABLES:
        even = hashlib.sha256(name.encode()).digest()[0] % 2 == 0
        assert tables.half_of(name) == (tables.TUNING if even else tables.CHECK), name
    assert tables.half_of("a table added later") in (tables.TUNING, tables.CHECK)
    assert set(tables.tables_in(tables.TUNING)) | set(tables.tables_in(tables.CHECK)) == set(tables.TABLES)
    assert not set(tables.tables_in(tables.TUNING)) & set(tables.tables_in(tables.CHECK))


def test_the_benchmarks_page_lists_the_halves_the_rule_gives():
    tables = _quality_tables()
    for half in (tables.TUNING, tables.CHECK):
        assert _listed_on_benchmarks_page(half) == tables.tables_in(half), half


def test_there_are_at_least_24_tables_and_each_half_has_every_kind_of_task():
    tables = _quality_tables()
    assert len(tables.TABLES) >= 24
    inferred = {"taxi_fare": "regression"}  # init infers its task from the label
    for half in (tables.TUNING, tables.CHECK):
        kinds = {tables.TABLES[name].task or inferred.get(name) for name in tables.tables_in(half)}
        assert kinds == {"binary", "multiclass", "regression"}, (half, kinds)
