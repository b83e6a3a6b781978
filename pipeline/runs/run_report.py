"""The HTML run report: one self-contained page per local run, written into the output directory.

`write_run_report(config, error, known_runs)` renders this run's RunFacts (pipeline/runs/run_facts.py: the run
that is not among `known_runs`, the ids MLMD held before it started; or the facts the caller already read)
and writes `<output_dir>/run_report.html` (the latest run) plus a copy in `<output_dir>/reports/<run id>.html`.
A run that failed before it started (nothing in MLMD) gets a page of its own saying so, under an id of its
own: another run's page is never rewritten. The page holds the steps, the data statistics per split (tables
of every feature, matplotlib plots of at most FIGURE_FEATURES of them), the anomalies and drift, the training
curves, the candidate vs FP32 baseline (and production) metrics per slice, the gates and the blessing, the
TFLite ladder and where the model was pushed. Plots are PNG images inside the page, so the file opens
anywhere with no network.
"""
from __future__ import annotations

import base64
import dataclasses
import html
import io
import os
import shutil

from components.core.records import EvaluationReport, ExportReport, TrainingReport
from pipeline.config import PipelineConfig
from pipeline.runs.run_facts import MODEL_ROLES, RunFacts, not_started_facts, read_run_facts

REPORT_FILE = "run_report.html"
REPORTS_DIR = "reports"
# The data section's figures draw at most this many features each (numeric histograms, string top values): a
# figure of a thousand plots takes about a minute to draw and is too large to read; the tables list every feature.
FIGURE_FEATURES = 24


def write_run_report(config: PipelineConfig, error: str | None = None, known_runs: frozenset[str] | None = None,
                     facts: RunFacts | None = None) -> str | None:
    """Input: the config, the run's error message (None when it succeeded), and either the run's facts as
    already read (the run summary's) or the run ids MLMD held before this run started (None: report the
    newest run). Output: the page's path, or None when MLMD records no run to report and no error says why."""
    facts = facts or read_run_facts(config, known_runs)
    if facts is None and error is None:
        return None
    facts = dataclasses.replace(facts, error=error) if facts else not_started_facts(config, error)
    page = render_html(facts)
    os.makedirs(os.path.join(config.output_dir, REPORTS_DIR), exist_ok=True)
    path = os.path.join(config.output_dir, REPORT_FILE)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(page)
    shutil.copyfile(path, os.path.join(config.output_dir, REPORTS_DIR, f"{_safe(facts.run_id)}.html"))
    return path


# ----------------------------------------------------------------------------------------------- rendering

def render_html(facts: RunFacts) -> str:
    """Input: a run's facts. Output: the whole page."""
    if facts.not_started:
        return _page(facts, [
            f"<h1>Run report: {_e(facts.pipeline)}</h1>",
            _table(["run", "attempted", "data", "outcome"],
                   [[facts.run_id, _started(facts), facts.data_root, f"NEVER STARTED: {facts.error}"]], css="summary"),
            "<p>This run never started: it failed before the pipeline recorded a run in MLMD, so no step "
            "ran, nothing was read from the cache and nothing was pushed. Other runs' reports are unchanged.</p>",
        ])
    outcome = f"FAILED: {facts.error}" if facts.error else "completed"
    sections = [
        f"<h1>Run report: {_e(facts.pipeline)}</h1>",
        _table(["run", "started", "duration", "spans", "data", "outcome", "pushed to"],
               [[facts.run_id, _started(facts), f"{facts.seconds:.1f} s", facts.spans or "-",
                 facts.data_root, outcome, facts.pushed_to or "nothing pushed"]], css="summary"),
        "<h2>Steps</h2>",
        _table(["step", "outcome", "seconds"], [[step.name, step.outcome, f"{step.seconds:.1f}"] for step in facts.steps]),
        _time_section(facts),
        _data_section(facts),
        _validation_section(facts),
        _training_section(facts.training),
        _evaluation_section(facts.evaluation),
        _export_section(facts.export, facts.pushed_to),
    ]
    return _page(facts, sections)


