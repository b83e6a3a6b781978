"""The benchmarks page is generated: docs/benchmarks.md and its pictures are what bench/render_page.py writes from
the committed records (bench/results/*.jsonl), rendering is deterministic, a table shows each measurement's
newest session and tolerates figures it does not know or lacks, and the bench scripts append records."""
import importlib
import json
import os
import re
import subprocess
import sys

import pytest

from pipeline.config import PROJECT_ROOT

BENCH = os.path.join(PROJECT_ROOT, "bench")
HELPERS = {"quality_tables.py", "records.py", "render_page.py", "tfx_taxi_example.py"}  # no figures of their own


@pytest.fixture(scope="module")
def bench():
    """bench/records.py and bench/render_page.py as modules (the bench folder on sys.path, as a script has it)."""
    sys.path.insert(0, BENCH)
    try:
        yield importlib.import_module("records"), importlib.import_module("render_page")
    finally:
        sys.path.remove(BENCH)


def _record(measurement, date, figures, commit="c1", bench_name="scale", **extra):
    return {"bench": bench_name, "measurement": measurement, "date": date, "commit": commit, "dirty": False,
            "command": f"python bench/{bench_name}.py", "machine": {"cores": 2}, "figures": figures, "source": "run",
            **extra}


def test_the_page_is_what_the_committed_records_give(bench):
    records, render_page = bench
    text, _ = render_page.render(records.read(records.RESULTS_DIR))
    with open(render_page.PAGE) as handle:
        assert handle.read() == text, "docs/benchmarks.md differs from its records: run `make bench-page`"
    assert len(text.splitlines()) <= 420


def test_each_picture_on_the_page_is_drawn_from_the_records(bench):
    records, render_page = bench
    text, pictures = render_page.render(records.read(records.RESULTS_DIR))
    assert {"benchmarks-scale.png", "benchmarks-quality-tuning.png"} <= {picture.name for picture in pictures}
    on_disk = {name for name in os.listdir(render_page.IMAGES) if name.startswith(render_page.PICTURE_PREFIX)}
    assert on_disk == {picture.name for picture in pictures}, "stale or missing pictures: run `make bench-page`"
    for picture in pictures:
        assert f"(images/{picture.name})" in text
        comment = render_page.png_comment(os.path.join(render_page.IMAGES, picture.name))
        assert comment == f"figures {picture.digest}", f"{picture.name} was drawn from other figures"


def test_rendering_is_deterministic(bench, tmp_path):
    records, render_page = bench
    found = records.read(records.RESULTS_DIR)
    first, pictures = render_page.render(found)
    assert render_page.render(json.loads(json.dumps(found)))[0] == first
    picture = next(picture for picture in pictures if picture.name == "benchmarks-scale.png")
    drawn = []
    for attempt in ("a", "b"):
        picture.draw(picture.data, str(tmp_path / attempt), picture.digest)
        drawn.append((tmp_path / attempt).read_bytes())
    assert drawn[0] == drawn[1]
    assert render_page.png_comment(str(tmp_path / "a")) == f"figures {picture.digest}"


def test_a_table_shows_the_newest_session_pooled_over_calls_of_one_commit(bench):
    _, render_page = bench
    found = [_record("m", "2026-11-20T10:00:00Z", {"runs": [{"seed": 0, "value": 9.0}]}),
             _record("m", "2026-11-21T09:00:00Z", {"runs": [{"seed": 0, "value": 1.0}, {"seed": 1, "value": 2.0}]}),
             _record("m", "2026-11-21T11:00:00Z", {"runs": [{"seed": 1, "value": 3.0}, {"seed": 2, "value": 4.0}]}),
             _record("m", "2026-11-21T12:00:00Z", {"runs": [{"seed": 0, "other": 5.0}]}, commit="c2")]
    newest = render_page.newest_session(found)
    assert [record["commit"] for record in newest.records] == ["c2"]  # another commit is not pooled
    session = render_page.newest_session(found, render_page.holds("value"))
    assert session.day == "2026-11-21" and len(session.records) == 2  # the older day's record is left out
    assert session.values("value") == [1.0, 3.0, 4.0]  # seed 1's later run replaced its earlier one
    assert session.stats("value") == {"n": 3, "mean": pytest.approx(8 / 3), "median": 3.0, "min": 1.0, "max": 4.0}
    transcribed = [dict(record, commit=None, source="transcribed") for record in found[1:3]]
    assert len(render_page.newest_session(transcribed).records) == 1  # records without a commit stand alone


