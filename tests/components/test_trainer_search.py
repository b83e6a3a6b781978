"""train.search (components/trainer/train.py): the schema-driven model's candidates, its number encodings,
trained in turn from the same seed and the one best out of fold served; the first alone with the whole time
budget when its share would cut its plan; no search when warm-starting; the FP32 baseline trains the chosen
candidate. Real training of models.tabular on the 3,000-row taxi span (the fare, a regression)."""
import dataclasses
import json
import os
import types

import keras
import pytest

from components.core import contract
from components.core.records import TrainingReport, model_ready_dir
from components.core.task_layers import load_keras_model
from components.settings import TaskConfig
from components.trainer.run_fn import candidate_variant
from components.trainer.train import (ADAPT_SAMPLE_SIZE, Search, TrainingJob, candidates_to_search, read_sample,
                                     search_candidates, set_up, train)
from models import tabular
from pipeline.config import load_config

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCHEMA = os.path.join(PROJECT_ROOT, "schemas", "taxi", "schema.pbtxt")
TASK = TaskConfig(type="regression", label="fare", exclude=["tips", "payment_type"])


def _job(files, output, base_model=None, candidate="", **overrides) -> TrainingJob:
    # no timing of the model or the host unless asked: only the budget's cut needs the model's rate
    settings = load_config(check_references=False, train={
        "model": "models.tabular", "epochs": 4, "batch_size": 64, "folds": 3, "search": True, "xla": "off",
        "input_probe_steps": 0, "checkpoint_min_seconds": 0, "warm_start": True, **overrides}).train
    return TrainingJob(settings=settings, serving_model_dir=str(output / "serving"), run_dir=str(output / "run"),
                       checkpoint_dir=str(output / "checkpoints"), base_model=base_model, task_config=TASK,
                       schema_path=SCHEMA, candidate=candidate, **files)


def _served_edges(serving_dir: str) -> list[float]:
    """The trip miles' quantile edges in the served model's preprocessing."""
    preprocessing = load_keras_model(os.path.join(model_ready_dir(serving_dir), contract.PREPROCESSING_FILE))
    return list(preprocessing.get_layer("trip_miles.scaled").edges)


BUDGET = 300.0  # seconds: more than the small plans here need, shared between the candidates


@pytest.fixture(scope="module")
def searched(files, tmp_path_factory):
    job = _job(files, tmp_path_factory.mktemp("searched"), time_budget_seconds=BUDGET)
    return job, train(job)


@pytest.mark.training
def test_search_trains_each_number_encoding_and_serves_the_one_best_out_of_fold(files, searched):
    job, report = searched
    assert [tried["name"] for tried in report.candidates] == ["16 bins", "48 bins"] and not report.search_note
    values = {tried["name"]: tried["validation"] for tried in report.candidates}
    assert values["16 bins"] != values["48 bins"]
    best = min(values, key=values.get)  # the fare's MAE: lower is better
    assert report.candidate == best and report.final_metrics["val_mae"] == values[best]
    assert report.search_line().startswith(f"{best} chosen out of fold: 16 bins {values['16 bins']:.4f} (best ")
    assert report.fit_seconds == pytest.approx(sum(tried["fit_seconds"] for tried in report.candidates))
    # the budget shared: half for the first; the second has what the first left
    first, second = report.candidates
    assert first["time_budget_seconds"] == BUDGET / 2 and report.time_budget_seconds == BUDGET
    assert second["time_budget_seconds"] == pytest.approx(BUDGET - first["fit_seconds"])
    # each candidate's TensorBoard logs in a folder of its own
    assert {"candidate-0", "candidate-1"} <= set(os.listdir(job.run_dir))
    # the served preprocessing is the chosen encoding's, fitted to the training sample; the other's differs
    module = tabular.configure(SCHEMA, TASK)
    sample = read_sample(job.train_files, {**module.INPUTS, **module.LABEL_INPUTS}, ADAPT_SAMPLE_SIZE)
    edges = {name: list(module.candidate(name).build_preprocessing(sample).get_layer("trip_miles.scaled").edges)
             for name in module.CANDIDATES}
    assert len(edges["48 bins"]) > len(edges["16 bins"])
    assert _served_edges(job.serving_model_dir) == edges[best]
    assert module.candidate(best).DESCRIPTION == report.model_description


@pytest.mark.training
def test_a_candidate_trained_alone_is_the_model_the_search_trained(files, searched, tmp_path):
    """What the FP32 baseline does: the candidate's chosen variant alone, with the budget it had. The second
    candidate here (the first, trained again, is in the resumed search below)."""
    job, report = searched
    with open(os.path.join(job.run_dir, contract.TRAINING_REPORT_FILE)) as handle:
        written = json.load(handle)
    settings, candidate = candidate_variant(job.run_dir, job.settings)
    assert candidate == report.candidate == written["candidate"] and not settings.search
    chosen = next(tried for tried in report.candidates if tried["name"] == candidate)
    assert settings.time_budget_seconds == chosen["time_budget_seconds"] > 0
    second = report.candidates[1]
    alone = train(_job(files, tmp_path, candidate=second["name"], search=False,
                       time_budget_seconds=second["time_budget_seconds"]))
    assert alone.candidates == [] and alone.candidate == second["name"]
    assert alone.final_metrics["val_mae"] == pytest.approx(second["validation"], rel=1e-6)