def _time_section(facts: RunFacts) -> str:
    """Where the run's seconds went (RunFacts.time_split): a line, and for a run that trained (fitting seconds)
    the parts as one bar."""
    line = facts.time_line()
    if not line:
        return ""
    split = facts.time_split
    bar = [_image(_time_figure(split), "the run's seconds by part, fitting first")] if split[0][1] > 0 else []
    return "\n".join(["<h3>Where the time went</h3>", f"<p>{_e(line)}</p>", *bar])


def _time_figure(split: list[tuple[str, float]]):
    """One horizontal bar of the run's seconds, a segment per part, each labelled with its share."""
    plt = _pyplot()
    total = sum(seconds for _, seconds in split) or 1.0
    figure, ax = plt.subplots(figsize=(10, 1.6))
    left = 0.0
    for (part, seconds), color in zip(split, TIME_COLORS):
        ax.barh([0], [seconds], left=left, color=color, label=f"{part} {seconds:.1f} s")
        if seconds / total >= 0.06:
            ax.text(left + seconds / 2, 0, f"{seconds / total:.0%}", ha="center", va="center", fontsize=8)
        left += seconds
    ax.set_yticks([])
    ax.set_xlim(0, total)
    ax.set_xlabel("seconds", fontsize=8)
    ax.tick_params(labelsize=8)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.6), ncol=len(split), fontsize=7, frameon=False)
    figure.tight_layout()
    return figure


TIME_COLORS = ("#228833", "#66ccee", "#ccbb44", "#ee6677", "#4477aa", "#bbbbbb")  # fitting first, the rest grey


def _started(facts: RunFacts) -> str:
    return facts.started.strftime("%Y-%m-%d %H:%M:%S UTC")


def _page(facts: RunFacts, sections: list[str]) -> str:
    """The whole HTML page around `sections` (failed runs get a red heading)."""
    return ("<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<title>{_e(facts.pipeline)} run {_e(facts.run_id)}</title><style>{_CSS}</style></head>"
            f"<body{' class=failed' if facts.error else ''}>\n" + "\n".join(sections) + "\n</body></html>\n")


def _data_section(facts: RunFacts) -> str:
    parts = ["<h2>Data</h2>"]
    if facts.counts:
        parts.append(_table(["split", "examples"], [[split, f"{count:,}"] for split, count in sorted(facts.counts.items())]))
    left_out = [[span, f"{left['rows']:,}", left["why"]] for span, note in facts.span_notes.items()
                for left in note.get("left_out", [])]
    if left_out:
        parts.append("<p>Rows left out of the spans read when they were prepared (their CSV still holds them):</p>")
        parts.append(_table(["span", "rows left out", "why"], left_out))
    statistics = facts.statistics or {}
    if not statistics:
        return "\n".join(parts + ["<p>No statistics: the run stopped before StatisticsGen.</p>"])
    for split, dataset in statistics.items():
        rows = []
        for name, feature in sorted(_features_by_name(dataset).items()):
            if feature.HasField("num_stats"):
                stats = feature.num_stats
                common = stats.common_stats
                rows.append([name, "numeric", f"{common.num_non_missing:,}", f"{common.num_missing:,}",
                             *(_stat(value) for value in (stats.mean, stats.std_dev, stats.min, stats.median, stats.max)),
                             ""])
            elif feature.HasField("string_stats"):
                stats = feature.string_stats
                common = stats.common_stats
                top = ", ".join(f"{value.value} ({value.frequency:,.0f})" for value in stats.top_values[:3])
                rows.append([name, f"string, {stats.unique} unique", f"{common.num_non_missing:,}",
                             f"{common.num_missing:,}", "", "", "", "", "", top])
        parts.append(f"<h3>Split {_e(split)}: {dataset.num_examples:,} examples</h3>")
        parts.append(_table(["feature", "type", "present", "missing", "mean", "std", "min", "median", "max",
                             "top values"], rows))
    numeric, strings = _names_with(statistics, "num_stats"), _names_with(statistics, "string_stats")
    drawn_numeric, drawn_strings = _features_to_draw(numeric, facts), _features_to_draw(strings, facts)
    parts.append(_image(_histogram_figure(statistics, drawn_numeric),
                        "numeric feature histograms per split (TFDV statistics)" + _drawn_note(drawn_numeric, numeric)))
    parts.append(_image(_top_values_figure(statistics, drawn_strings),
                        "most frequent values of string features per split" + _drawn_note(drawn_strings, strings)))
    return "\n".join(parts)


