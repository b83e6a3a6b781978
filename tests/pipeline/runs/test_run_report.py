"""The HTML run report of the production run, rendered by headless Chromium (Debian's chromium package); and
the run summary, the report and the status table rendered from one RunFacts built by hand."""
import dataclasses
import datetime
import glob
import html
import json
import os
import re
import shutil
import subprocess

import pytest

from components.core import contract
from components.core.records import EvaluationReport, ExportReport, TrainingReport
from pipeline.dag.local_runner import RunSummary
from pipeline.runs.run_facts import RunFacts, Step, render_runs
from pipeline.runs.run_report import render_html

# Records, once the page has loaded, whether each image decoded (the test's own addition to a copy).
IMAGE_PROBE = ("<script>addEventListener('load', () => { document.body.dataset.images = Array.from(document.images)"
               ".map(i => i.complete && i.naturalWidth > 0 ? 'ok' : 'broken').join(' '); });</script>")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium():
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium package")
        pytest.skip("Debian's chromium package is not installed (apt-get install -y chromium)")
    return path


def _rendered_text(page_path, tmp_path):
    """Input: an HTML file. Output: (the DOM Chromium built, as text without tags; the image probe's result)."""
    probed = tmp_path / "page.html"
    probed.write_text(open(page_path, encoding="utf-8").read().replace("</body>", IMAGE_PROBE + "</body>"))
    result = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                             "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    images = re.search(r'<body[^>]*data-images="([^"]*)"', dom)
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))
    return text, (images.group(1).split() if images else [])


@pytest.mark.e2e
def test_report_renders_in_chromium_with_the_key_numbers_and_every_plot(production, tmp_path):
    text, images = _rendered_text(production.report, tmp_path)

    evaluation_dirs = glob.glob(os.path.join(production.config.pipeline_root, "PrecisionEvaluator",
                                           contract.EVALUATION, "*"))
    first_evaluation = min(evaluation_dirs, key=lambda folder: int(os.path.basename(folder)))
    precision = json.load(open(os.path.join(first_evaluation, contract.PRECISION_REPORT_FILE)))
    export = json.load(open(os.path.join(production.pushed_dir, contract.EXPORT_REPORT_FILE)))
    # The numerics the first run's Trainer measured fastest on this machine (plain float32 on a CPU without
    # bfloat16 gains; mixed_float16 on a GPU with Tensor Cores), and what its FP32 baseline did about them.
    training = {node: json.load(open(os.path.join(_first_output(production.config, node, contract.MODEL_RUN),
                                                  contract.TRAINING_REPORT_FILE)))
                for node in (contract.TRAINER_NODE, contract.FP32_BASELINE_NODE)}
    candidate, baseline = training[contract.TRAINER_NODE], training[contract.FP32_BASELINE_NODE]
    plain_float32 = (candidate["precision"], candidate["xla"]) == ("float32", False)

    assert "Run report: taxi-accel" in text and "completed" in text
    assert f"Pushed to {production.pushed_dir}" in text
    assert f"Blessing: {precision['summary']}" in text
    assert f"{contract.TRAINER_NODE} {candidate['strategy']} x{candidate['replicas']} {candidate['precision']} " \
           f"{'on' if candidate['xla'] else 'off'} " in text
    overall = precision["metrics"]["overall"]
    if plain_float32:  # the candidate is its own FP32 baseline: not trained again, no baseline column
        assert baseline["skipped"] is True and "fp32_baseline" not in overall
        assert f"{contract.FP32_BASELINE_NODE} not trained: {baseline['reason']}" in text
        roles = ["candidate"]
    else:  # mixed precision or XLA: the baseline trained in float32 without XLA, and has its column
        assert "skipped" not in baseline and (baseline["precision"], baseline["xla"]) == ("float32", False)
        assert f"{contract.FP32_BASELINE_NODE} {baseline['strategy']} x{baseline['replicas']} float32 off " in text
        roles = ["candidate", "fp32_baseline"]
    assert set(overall) == set(roles)  # no production model in a first run
    # The per-slice table's first row: the example count, then each metric for each model evaluated.
    values = " ".join(f"{overall[role][metric]:.4f}" for metric in ("auc", "binary_accuracy", "binary_crossentropy")
                      for role in roles)
    assert f"overall {overall['candidate']['example_count']:,.0f} {values} payment_type=" in text
    parity = [check for check in precision["checks"] if check["gate"] == "fp32_parity"]
    assert parity and all((check["value"] is None) == plain_float32 for check in parity)
    for check in precision["checks"]:
        if check["value"] is None:  # the parity gate says why it does not apply
            assert check["gate"] == "fp32_parity" and check["note"].startswith("n/a: candidate trained in float32")
            assert f"{check['gate']} {check['model']} {check['metric']} - fp32_baseline - " \
                   f"{check['tolerance']} {check['examples']:,} pass {check['note']}" in text
        else:
            assert f"{check['gate']} {check['model']} {check['metric']} {check['value']:.4f}" in text
    for name, variant in export["variants"].items():  # the TFLite ladder: size, latency, AUC per variant
        assert f"{name} {variant['size_bytes']:,} {variant['median_latency_us']:.1f} {variant['auc']:.4f}" in text
    for section in ("Steps", "Data", "Anomalies and drift", "Training", "Evaluation and gates",
                    "Export: TFLite ladder", "Push"):
        assert section in text
    assert "Split train:" in text and "Split eval:" in text
    # Where the time went: the Trainers' fitting, as their reports measured it, and the run's bar
    fitting = candidate["fit_seconds"] + baseline.get("fit_seconds", 0.0)
    assert f"Where the time went fitting {fitting:.1f} s (" in text and "an accelerator could have been busy" in text
    # Statistics plots, string top values, the time bar, training curves, TFLite ladder: each a decoded image.
    assert images == ["ok"] * 5, images