def _quality(name, values, **figures):
    extra = figures.pop("run_extra", {})
    runs = [{"seed": seed, "value": value, **extra} for seed, value in enumerate(values)]
    return _record(name, "2026-11-28T10:00:00Z", {"half": "check", "model": "schema-driven (init)", "task": "binary",
                                                   "metric": "auc", "runs": runs, **figures}, bench_name="tabular_quality")


def test_the_quality_table_shows_a_column_only_where_a_record_has_its_figure(bench):
    _, render_page = bench
    plain = [_quality("telecom_churn", [0.90, 0.92], yardsticks={"lightgbm": 0.93, "linear": 0.8}),
             _quality("spam_words", [0.95], yardsticks={})]
    text, _ = render_page.render({"tabular_quality": plain}, "<!-- bench: quality -->\n")
    header = next(line for line in text.splitlines() if line.startswith("| table |"))
    assert "CatBoost" not in header and "Trainer s" not in header and "LightGBM" in header
    assert "| telecom_churn | AUC | 0.9100 (0.9000–0.9200) | 0, 1 | 0.9300 | 0.8000 | -0.0200 | **missed** |" in text
    assert re.search(r"\| spam_words \| AUC \| 0\.9500 \| 0 \| – \| – \| – \| – \|", text)
    assert "Within goal of LightGBM: **0 of 1** (1 without a LightGBM figure); missed: telecom_churn." in text
    assert "the better of" not in text  # no table has a CatBoost figure

    extended = [_quality("telecom_churn", [0.90, 0.92], yardsticks={"lightgbm": 0.93, "catboost": 0.94},
                         run_extra={"trainer_seconds": 30.0, "steps": {"Trainer": 12.0}}, unknown={"a": 1})]
    text, _ = render_page.render({"tabular_quality": extended}, "<!-- bench: quality -->\n")
    header = next(line for line in text.splitlines() if line.startswith("| table |"))
    assert "| CatBoost |" in header and "| Trainer s |" in header and "linear" not in header
    assert "| goal vs better |" in header
    assert "| 0.9300 | 0.9400 | -0.0200 | **missed** | -0.0300 | **missed** | 30.0 |" in text
    assert ("Within goal of the better of LightGBM and CatBoost: **0 of 1**; missed: telecom_churn. Mean beside "
            "LightGBM: AUC -0.0200. Mean beside CatBoost: AUC -0.0300.") in text


def test_the_time_split_table_shows_each_part_before_and_after_and_the_fitting_share(bench):
    _, render_page = bench
    parts = lambda run, trainer, fitting, export: {"three commands": run + 20, "run": run, "trainer": trainer,  # noqa: E731
                                                  "fitting": fitting, "export": export}
    found = [_record("credit", "2026-11-28T10:00:00Z", {"rows": 4454, "columns": 14, "after": parts(58, 20.5, 9.2, 9.1),
                                                        "before": parts(134, 46.9, 17.1, 36.4), "before_code": "a1",
                                                        "after_code": "b2"}, bench_name="time_split"),
             _record("penguins", "2026-11-28T10:00:00Z", {"rows": 334, "columns": 8, "after": parts(50, 14.2, 5.2, 4.5),
                                                          "before": None, "after_code": "b2"}, bench_name="time_split")]
    text, _ = render_page.render({"time_split": found}, "<!-- bench: time_split -->\n")
    assert ("| credit | 4,454 | 14 | 154 s → 78 s | 134 s → 58 s | 46.9 s → 20.5 s | 17.1 s → 9.2 s | 36% → 45% "
            "| 36.4 s → 9.1 s | a1 → b2 |") in text
    assert "| penguins | 334 | 8 | 70 s | 50 s | 14.2 s | 5.2 s | 37% | 4.5 s | b2 |" in text


