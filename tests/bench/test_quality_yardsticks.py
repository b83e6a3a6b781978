"""The quality benchmark's yardsticks on a tiny synthetic split: CatBoost's defaults beside LightGBM's (string
columns as categorical features, a fixed seed, predictions as each task scores them, its seconds kept), and the
goal judged against the better of the two in the closing table."""

import numpy as np
import pytest

from tests.bench.scripts import bench_script

ROUNDS = 60  # instead of CatBoost's 1,000 (what the bench uses): the same code, a quicker test


@pytest.fixture(scope="module")
def bench():
    with bench_script("tabular_quality") as module:
        yield module


@pytest.fixture
def quick(bench, monkeypatch):
    """The bench module with CatBoost at ROUNDS rounds; skips where the `bench` extra (LightGBM, CatBoost) is not
    installed (`make test`'s environment has no bench extra; `make bench-quality` installs it)."""
    pytest.importorskip("lightgbm", reason="the bench extra is not installed")
    pytest.importorskip("catboost", reason="the bench extra is not installed")
    monkeypatch.setitem(bench.CATBOOST_SETTINGS, "iterations", ROUNDS)
    return bench


def _split(task: str, rows: int, seed: int):
    """Features as the bench reads them from a run (a float, an int with the missing marker, a 40-value string as
    bytes) and a label the string mostly decides."""
    generator = np.random.default_rng(seed)
    city = generator.integers(0, 40, rows)
    number = generator.normal(size=rows)
    count = generator.integers(0, 5, rows).astype(np.int64)
    count[::17] = -(2 ** 63)  # the missing integer
    signal = (city % 4) + 0.3 * number
    if task == "binary":
        label = (signal + generator.normal(scale=0.3, size=rows) > 1.6).astype(np.float32)
    elif task == "multiclass":
        label = (city % 3).astype(np.int64)
    else:
        label = (10 * signal + generator.normal(size=rows)).astype(np.float32)
    features = {"number": number.astype(np.float32), "count": count,
                "city": np.array([f"city {value}".encode() for value in city], dtype=object)}
    return features, label


def _splits(task: str):
    return {"train": _split(task, 400, 0), "eval": _split(task, 200, 1)}


@pytest.mark.parametrize("task, floor", [("binary", 0.9), ("multiclass", 0.9), ("regression", None)])
def test_catboost_sits_beside_lightgbm_on_the_same_split(quick, task, floor):
    splits = _splits(task)
    figures = quick.yardsticks(task, splits)
    assert set(figures) == {"lightgbm", "catboost", "linear", "linear_model", "lightgbm_seconds", "catboost_seconds"}
    assert figures["catboost_seconds"] >= 0 and figures["lightgbm_seconds"] >= 0
    if floor is not None:  # AUC or accuracy: the string column carries the label, so a good score
        assert figures["catboost"] >= floor and figures["lightgbm"] >= floor
    else:  # MAE: well under the trivial predictor's (the median)
        labels = splits["eval"][1]
        trivial = float(np.mean(np.abs(labels - np.median(labels))))
        assert figures["catboost"] < 0.6 * trivial and figures["lightgbm"] < 0.6 * trivial


def test_catboost_takes_strings_as_categories_with_a_fixed_seed(quick):
    (train_x, train_y), (eval_x, _) = _split("binary", 400, 0), _split("binary", 200, 1)
    train, evaluate = quick._frame(train_x), quick._frame(eval_x)
    as_catboost = quick._catboost_frame(train)
    assert as_catboost["city"].dtype == object and as_catboost["city"][0].startswith("city ")
    assert np.isnan(as_catboost["count"][0])  # the missing integer stays missing
    first = quick.catboost_predictions("binary", train, train_y, evaluate, 2)
    again = quick.catboost_predictions("binary", train, train_y, evaluate, 2)
    assert first.shape == (200, 1) and np.array_equal(first, again)  # the positive class's, the same each time
    assert quick.CATBOOST_SETTINGS["thread_count"] == 2 and quick.CATBOOST_SETTINGS["random_seed"] == 0


def test_strings_beyond_ascii_are_read_as_utf8(bench):
    features = {"title": np.array(["Amélie (2001)".encode(), b"Heat (1995)", "東京物語".encode()], dtype=object),
                "count": np.array([1, -(2 ** 63), 3], dtype=np.int64)}
    frame = bench._frame(features)
    assert list(frame["title"]) == ["Amélie (2001)", "Heat (1995)", "東京物語"]
    assert str(frame["title"].dtype) == "category" and np.isnan(frame["count"][1])


def test_a_class_missing_from_training_gets_probability_zero(quick):
    (train_x, train_y), (eval_x, eval_y) = _split("multiclass", 300, 0), _split("multiclass", 100, 1)
    keep = train_y != 2
    train_x, train_y = {name: values[keep] for name, values in train_x.items()}, train_y[keep]
    classes = quick.class_count(train_y, eval_y)
    probabilities = quick.catboost_predictions("multiclass", quick._frame(train_x), train_y, quick._frame(eval_x),
                                               classes)
    assert probabilities.shape == (100, 3) and np.all(probabilities[:, 2] == 0)
    assert np.allclose(probabilities.sum(axis=1), 1)


def _result(bench, metric, ours, lightgbm, catboost):
    runs = [{"seed": seed, "metric": metric, "value": value, "trivial": None, "trainer_seconds": 1.0,
             "fit_seconds": 1.0, "savedmodel": None, "full_int8": None, "dynamic_int8": None, "wall_seconds": 2.0,
             "error": None} for seed, value in enumerate(ours)]
    return {"source": "s", "label": "y", "metric": metric, "trivial": None, "failures": [],
            "yardsticks": {"lightgbm": lightgbm, "catboost": catboost, "linear": None, "linear_model": "ridge"},
            "models": {bench.SCHEMA: bench.summarize_runs(runs)}}


def test_the_goal_is_judged_against_the_better_of_the_two(bench):
    assert bench.better_yardstick("auc", 0.90, 0.91) == 0.91
    assert bench.better_yardstick("mean_absolute_error", 2.0, 1.8) == 1.8
    assert bench.better_yardstick("auc", 0.90, None) is None
    results = {"churn": _result(bench, "auc", [0.902, 0.904], 0.90, 0.91),  # within LightGBM's goal, not CatBoost's
               "fare": _result(bench, "mean_absolute_error", [1.0, 1.0], 1.1, 0.96)}  # 1.0 <= 1.05 * 0.96
    lines = bench.summary_lines(results)
    assert "| LightGBM | CatBoost |" in lines[0] and "| ours vs better | goal vs better |" in lines[0]
    assert all(line.count("|") == lines[0].count("|") for line in lines)
    assert "| 0.9000 | 0.9100 | n/a | n/a | +0.0030 | met | -0.0070 | **missed** |" in lines[2]
    assert "| 0.909x | met | 1.042x | met |" in lines[3]
    goals = bench.goal_lines(results)
    assert goals[0] == "within goal of LightGBM: 2 of 2 tables; missed: none"
    assert goals[1] == "within goal of the better of LightGBM and CatBoost: 1 of 2 tables; missed: churn"
    assert "mean AUC ours - CatBoost over 1 tables: -0.0070" in goals
    assert "mean MAE CatBoost's / ours over 1 tables: 0.9600" in goals
