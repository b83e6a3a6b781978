"""The quality benchmark's --merge: runs of one table made in several calls (seed 0 in one, seeds 1 and 2 in
a later one) give the figures one call of all of them would have."""

import pytest

from tests.bench.scripts import bench_script


@pytest.fixture(scope="module")
def bench():
    with bench_script("tabular_quality") as module:
        yield module


def _run(seed, value, seconds=10.0, error=None):
    return {"seed": seed, "metric": "auc", "value": value, "trivial": 0.5, "trainer_seconds": seconds,
            "fit_seconds": seconds / 2, "savedmodel": value, "full_int8": value - 0.001, "dynamic_int8": value,
            "wall_seconds": 20.0, "error": error}


def _document(bench, runs, lightgbm=None, failures=()):
    table = {"source": "s", "label": "y", "rows": 1000, "task": "binary", "columns": 5, "metric": "auc",
             "trivial": 0.5, "failures": list(failures), "models": {bench.SCHEMA: bench.summarize_runs(runs)},
             "yardsticks": {"lightgbm": lightgbm, "linear": 0.7, "linear_model": "logistic regression"}
             if lightgbm is not None else {"error": "no successful schema-driven run"}}
    return {"tables": {"credit": table}}


def test_merged_runs_are_summarized_as_one_call_of_all_of_them(bench):
    first = _document(bench, [_run(0, 0.80), _run(1, 0.10, error="seed 1: Trainer failed")], lightgbm=0.79,
                      failures=["seed 1: Trainer failed"])
    later = _document(bench, [_run(1, 0.82, seconds=30.0), _run(2, 0.84)], failures=["seed 3 failed"])
    merged = bench.merge_results([first, later])["credit"]

    figures = merged["models"][bench.SCHEMA]
    assert [run["seed"] for run in figures["runs"]] == [0, 1, 2]
    assert figures["value"] == {"mean": pytest.approx(0.82), "min": 0.80, "max": 0.84, "n": 3}  # seed 1: the later
    assert figures["trainer_seconds"]["max"] == 30.0
    assert merged["yardsticks"]["lightgbm"] == 0.79  # the later call measured none: the earlier one's stay
    assert merged["failures"] == ["seed 3 failed"]  # seed 1's failure went with the run the later call replaced
    assert bench.goal_lines({"credit": merged})[0].startswith("within goal of LightGBM: 1 of 1 tables")


def test_a_call_without_yardsticks_keeps_the_earlier_calls(bench):
    first = _document(bench, [_run(0, 0.80)], lightgbm=0.79)
    later = _document(bench, [_run(1, 0.82), _run(2, 0.84)])
    later["tables"]["credit"]["yardsticks"] = dict(bench.NOT_MEASURED)
    merged = bench.merge_results([first, later])["credit"]
    assert merged["yardsticks"]["lightgbm"] == 0.79 and merged["models"][bench.SCHEMA]["value"]["n"] == 3
    alone = bench.merge_results([later])["credit"]
    assert alone["yardsticks"] == bench.NOT_MEASURED  # never measured: the reason stays


def test_a_calls_document_is_replaced_whole_after_each_table(bench, tmp_path):
    import json

    path = str(tmp_path / "figures.json")
    bench.write_document(path, {"code_version": "abc", "tables": {"credit": {"models": {}}}})
    bench.write_document(path, {"code_version": "abc", "tables": {"credit": {"models": {}}, "wage": {"models": {}}}})
    document = json.loads((tmp_path / "figures.json").read_text())
    assert list(document["tables"]) == ["credit", "wage"] and document["date"].endswith("+00:00")
    assert [item.name for item in tmp_path.iterdir()] == ["figures.json"]  # no partial file left


def test_a_table_whose_yardsticks_were_never_measured_keeps_the_reason(bench):
    merged = bench.merge_results([_document(bench, [_run(0, 0.8)])] * 2)["credit"]
    assert merged["yardsticks"] == {"error": "no successful schema-driven run"}
    assert merged["models"][bench.SCHEMA]["value"]["n"] == 1  # the same seed twice: one run