def _first_output(config, node, key):
    """The output folder `node` wrote under `key` in the first run on `config`'s pipeline root."""
    folders = glob.glob(os.path.join(config.pipeline_root, node, key, "*"))
    return min(folders, key=lambda folder: int(os.path.basename(folder)))


STARTED = datetime.datetime(2026, 11, 22, tzinfo=datetime.timezone.utc)


@pytest.mark.e2e
def test_a_blocked_run_report_shows_the_anomalies(tmp_path):
    facts = RunFacts(pipeline="taxi-accel", run_id="r1", data_root="/data", started=STARTED, seconds=3.0,
                     steps=(Step("TFRecordIngest", "ran", 1.0), Step("ValidationGate", "failed", 0.1)),
                     anomalies={"train": [("fare", "ERROR", "Unexpected data type", "Expected FLOAT, got BYTES")]},
                     error="BlockingAnomaliesError: train: fare: Unexpected data type")
    page = tmp_path / "blocked.html"
    page.write_text(render_html(facts))

    text, images = _rendered_text(page, tmp_path)

    assert "FAILED: BlockingAnomaliesError" in text
    assert "train fare ERROR Unexpected data type Expected FLOAT, got BYTES" in text
    assert "The ValidationGate stopped the run before training" in text
    assert "No training in this run." in text and "Nothing pushed in this run" in text
    assert "an accelerator could have been busy 0% of the run" in text  # the time line, and no bar: no fitting
    assert images == []


CHECK = {"gate": "vs_production", "model": "candidate", "metric": "auc", "value": 0.9463, "reference": 0.9401,
         "reference_model": "production", "improvement": 0.0062, "interval": [-0.0011, 0.0135], "tolerance": 0.01,
         "examples": 5032, "passed": True, "note": ""}