def _features_to_draw(names: list[str], facts: RunFacts) -> list[str]:
    """Input: feature names, the run's facts. Output: at most FIGURE_FEATURES of them, those with an anomaly or
    that drifted first, then the rest, each group by name."""
    flagged = {row[0] for rows in (facts.anomalies or {}).values() for row in rows}
    drift = facts.validation.get("drift") or {}
    flagged |= {name for features in drift.get("splits", {}).values() for name, entries in features.items()
                if any(measured.get("drifted") for measured in entries)}
    return sorted(names, key=lambda name: (name not in flagged, name))[:FIGURE_FEATURES]


def _drawn_note(drawn: list[str], names: list[str]) -> str:
    """The caption's note when a figure draws only some of the features."""
    if len(drawn) == len(names):
        return ""
    return (f": {len(drawn)} of {len(names):,} features, those with anomalies or drift first, then by name "
            "(the table above lists every feature)")


def _validation_section(facts: RunFacts) -> str:
    parts = ["<h2>Anomalies and drift</h2>"]
    anomalies = facts.anomalies
    if anomalies is None:
        parts.append("<p>Not validated: the run stopped before ExampleValidator.</p>")
    else:
        rows = [[split, *row] for split, split_rows in anomalies.items() for row in split_rows]
        parts.append(_table(["split", "feature", "severity", "anomaly", "description"], rows, css="anomalies")
                     if rows else "<p class=ok>No schema anomalies in any split.</p>")
    if facts.new_columns:
        parts.append(f"<p>New columns, not in the schema, left out of the model (not blocking): "
                     f"{_e(', '.join(facts.new_columns))}. Run init again, or add them to the schema, to use them.</p>")
    drift = facts.validation.get("drift")
    if drift:
        parts.append(f"<h3>Drift against span {drift.get('previous_span')}</h3>")
        parts.append(_table(["split", "feature", "measure", "value", "threshold", "drifted"],
                            [[split, name, measured["measure"], _n(measured["value"]), _n(measured["threshold"]),
                              "DRIFTED" if measured["drifted"] else "no"]
                             for split, features in drift["splits"].items() for name, entries in features.items()
                             for measured in entries]))
    elif facts.validation:
        parts.append("<p>No drift check: there is no earlier accepted span to compare with.</p>")
    if "ValidationGate" in facts.steps_with("failed"):
        parts.append(f"<p class=bad>The ValidationGate stopped the run before training:</p><pre>{_e(facts.error or '')}</pre>")
    return "\n".join(parts)


def _training_section(training: dict[str, TrainingReport | None]) -> str:
    parts = ["<h2>Training</h2>"]
    reports = {node: report for node, report in training.items() if report}
    if not reports:
        return "\n".join(parts + ["<p>No training in this run.</p>"])
    rows = []
    for node, report in reports.items():
        if report.skipped:
            rows.append([node, "not trained: " + report.skip_reason, *[""] * 8])
            continue
        rows.append([node, f"{report.strategy} x{report.replicas}", report.precision,
                     "on" if report.xla else "off", f"{report.examples_per_second:,.0f}",
                     report.input_line(), str(report.resumed_from_step),
                     "yes" if report.warm_start.get("applied") else "no", report.schedule_line(),
                     f"{report.task.validation_metric} {_n(report.validation_value)}"
                     + (" (out of fold)" if report.validation_examples and report.folds > 1 else
                        "" if report.validation_examples else " (eval split, after the last epoch)")])
    parts.append(_table(["trainer", "strategy", "precision", "XLA", "examples/s", "input", "resumed from step",
                         "warm start", "training ran", "validation"], rows))
    parts += [f"<p>{_e(node)}: {_e(report.model_description)}</p>" for node, report in reports.items()
              if not report.skipped and report.model_description]
    parts += [f"<p>{_e(node)} search: {_e(report.search_line())}</p>" for node, report in reports.items()
              if not report.skipped and report.search_line()]
    trained = {node: report for node, report in reports.items() if not report.skipped}
    parts.append(_image(_training_figure(trained), "training curves per checkpoint interval"))
    return "\n".join(parts)