def test_merged_runs_of_one_checkout_are_recorded_as_one_table_and_of_several_not(bench, tmp_path, monkeypatch,
                                                                                 capsys):
    import json
    import subprocess

    monkeypatch.setenv("BENCH_RECORDS", "on")
    monkeypatch.setenv("BENCH_RESULTS_DIR", str(tmp_path / "results"))
    code = tmp_path / "code"
    code.mkdir()
    for command in (["init", "-q"], ["-c", "user.email=a@b", "-c", "user.name=a", "commit", "-q", "--allow-empty",
                                     "-m", "x"]):
        subprocess.run(["git", "-C", str(code), *command], check=True)
    version = bench._code_version(str(code))
    first, later = _document(bench, [_run(0, 0.80)], lightgbm=0.79), _document(bench, [_run(1, 0.82), _run(2, 0.84)])
    later["tables"]["credit"]["yardsticks"] = dict(bench.NOT_MEASURED)
    for document in (first, later):
        document.update(code=str(code), code_version=version)
    first["argv"] = ["--half", "check", "--seeds", "1", "--first-seed", "0", "--work", str(tmp_path / "w"),
                     f"--json={tmp_path / 'w.json'}"]  # a call that kept its command; the later one did not
    later.update(seeds=2, first_seed=1, data_from=str(tmp_path / "earlier"))  # a call that kept only its options
    bench.record_merged([first, later], bench.merge_results([first, later]),
                        [str(tmp_path / "first.json"), str(tmp_path / "later.json")])
    [line] = (tmp_path / "results" / "tabular_quality.jsonl").read_text().splitlines()
    record = json.loads(line)
    assert record["measurement"] == "credit" and [run["seed"] for run in record["figures"]["runs"]] == [0, 1, 2]
    assert record["command"] == "python bench/tabular_quality.py --merge first.json later.json"
    assert record["note"] == ("The runs of 2 calls merged: `--half check --seeds 1 --first-seed 0 --work WORK "
                              "--json=JSON`; `--tables credit --seeds 2 --first-seed 1 --data-from DATA_FROM --no-yardsticks`.")
    assert record["commit"].startswith(version) and record["figures"]["yardsticks"]["lightgbm"] == 0.79

    bench.record_table("credit", later["tables"]["credit"], str(code))  # the later call's own record
    own = json.loads((tmp_path / "results" / "tabular_quality.jsonl").read_text().splitlines()[1])
    assert "yardsticks" not in own["figures"]  # not fitted in that call: the page pools the earlier call's

    later["code_version"] = "0000000"  # another commit's runs: nothing recorded, and it says why
    bench.record_merged([first, later], bench.merge_results([first, later]), ["first.json", "later.json"])
    assert len((tmp_path / "results" / "tabular_quality.jsonl").read_text().splitlines()) == 2
    assert "merged figures not recorded" in capsys.readouterr().out


def test_the_code_version_counts_a_changed_file_but_not_the_records_a_call_appended(bench, tmp_path):
    import subprocess

    def git(*command):
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.email=a@b", "-c", "user.name=a", *command], check=True)

    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "tabular_quality.jsonl").write_text("{}\n")
    (tmp_path / "model.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "x")
    commit = bench._code_version(str(tmp_path))
    assert len(commit) == 7 and "+" not in commit
    (tmp_path / "bench" / "results" / "tabular_quality.jsonl").write_text("{}\n{}\n")  # an earlier call's record
    assert bench._code_version(str(tmp_path)) == commit
    (tmp_path / "model.py").write_text("x = 2\n")
    assert bench._code_version(str(tmp_path)) == commit + "+changes"


def test_later_seeds_are_asked_for_without_yardsticks_and_folders_by_their_whole_option(bench, monkeypatch):
    monkeypatch.setattr("sys.argv", ["tabular_quality.py", "--tables", "credit", "--first-seed", "1",
                                     "--no-yardsticks"])
    args = bench.parse_args()
    assert args.yardsticks is False and args.first_seed == 1 and args.tables == ["credit"]
    monkeypatch.setattr("sys.argv", ["tabular_quality.py", "--tables", "credit", "--wor", "/elsewhere"])
    with pytest.raises(SystemExit):  # an abbreviated folder option would escape call_description's placeholders
        bench.parse_args()


def test_a_calls_record_keeps_its_command_without_the_machines_folders(bench):
    argv = ["--tables", "credit", "--work", "/data/runs/w", "--json=/data/runs/w.json", "--data-from", "/x"]
    assert bench.without_folders(argv) == ["--tables", "credit", "--work", "WORK", "--json=JSON", "--data-from",
                                           "DATA_FROM"]