def test_the_quality_change_line_counts_each_tables_newest_verdict_and_names_the_nearest_to_worse(bench):
    _, render_page = bench

    def change(table, date, verdict, before, after, spread, lower=False, codes=("a1", "b2")):
        figures = {"verdict": verdict, "before": before, "after": after, "spread": spread, "lower_is_better": lower,
                   "change": after / before if lower else after - before,
                   "metric": "mean_absolute_error" if lower else "auc", "before_code": codes[0], "after_code": codes[1]}
        return _record(table, date, figures, commit=date, bench_name="quality_change")
    found = [change("wage", "2026-12-04T10:00:00Z", "other eval split", 22.6, 22.8, 0.1, lower=True,
                    codes=("a1", "c3")),
             change("wage", "2026-12-04T11:00:00Z", "not worse", 22.68, 22.71, 0.13, lower=True),
             change("vote", "2026-12-04T11:00:00Z", "not worse", 0.9564, 0.9565, 0.0004),
             change("chemistry", "2026-12-04T11:00:00Z", "not worse", 0.3838, 0.3814, 0.0032),
             change("hotel", "2026-12-04T11:00:00Z", "worse", 7.40, 7.60, 0.07, lower=True),
             change("digits", "2026-12-04T10:00:00Z", "other eval split", 0.98, 0.975, 0.002, codes=("a1", "c3"))]
    text, _ = render_page.render({"quality_change": found}, "<!-- bench: quality_change -->\n")
    lines = text.splitlines()
    assert lines[0] == ("- `a1` → `c3`: **0 of 0 tables not worse** beyond the larger spread (none); not judged, "
                        "scored on another eval split: digits. 2026-12-04: `python bench/quality_change.py`")
    assert lines[1].startswith("- `a1` → `b2`: **3 of 4 tables not worse** beyond the larger spread (chemistry, "
                               "vote, wage); **worse**: hotel; nearest to worse: hotel (MAE 1.027x, spread 0.0700).")
    found[4] = change("hotel", "2026-12-04T11:00:00Z", "not worse", 7.40, 7.38, 0.07, lower=True)
    found.append(change("penguins", "2026-12-04T11:00:00Z", "not worse", 0.97, 0.98, 0.0))  # one run a side, better
    text, _ = render_page.render({"quality_change": found}, "<!-- bench: quality_change -->\n")
    assert ("**5 of 5 tables not worse** beyond the larger spread (chemistry, hotel, penguins, vote, wage); nearest to "
            "worse: chemistry (AUC -0.0024, spread 0.0032).") in text


def test_targets_follow_the_newest_records(bench):
    _, render_page = bench
    series = {"series": "taxi, configs/taxi_fare.yaml", "copies": 100, "rows": 1_500_200}
    found = [_record("fare, 100x", "2026-11-26", dict(series, runs=[{"whole_run_s": 290.0}]), commit=None),
             _record("fare, 100x", "2026-11-29T08:00:00Z", dict(series, runs=[{"whole_run_s": 310.0}]))]
    text, _ = render_page.render({"scale": found}, "<!-- bench: targets -->\n")
    assert "| whole run at 100x (taxi fare, 1,500,200 rows) under 300 s | 310.0 s | 2026-11-29 | **missed** |" in text
    text, _ = render_page.render({"scale": found[:1]}, "<!-- bench: targets -->\n")
    assert "| 290.0 s | 2026-11-26 | met |" in text


def test_append_writes_one_record_with_where_and_how_it_was_measured(bench, tmp_path, monkeypatch):
    records, _ = bench
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    monkeypatch.delenv("BENCH_RECORDS", raising=False)
    argv = [os.path.join(PROJECT_ROOT, "bench", "scale.py"), "--workdir", os.path.join(PROJECT_ROOT, "w"),
            "--config", "a b.yaml", "--before", "/var/tmp/runs/before.json", "--json=/var/tmp/runs/a.json"]
    path = records.append("scale", "taxi, 1x", {"runs": [{"whole_run_s": 25.5}]}, argv=argv, note="one run")
    [line] = open(path).read().splitlines()
    record = json.loads(line)
    assert record["bench"] == "scale" and record["measurement"] == "taxi, 1x" and record["source"] == "run"
    assert record["command"] == ("python bench/scale.py --workdir w --config 'a b.yaml' --before before.json "
                                 "--json=a.json")  # the machine's other folders left out
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["date"]) and record["note"] == "one run"
    assert record["commit"] == subprocess.run(["git", "-C", PROJECT_ROOT, "rev-parse", "HEAD"], capture_output=True,
                                              text=True).stdout.strip()
    assert isinstance(record["dirty"], bool) and record["machine"]["cores"] == os.cpu_count()
    assert records.read(str(tmp_path)) == {"scale": [record]}
    monkeypatch.setenv("BENCH_RECORDS", "off")
    assert records.append("scale", "taxi, 1x", {}) is None
    assert len(open(path).read().splitlines()) == 1