def _blessed_run(**changes) -> RunFacts:
    """The facts of a finished run that blessed and pushed its candidate (numbers as a real run's)."""
    metrics = {"candidate": {"auc": 0.9463, "binary_accuracy": 0.8895, "example_count": 5032.0},
               "fp32_baseline": {"auc": 0.9468, "binary_accuracy": 0.8901, "example_count": 5032.0}}
    facts = RunFacts(
        pipeline="taxi-accel", run_id="r2", data_root="/data", started=STARTED, seconds=32.4,
        steps=(Step("TFRecordIngest", "ran", 2.0), Step("Trainer", "ran", 20.0), Step("AtomicPusher", "ran", 0.2)),
        spans="1", counts={"train": 20000, "eval": 5032},
        training={"Trainer": {"task": "binary", "strategy": "one_device", "replicas": 1, "precision": "mixed_bfloat16",
                              "xla": True,
                              "examples_per_second": 101493.2, "input_wait_fraction": 0.0, "fit_seconds": 12.0,
                              "phase_seconds": {"preparing": 2.0, "building": 3.0, "fitting": 12.0, "choosing": 0.5,
                                                "exporting": 1.5},
                              "final_metrics": {"val_auc": 0.94}, "history": {"loss": [0.4, 0.3]}},
                  "Fp32BaselineTrainer": {}},
        evaluation={"summary": "candidate blessed: every gate passed", "blessed": True, "chosen_model": "candidate",
                    "task": "binary", "primary_metric": "auc", "checks": [CHECK], "metrics": {"overall": metrics}},
        blessed=True, pushed_to="/serving/1795334123")
    return dataclasses.replace(_typed(facts), **{key: _typed_value(key, value) for key, value in changes.items()})


def _typed(facts: RunFacts) -> RunFacts:
    """RunFacts with its reports, written here as the JSON the steps write, read into their records."""
    return dataclasses.replace(facts, **{key: _typed_value(key, getattr(facts, key))
                                         for key in ("training", "evaluation", "export")})


def _typed_value(key: str, value):
    if key == "training":
        return {node: report if not isinstance(report, dict) else TrainingReport.from_json(report)
                for node, report in value.items()}
    readers = {"evaluation": EvaluationReport.from_json, "export": ExportReport.from_json}
    return readers[key](value) if key in readers and isinstance(value, dict) else value


def test_the_summary_the_report_and_the_status_table_render_the_same_facts():
    facts = _blessed_run()

    summary = RunSummary(facts).render()
    assert "  training: binary, one_device x1, mixed_bfloat16, XLA on, 101,493 examples/s, input wait 0.0%" in summary
    assert "  eval metrics: auc 0.9463, binary_accuracy 0.8895, example_count 5,032" in summary
    assert ("  evaluation: candidate blessed: every gate passed\n    vs_production: candidate auc 0.9463 vs production "
            "0.9401: better by 0.0062, interval [-0.0011, +0.0135], tolerance 0.01, 5,032 examples (pass)\n"
            "  blessed: yes\n") in summary
    assert summary.endswith("  pushed to: /serving/1795334123\n  where the time went: fitting 12.0 s (37%), building "
                            "and compiling 3.0 s (9%), evaluation 0.0 s (0%), export 1.5 s (5%), data 2.0 s (6%), the "
                            "rest 13.9 s (43%); an accelerator could have been busy 37% of the run (the fitting)\n"
                            "  total wall time: 0.0 s")
    not_compared = "the production model was not compared: it predicts the label 'tips', the candidate 'fare'"
    with_note = RunSummary(_blessed_run(evaluation=dataclasses.replace(facts.evaluation, notes=[not_compared]))).render()
    assert f"(pass)\n    note: {not_compared}\n  blessed: yes" in with_note
    page = render_html(facts)
    assert "<td>r2</td><td>2026-11-22 00:00:00 UTC</td><td>32.4 s</td><td>1</td>" in page
    assert "<td>Trainer</td><td>ran</td><td>20.0</td>" in page and "<td>eval</td><td>5,032</td>" in page
    assert "<code>/serving/1795334123</code>" in page and "class=failed" not in page
    header, line = render_runs([facts]).splitlines()
    assert header.split()[:3] == ["started", "(UTC)", "spans"]
    assert line.split() == ["2026-11-22", "00:00:00", "1", "complete", "3/0", "AUC", "0.9463", "0.9468", "-",
                            "candidate", "1795334123", "32.4", "s"]