def _evaluation_section(evaluation: EvaluationReport | None) -> str:
    parts = ["<h2>Evaluation and gates</h2>"]
    if not evaluation:
        return "\n".join(parts + ["<p>Not evaluated in this run.</p>"])
    task = evaluation.task
    roles = [role for role in MODEL_ROLES if any(role in models for models in evaluation.metrics.values())]
    metrics = [metric for metric in task.metrics
               if any(metric.name in values for models in evaluation.metrics.values() for values in models.values())]
    rows = []
    for slice_name, models in evaluation.metrics.items():
        count = next((m.get("example_count") for m in models.values() if m.get("example_count") is not None), None)
        row = [slice_name, "-" if count is None else f"{count:,.0f}"]
        for metric in metrics:
            row += [_n((models.get(role) or {}).get(metric.name)) for role in roles]
        rows.append(row)
    header = ["slice", "examples"] + [f"{metric.label} {role}" for metric in metrics for role in roles]
    parts.append(f"<p>Task: {_e(task.name)}; the gates decide on {_e(task.primary.label)} "
                 f"({'higher' if task.primary.higher_is_better else 'lower'} is better). "
                 f"Trivial predictor: {_e(evaluation.trivial_predictor)}.</p>")
    parts.append(_table(header, rows, css="slices"))
    if evaluation.confusion_matrix:
        parts.append(_confusion_matrices(evaluation.confusion_matrix, evaluation.classes))
    parts.append("<h3>Gates</h3>")
    parts.append(_table(["gate", "model", "metric", "value", "reference", "improvement", "interval", "tolerance",
                         "examples", "result", "note"],
                        [[c.gate, c.model, c.metric, _n(c.value),
                          f"{c.reference_model} {_n(c.reference)}" if c.reference is not None else c.reference_model,
                          _n(c.improvement), "" if c.interval is None else
                          f"[{c.interval[0]:+.4f}, {c.interval[1]:+.4f}]", f"{c.tolerance:.4g}",
                          f"{c.examples:,}", "pass" if c.passed else "FAIL", c.note]
                         for c in evaluation.checks]))
    for note in evaluation.notes:
        parts.append(f"<p>{_e(note)}</p>")
    verdict = "ok" if evaluation.blessed else "bad"
    parts.append(f"<p class={verdict} id=blessing>Blessing: {_e(evaluation.summary)}</p>")
    return "\n".join(parts)


def _confusion_matrices(matrices: dict, classes: list[str]) -> str:
    """One table per model: a row per actual class, a column per predicted class."""
    parts = ["<h3>Confusion matrix (eval split; rows: actual class, columns: predicted)</h3>"]
    for model, rows in matrices.items():
        names = classes or [str(i) for i in range(len(rows))]
        parts.append(f"<p>{_e(model)}</p>")
        parts.append(_table(["actual \\ predicted", *names],
                            [[name, *(f"{count:,}" for count in row)] for name, row in zip(names, rows)]))
    return "\n".join(parts)


def _export_section(export: ExportReport | None, pushed_to: str | None) -> str:
    parts = ["<h2>Export: TFLite ladder</h2>"]
    if not export:
        parts.append("<p>Nothing exported in this run.</p>")
    elif not export.exported:
        parts.append(f"<p>Not exported: {_e(export.reason)}.</p>")
    else:
        reference = export.savedmodel
        primary = export.task.primary
        rows = [["SavedModel", "-", "-", _n(reference[primary.name]), "-", "-", "reference", ""]]
        for name, variant in export.variants.items():
            rows.append([name, f"{variant['size_bytes']:,}", f"{variant['median_latency_us']:.1f}",
                         _n(variant[primary.name]), _n(variant["drop"]), _n(variant["max_abs_diff"]),
                         "accepted" if variant["accepted"] else "rejected: " + "; ".join(variant["reasons"]),
                         "recommended" if variant.get("recommended") else ""])
        parts.append(_table(["variant", "size (bytes)", "latency (µs/example)", primary.label, f"{primary.label} drop",
                             "max |diff|", "verdict", ""], rows, css="ladder"))
        parts.append(_image(_ladder_figure(export.variants), "TFLite variants: size and latency"))
        parts.append(f"<p id=tflite-inputs>TFLite inputs: {_e(export.inputs or 'model-ready tensors')}; "
                     f"scored in {_e(export.runtime or 'the TFLite interpreter')} against "
                     f"{_e(export.compared_with or 'the SavedModel')}.</p>")
    parts.append("<h2>Push</h2>")
    parts.append(f"<p id=pushed class=ok>Pushed to <code>{_e(pushed_to)}</code></p>" if pushed_to
                 else "<p id=pushed>Nothing pushed in this run; the serving directory was left as it was.</p>")
    return "\n".join(parts)