def test_machine_reads_the_cpu_model_memory_and_bf16(bench, tmp_path):
    records, _ = bench
    (tmp_path / "cpuinfo").write_text("processor\t: 0\nmodel name\t: Some CPU 9000\nflags\t\t: sse avx512_bf16\n")
    (tmp_path / "meminfo").write_text("MemTotal:       24683656 kB\nMemFree: 1 kB\n")
    described = records.machine(str(tmp_path / "cpuinfo"), str(tmp_path / "meminfo"))
    assert described == {"cores": os.cpu_count(), "memory_gib": 23.5, "cpu": "Some CPU 9000", "avx512_bf16": True}


def test_every_committed_record_says_when_where_and_how(bench):
    records, _ = bench
    found = records.read(records.RESULTS_DIR)
    assert {"scale", "tabular_quality", "trainer_throughput", "wide_table"} <= set(found)
    for bench_name, kept in found.items():
        for record in kept:
            assert record["bench"] == bench_name and record["measurement"] and record["command"]
            assert re.match(r"\d{4}-\d\d-\d\d", record["date"]) and isinstance(record["figures"], dict)
            assert {"cores", "memory_gib", "cpu", "avx512_bf16"} <= set(record["machine"])
            assert record["source"] == "run" or record["source"].startswith("transcribed from docs/benchmarks.md")
            assert record["source"] != "run" or record["commit"], record


def test_every_bench_script_that_prints_figures_appends_records():
    scripts = sorted(name for name in os.listdir(BENCH) if name.endswith(".py") and name not in HELPERS)
    assert len(scripts) >= 13
    for name in scripts:
        with open(os.path.join(BENCH, name)) as handle:
            assert re.search(rf"records\.append\(\s*\"{name[:-3]}\"", handle.read()), name


def test_the_scale_and_quality_benches_records_land_where_the_page_looks(bench, tmp_path, monkeypatch):
    records, render_page = bench
    scale, quality = importlib.import_module("scale"), importlib.import_module("tabular_quality")
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path))
    monkeypatch.delenv("BENCH_RECORDS", raising=False)
    for config in ("configs/taxi_fare.yaml", os.path.join(PROJECT_ROOT, "configs", "taxi_fare.yaml")):
        assert scale.series_name("taxi", config) == render_page.FARE_SERIES  # the targets' series
    run = {"steps": {"Trainer": 97.1}, "wall": 172.0, "peak_rss_gb": 1.39,
           "reports": {"ingest": {"counts": {"train": 1_000_150, "eval": 500_050}}, "baseline": {}, "evaluation": {},
                       "trainer": {"examples_per_second": 209_169, "input_wait_fraction": 0.229}}}
    series = scale.series_name("taxi", "configs/taxi_fare.yaml")
    records.append("scale", f"{series}, 100x", {"series": series, **scale.run_figures(100, 1_500_200, run)})
    result = {"source": "s", "label": "y", "rows": 900, "task": "binary", "columns": 3, "metric": "auc",
              "trivial": 0.5, "failures": [], "yardsticks": {"lightgbm": 0.80, "catboost": 0.815, "linear": 0.70},
              "models": {quality.SCHEMA: quality.summarize_runs([
                  {"seed": seed, "metric": "auc", "value": value, "trivial": 0.5, "trainer_seconds": 10.0,
                   "fit_seconds": 5.0, "savedmodel": value, "full_int8": value, "dynamic_int8": value,
                   "wall_seconds": 20.0, "error": None} for seed, value in ((0, 0.81), (1, 0.83))])}}
    quality.record_table("cohort_deaths", result, PROJECT_ROOT)  # a table of the check set
    quality.record_table("spam_words", result, PROJECT_ROOT)  # of the tuning set
    found = records.read(str(tmp_path))
    assert [record["figures"]["half"] for record in found["tabular_quality"]] == ["check", "tuning"]
    text, _ = render_page.render(found)
    assert "| whole run at 100x (taxi fare, 1,500,200 rows) under 300 s | 172.0 s |" in text
    assert "| Trainer input wait under 5% (taxi fare, the worst run at each size) | 100x 22.9% |" in text
    check, tuning = text.split("### The check set")[1].split("### The tuning set")
    assert ("| cohort_deaths | AUC | 0.8200 (0.8100–0.8300) | 0, 1 | 0.8000 | 0.8150 | 0.7000 | +0.0200 | met "
            "| +0.0050 | met | 10.0 | 5.0 |") in check
    assert "| spam_words |" in tuning and "| spam_words |" not in check
    # the check set's targets count every table of the set: one scored is 1 of 24
    assert ("| check set: at least 85% of its tables within goal of the better of LightGBM and CatBoost | 1 of 24 (4%) "
            "|") in text
    assert "| check set: on average at least as good as CatBoost | AUC +0.0050 |" in text