def test_the_time_split_adds_up_to_the_run_and_counts_both_trainers_fitting():
    baseline = {**_blessed_run().training["Trainer"].to_json(), "fit_seconds": 10.0,
                "phase_seconds": {"building": 2.0, "exporting": 1.0}}
    facts = _blessed_run(seconds=60.0, steps=(Step("TFRecordIngest", "ran", 2.0), Step("StatisticsGen", "ran", 3.0),
                                              Step("Trainer", "ran", 20.0), Step("Fp32BaselineTrainer", "ran", 15.0),
                                              Step("PrecisionEvaluator", "ran", 8.0), Step("ModelExport", "ran", 6.0)),
                         training={"Trainer": _blessed_run().training["Trainer"].to_json(),
                                   "Fp32BaselineTrainer": baseline})
    split = dict(facts.time_split)
    assert split == pytest.approx({"fitting": 22.0, "building and compiling": 5.0, "evaluation": 8.0, "export": 8.5,
                                   "data": 5.0, "the rest": 11.5})
    assert sum(split.values()) == pytest.approx(60.0)
    assert facts.time_line().endswith("an accelerator could have been busy 37% of the run (the fitting)")
    page = render_html(facts)
    assert "Where the time went" in page and "fitting 22.0 s (37%)" in page and "data:image/png;base64," in page
    assert _blessed_run(steps=()).time_line() == "" and "Where the time went" not in render_html(_blessed_run(steps=()))


def test_the_status_outcome_names_the_steps_that_did_not_finish():
    def outcome(*states):
        return _blessed_run(steps=tuple(Step(f"Step{i}", state, 1.0) for i, state in enumerate(states))).outcome

    assert outcome("ran", "cached") == "complete" and outcome("cached", "cached") == "cached"
    assert outcome("ran", "failed", "killed") == "failed at Step1"
    assert outcome("ran", "killed", "running") == "killed at Step1"
    assert outcome("ran", "running", "new") == "running or killed at Step1, Step2"
    not_evaluated = _blessed_run(evaluation={}, blessed=None, pushed_to=None)
    assert (not_evaluated.blessed_model, not_evaluated.primary, not_evaluated.pushed_version) == ("", {}, "")
    assert "blessed: not evaluated" in RunSummary(not_evaluated).render()


def test_every_view_speaks_the_task_of_the_run():
    """A multi-class run shows accuracy, per-class recall and its confusion matrix; a regression run shows MAE
    and RMSE; neither shows an AUC column, in the summary, the page or the status table."""
    check = dict(CHECK, metric="sparse_categorical_accuracy", value=0.97, reference=0.96)
    multiclass = _blessed_run(
        evaluation={"summary": "candidate blessed: every gate passed", "blessed": True, "chosen_model": "candidate",
                    "task": "multiclass", "primary_metric": "sparse_categorical_accuracy", "checks": [check],
                    "classes": ["Adelie", "Chinstrap", "Gentoo"],
                    "confusion_matrix": {"candidate": [[50, 1, 0], [0, 20, 0], [0, 0, 40]]},
                    "metrics": {"overall": {"candidate": {"sparse_categorical_accuracy": 0.991, "example_count": 111.0,
                                                          "recall/class_1": 1.0}}}},
        training={"Trainer": {**_blessed_run().training["Trainer"].to_json(), "task": "multiclass",
                              "final_metrics": {"val_accuracy": 0.98}}})
    page, summary = render_html(multiclass), RunSummary(multiclass).render()
    assert "accuracy candidate" in page and "Confusion matrix" in page and "<td>Chinstrap</td><td>0</td><td>20</td>" in page
    assert "AUC" not in page and "auc" not in summary
    assert "accuracy 0.9800" in page  # the training's validation metric
    assert render_runs([multiclass]).splitlines()[1].split()[5:7] == ["accuracy", "0.9910"]

    check = dict(CHECK, metric="mean_absolute_error", value=1.52, reference=1.6)
    regression = _blessed_run(
        evaluation={"summary": "candidate blessed: every gate passed", "blessed": True, "chosen_model": "candidate",
                    "task": "regression", "primary_metric": "mean_absolute_error", "checks": [check],
                    "metrics": {"overall": {"candidate": {"mean_absolute_error": 1.52, "root_mean_squared_error": 3.4,
                                                          "example_count": 5032.0}}}},
        training={"Trainer": {**_blessed_run().training["Trainer"].to_json(), "task": "regression",
                              "final_metrics": {"val_mae": 1.5}}})
    page = render_html(regression)
    assert "MAE candidate" in page and "RMSE candidate" in page and "AUC" not in page
    assert render_runs([regression]).splitlines()[1].split()[5:7] == ["MAE", "1.5200"]