# -------------------------------------------------------------------------------------------------- plots

def _feature_name(feature) -> str:
    return ".".join(feature.path.step) or feature.name


def _features_by_name(dataset) -> dict:
    """Feature name -> its FeatureNameStatistics in one split's DatasetFeatureStatistics."""
    return {_feature_name(feature): feature for feature in dataset.features}


def _names_with(statistics: dict, kind: str) -> list[str]:
    """Sorted names of the features with `kind` statistics ("num_stats" or "string_stats") in any split."""
    return sorted({_feature_name(f) for dataset in statistics.values() for f in dataset.features if f.HasField(kind)})


def _histogram_figure(statistics: dict, numeric: list[str]):
    """Input: statistics per split, the numeric features to draw. Output: a figure of their histograms, or None."""
    from tensorflow_metadata.proto.v0 import statistics_pb2
    if not numeric:
        return None
    figure, axes = _grid(len(numeric), 4, (4, 2.6))
    by_split = {split: _features_by_name(dataset) for split, dataset in statistics.items()}
    for ax, name in zip(axes, numeric):
        for split, features in by_split.items():
            feature = features.get(name)
            histogram = feature and next((h for h in feature.num_stats.histograms
                                          if h.type == statistics_pb2.Histogram.STANDARD), None)
            if histogram and histogram.buckets:
                total = sum(b.sample_count for b in histogram.buckets) or 1
                ax.stairs([b.sample_count / total for b in histogram.buckets],
                          [histogram.buckets[0].low_value] + [b.high_value for b in histogram.buckets], label=split)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=7)
    _fixed_layout(figure, left=0.5, right=0.15, top=0.3, bottom=0.3, between_x=0.5, between_y=0.55)
    return figure


def _top_values_figure(statistics: dict, strings: list[str]):
    """Input: statistics per split, the string features to draw. Output: a figure of their top values, or None."""
    if not strings:
        return None
    figure, axes = _grid(len(strings), min(4, len(strings)), (5, 3))
    by_split = {split: _features_by_name(dataset) for split, dataset in statistics.items()}
    for ax, name in zip(axes, strings):
        width = 0.8 / len(statistics)
        for index, (split, features) in enumerate(by_split.items()):
            feature = features.get(name)
            if feature is None:
                continue
            top = list(feature.string_stats.top_values[:6])
            total = feature.string_stats.common_stats.num_non_missing or 1
            ax.barh([i + index * width for i in range(len(top))], [v.frequency / total for v in top], height=width,
                    label=split)
            if index == 0:
                ax.set_yticks(range(len(top)), [v.value[:24] for v in top], fontsize=7)
        ax.set_title(f"{name} (share of examples)", fontsize=9)
        ax.invert_yaxis()
    axes[0].legend(fontsize=7)
    # room on the left of each plot for its longest value label (at most 24 characters of 7-point text)
    longest = max((len(label.get_text()) for ax in axes for label in ax.get_yticklabels()), default=0)
    room = 0.2 + 0.09 * longest
    _fixed_layout(figure, left=room, right=0.15, top=0.3, bottom=0.3, between_x=room + 0.1, between_y=0.55)
    return figure


def _grid(count: int, columns: int, plot_size: tuple[float, float]):
    """Input: how many plots, how many to a row, each one's (width, height) in inches. Output: (the figure, its
    first `count` axes in reading order); the cells after them are left blank."""
    rows = (count + columns - 1) // columns
    figure, axes = _pyplot().subplots(rows, columns, figsize=(plot_size[0] * columns, plot_size[1] * rows),
                                      squeeze=False)
    for ax in list(axes.flat)[count:]:
        ax.axis("off")
    return figure, list(axes.flat)[:count]