@pytest.mark.training
def test_a_first_candidate_its_share_of_the_budget_would_cut_trains_alone_with_the_whole_budget(files, tmp_path):
    report = train(_job(files, tmp_path, epochs=400, time_budget_seconds=4.0, input_probe_steps=20))
    assert [tried["name"] for tried in report.candidates] == ["16 bins"] and report.candidate == "16 bins"
    assert report.candidates[0]["time_budget_seconds"] == 4.0 and report.time_budget_seconds == 4.0
    assert report.intervals_before_budget > report.plan["intervals"]  # the whole budget cut the plan too
    assert "16 bins alone" in report.search_line() and "whole budget" in report.search_line()


@pytest.mark.training
def test_a_warm_start_continues_the_served_variant_without_a_search(files, searched, tmp_path):
    job, report = searched
    warm = train(_job(files, tmp_path, base_model=job.serving_model_dir, epochs=1))
    assert warm.warm_start["applied"] and warm.candidates == [] and warm.candidate == report.candidate
    assert warm.search_line() == ("not searched: the warm start continues the served model's variant, "
                                  f"{report.candidate}")
    assert _served_edges(str(tmp_path / "serving")) == _served_edges(job.serving_model_dir)
    assert warm.model_description == report.model_description  # the served variant's, not the default's


@pytest.mark.training
def test_a_warm_start_whose_base_no_longer_fits_searches_each_candidate_under_its_own_name(files, tmp_path):
    """A base built as the second candidate that no longer fits (it reads a column the config now leaves out):
    the warm start is skipped and says why, set_up builds the base's variant, and the search trains every
    candidate with its own encoding, that one as built."""
    base = train(_job(files, tmp_path / "base", candidate="48 bins", search=False, epochs=1))
    assert base.candidate == "48 bins"
    narrower = dataclasses.replace(TASK, exclude=[*TASK.exclude, "trip_seconds"])
    job = dataclasses.replace(_job(files, tmp_path / "warm", base_model=str(tmp_path / "base" / "serving"),
                                   epochs=1), task_config=narrower)
    setup = set_up(job)
    assert setup.warm.preprocessing is None and setup.variant == "48 bins"
    assert "reads other columns than this model: no longer read: trip_seconds;" in setup.warm.reason
    names, _ = candidates_to_search(job, setup)
    search = search_candidates(job, setup, names)
    module = tabular.configure(SCHEMA, narrower)
    assert [name for name, _, _ in search.tried] == ["16 bins", "48 bins"]
    for name, candidate, _ in search.tried:
        expected = module.candidate(name).build_preprocessing(setup.sample).get_layer("trip_miles.scaled").edges
        assert candidate.variant == name
        assert list(candidate.preprocessing.get_layer("trip_miles.scaled").edges) == list(expected), name
    assert search.tried[1][1] is setup  # the variant set_up built, not built twice


def test_a_candidate_the_model_module_does_not_have_is_named_with_those_it_has():
    with pytest.raises(ValueError, match=r"no candidate '8 bins': its candidates are 16 bins, 48 bins"):
        tabular.configure(SCHEMA, TASK).candidate("8 bins")


class _FailInSecondCandidate(keras.callbacks.Callback):
    """Fails the search after the second candidate's second interval, once its checkpoint is written."""

    def __init__(self):
        super().__init__()
        self.fits = 0

    def on_train_begin(self, logs=None):
        self.fits += 1

    def on_epoch_end(self, epoch, logs=None):
        if self.fits == 2 and epoch == 1:
            raise RuntimeError("killed")


@pytest.mark.training
def test_a_search_that_fails_resumes_the_candidate_it_was_training(files, searched, tmp_path):
    job = _job(files, tmp_path)
    with pytest.raises(RuntimeError, match="killed"):
        train(job, extra_callbacks=(_FailInSecondCandidate(),))
    assert os.listdir(job.checkpoint_dir) == ["candidate-1"]  # the first one's ended with its training
    report = train(job)
    first, second = report.candidates
    assert first["resumed_from_step"] == 0 and second["resumed_from_step"] > 0
    # from the same seed, the same models as the search that was never stopped
    _, uninterrupted = searched
    assert [c["name"] for c in report.candidates] == [c["name"] for c in uninterrupted.candidates]
    assert first["validation"] == pytest.approx(uninterrupted.candidates[0]["validation"], rel=1e-6)


def _tried(task: str, *values) -> Search:
    """A search whose candidates a, b, ... ended with these validation values (None: none measured)."""
    setup = types.SimpleNamespace(model_module=types.SimpleNamespace(TASK=task))
    return Search([(name, setup, types.SimpleNamespace(best=types.SimpleNamespace(best_value=value)))
                   for name, value in zip("abc", values)])


@pytest.mark.parametrize("task, values, chosen", [
    ("binary", (0.90, 0.92), "b"), ("multiclass", (0.81, 0.80), "a"), ("regression", (2.0, 1.9), "b"),
    ("binary", (0.90, 0.90), "a"), ("regression", (None, 5.0), "b"), ("binary", (0.7, None, 0.6), "a")])
def test_the_search_serves_the_best_on_validation_in_the_task_s_direction_the_default_on_a_tie(task, values, chosen):
    assert _tried(task, *values).chosen()[0] == chosen


def test_the_search_line_says_what_each_candidate_scored_and_why_the_search_stopped_short():
    report = TrainingReport(folds=8, candidate="16 bins", search_note="48 bins left out: diverged", candidates=[
        {"name": "16 bins", "validation": 0.8272, "best_interval": 36, "intervals_run": 49},
        {"name": "32 bins", "validation": None, "best_interval": 0, "intervals_run": 0}])
    assert report.search_line() == ("16 bins chosen out of fold: 16 bins 0.8272 (best 36 of 49), 32 bins n/a "
                                    "(best 0 of 0); 48 bins left out: diverged")
    assert TrainingReport(search_note="not searched: x").search_line() == "not searched: x"