def test_the_training_figure_draws_the_validation_curve_and_marks_the_kept_interval():
    from components.core.records import TrainingReport
    from pipeline.runs.run_report import _training_figure
    report = TrainingReport(task_name="regression", precision="float32", best_interval=2, intervals_run=4,
                            history={"loss": [3.0, 2.0, 1.5, 1.2], "mae": [2.0, 1.5, 1.2, 1.0],
                                     "val_mae": [1.9, 1.4, 1.6, 1.7]})
    figure = _training_figure({"Trainer": report})
    mae = next(ax for ax in figure.axes if ax.get_title() == "mae")
    curves = {line.get_label(): list(line.get_ydata()) for line in mae.get_lines()}
    assert curves["Trainer validation"] == [1.9, 1.4, 1.6, 1.7]
    [kept] = [c for c in mae.collections if c.get_label() == "Trainer kept"]
    assert kept.get_offsets().tolist() == [[2.0, 1.4]]


def test_the_schedule_line_says_which_interval_was_kept_and_on_how_many_records():
    from components.core.records import TrainingReport
    validated = TrainingReport(task_name="binary", precision="float32", best_interval=7, intervals_run=12,
                               stopped_early=True, validation_examples=1024, plan={"intervals": 40})
    assert validated.schedule_line() == ("12 of 40 intervals (stopped early), best 7 on 1,024 held-out training "
                                         "records")
    whole_budget = TrainingReport(task_name="binary", precision="float32", best_interval=40, intervals_run=40,
                                  plan={"intervals": 40})
    assert whole_budget.schedule_line() == "40 of 40 intervals, the last kept (no validation slice)"


def test_a_run_without_a_validation_slice_labels_its_one_score_as_the_eval_splits():
    from components.core.records import TrainingReport
    from pipeline.runs.run_report import _training_figure, _training_section
    report = TrainingReport(task_name="binary", precision="float32", best_interval=3, intervals_run=3,
                            history={"loss": [0.7, 0.5, 0.4], "auc": [0.7, 0.8, 0.85], "val_auc": [0.83]},
                            final_metrics={"val_auc": 0.83}, plan={"intervals": 3})
    assert "auc 0.8300 (eval split, after the last epoch)" in _training_section({"Trainer": report})
    auc = next(ax for ax in _training_figure({"Trainer": report}).axes if ax.get_title() == "auc")
    assert [c.get_label() for c in auc.collections] == ["Trainer eval split"]


@pytest.mark.slow
def test_a_wide_tables_histograms_draw_the_flagged_features_first_and_the_caption_says_how_many_of_all():
    from tensorflow_metadata.proto.v0 import statistics_pb2
    from pipeline.runs.run_report import FIGURE_FEATURES, _features_to_draw, _histogram_figure
    dataset = statistics_pb2.DatasetFeatureStatistics(num_examples=10)
    names = [f"f{i:02d}" for i in range(FIGURE_FEATURES + 6)]
    for name in names:
        feature = dataset.features.add()
        feature.path.step.append(name)
        histogram = feature.num_stats.histograms.add(type=statistics_pb2.Histogram.STANDARD)
        histogram.buckets.add(low_value=0.0, high_value=1.0, sample_count=10)
    drift = {"previous_span": 1, "splits": {"eval": {
        "f07": [{"measure": "jensen_shannon", "value": 0.4, "threshold": 0.1, "drifted": True}],
        "f03": [{"measure": "jensen_shannon", "value": 0.01, "threshold": 0.1, "drifted": False}]}}}
    facts = _blessed_run(statistics={"train": dataset}, anomalies={"train": [("f29", "ERROR", "out of range", "...")]},
                         validation={"drift": drift})
    drawn = _features_to_draw(names, facts)
    assert drawn == ["f07", "f29"] + [name for name in names if name not in ("f07", "f29")][:FIGURE_FEATURES - 2]
    titles = [ax.get_title() for ax in _histogram_figure(facts.statistics, drawn).axes if ax.get_title()]
    assert titles == drawn
    page = render_html(facts)
    assert f"{FIGURE_FEATURES} of {len(names)} features, those with anomalies or drift first" in page
    assert all(f"<td>{name}</td>" in page for name in names)  # the statistics table still lists every feature