def _fixed_layout(figure, left: float, right: float, top: float, bottom: float, between_x: float,
                  between_y: float) -> None:
    """Places a figure's grid of plots (_grid's) with the given margins and gaps, in inches, without measuring its
    texts as tight_layout does (seconds for a grid of small plots, every tick label measured)."""
    grid = figure.axes[0].get_gridspec()
    rows, columns = grid.nrows, grid.ncols
    width, height = figure.get_size_inches()
    plot_width = (width - left - right - between_x * (columns - 1)) / columns
    plot_height = (height - top - bottom - between_y * (rows - 1)) / rows
    figure.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height,
                           wspace=between_x / plot_width, hspace=between_y / plot_height)


def _training_figure(reports: dict[str, TrainingReport]):
    plt = _pyplot()
    names = ["loss"] + [report.task.validation_metric for report in reports.values()]
    metrics = [m for m in dict.fromkeys(names) if any(m in r.history for r in reports.values())]
    figure, axes = plt.subplots(1, len(metrics), figsize=(5 * len(metrics), 3.2), squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        for node, report in reports.items():
            values = report.history.get(metric, [])
            label = f"{node} ({report.precision})"
            ax.plot(range(1, len(values) + 1), values, marker="o", markersize=3, label=label)
            validation = report.history.get(f"val_{metric}", [])
            if len(validation) > 1:  # validated every interval: the curve, and the interval whose weights were kept
                ax.plot(range(1, len(validation) + 1), validation, linestyle="--", label=f"{node} validation")
                if report.best_interval:
                    ax.scatter([report.best_interval], [validation[report.best_interval - 1]], marker="*", s=80,
                               label=f"{node} kept")
            elif validation:  # no validation slice: the eval split, scored once after the last interval
                scored_on = "validation" if report.validation_examples else "eval split"
                ax.scatter([len(values)], validation[-1:], marker="*", s=80, label=f"{node} {scored_on}")
        ax.set_title(metric, fontsize=9)
        ax.set_xlabel("checkpoint interval", fontsize=8)
        ax.legend(fontsize=7)
    figure.tight_layout()
    return figure


def _ladder_figure(variants: dict):
    plt = _pyplot()
    names = list(variants)
    figure, (size_ax, latency_ax) = plt.subplots(1, 2, figsize=(10, 3))
    size_ax.bar(names, [variants[n]["size_bytes"] / 1024 for n in names], color="#4477aa")
    size_ax.set_title("size (KiB)", fontsize=9)
    latency_ax.bar(names, [variants[n]["median_latency_us"] for n in names], color="#cc6677")
    latency_ax.set_title("median latency (µs/example)", fontsize=9)
    for ax in (size_ax, latency_ax):
        ax.tick_params(labelsize=8)
    figure.tight_layout()
    return figure


def _pyplot():
    """pyplot drawing off screen (Agg), every text as written: a column's name or value between two '$' (a
    category `$0_$10`) is no math, which would not parse or would show something else."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    matplotlib.rcParams["text.usetex"] = False
    import matplotlib.pyplot as plt
    return plt


def _image(figure, caption: str) -> str:
    if figure is None:
        return ""
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=80)
    _pyplot().close(figure)
    encoded = base64.b64encode(buffer.getvalue()).decode()
    return (f"<figure><img alt='{_e(caption)}' src='data:image/png;base64,{encoded}'>"
            f"<figcaption>{_e(caption)}</figcaption></figure>")


# ---------------------------------------------------------------------------------------------- html bits

def _table(header: list[str], rows: list[list], css: str = "") -> str:
    head = "".join(f"<th>{_e(cell)}</th>" for cell in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(cell)}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table class='{css}'><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _e(value) -> str:
    return html.escape("" if value is None else str(value))


def _n(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _stat(value: float) -> str:
    """A statistic, readable at any scale: 11.755, 0.037612, 1,408,522,398."""
    return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:.5g}"


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; }
body.failed h1 { color: #a00; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f0f0f0; }
td:last-child { min-width: 14em; }
.ok { color: #060; } .bad { color: #a00; font-weight: bold; }
figure { margin: 0.5em 0 1.5em; } img { max-width: 100%; }
figcaption { font-size: 0.85em; color: #555; }
pre { background: #f7f7f7; padding: 0.6em; white-space: pre-wrap; }
"""