def test_dollar_signs_and_underscores_in_values_and_names_are_drawn_as_written():
    """matplotlib reads text between two '$' as math: a category `$0_$10` or a column `cost ($)` is plain text here."""
    from tensorflow_metadata.proto.v0 import statistics_pb2
    from pipeline.runs.run_report import _histogram_figure, _top_values_figure
    dataset = statistics_pb2.DatasetFeatureStatistics(num_examples=10)
    band = dataset.features.add()
    band.path.step.append("price_band ($)")
    band.string_stats.common_stats.num_non_missing = 10
    for value, frequency in (("$0_$10", 6), ("$10_$100", 3), ("over $100", 1)):
        band.string_stats.top_values.add(value=value, frequency=frequency)
    cost = dataset.features.add()
    cost.path.step.append("cost $_a$")
    histogram = cost.num_stats.histograms.add(type=statistics_pb2.Histogram.STANDARD)
    histogram.buckets.add(low_value=0.0, high_value=1.0, sample_count=10)
    facts = _blessed_run(statistics={"train": dataset})
    page = render_html(facts)  # drew every figure
    assert page.count("<img") >= 2 and "$0_$10" in page
    figure = _top_values_figure(facts.statistics, ["price_band ($)"])
    figure.canvas.draw()
    labels = [label.get_text() for label in figure.axes[0].get_yticklabels()]
    assert labels[:3] == ["$0_$10", "$10_$100", "over $100"]
    assert all(not label.get_parse_math() for label in figure.axes[0].get_yticklabels())
    assert _histogram_figure(facts.statistics, ["cost $_a$"]).axes[0].get_title() == "cost $_a$"


def test_many_string_features_draw_four_to_a_row_and_no_plot_or_label_overlaps_another():
    """The top values as a grid as wide as the histograms' (not one plot per feature side by side), laid out in
    fixed margins: every plot, with its value labels and title, inside the figure and clear of the others."""
    from tensorflow_metadata.proto.v0 import statistics_pb2
    from pipeline.runs.run_report import _histogram_figure, _top_values_figure
    strings, numbers = (statistics_pb2.DatasetFeatureStatistics(num_examples=10) for _ in range(2))
    names = [f"column_{i}" for i in range(6)]
    for name in names:
        feature = strings.features.add()
        feature.path.step.append(name)
        feature.string_stats.common_stats.num_non_missing = 10
        for value, frequency in (("x" * 24, 6), ("second_value", 4)):
            feature.string_stats.top_values.add(value=value, frequency=frequency)
        feature = numbers.features.add()
        feature.path.step.append(name)
        histogram = feature.num_stats.histograms.add(type=statistics_pb2.Histogram.STANDARD)
        histogram.buckets.add(low_value=0.0, high_value=150000.0, sample_count=10)
    figures = (_top_values_figure({"train": strings, "eval": strings}, names),
               _histogram_figure({"train": numbers, "eval": numbers}, names))
    assert [label.get_text() for label in figures[0].axes[5].get_yticklabels()] == ["x" * 24, "second_value"]
    for figure in figures:
        assert tuple(figure.get_size_inches())[0] in (16.0, 20.0)  # four columns, whatever the features
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        drawn = [ax for ax in figure.axes if ax.get_title()]
        assert [ax.get_title().split(" (")[0] for ax in drawn] == names
        boxes = [ax.get_tightbbox(renderer) for ax in drawn]
        whole = figure.bbox
        assert all(box.x0 >= whole.x0 and box.x1 <= whole.x1 and box.y0 >= whole.y0 and box.y1 <= whole.y1
                   for box in boxes)
        assert not any(a.overlaps(b) for i, a in enumerate(boxes) for b in boxes[i + 1:])
