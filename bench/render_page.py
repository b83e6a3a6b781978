"""Writes docs/benchmarks.md and its pictures (docs/images/benchmarks-*.png) from the records in bench/results/
(bench/records.py) and the prose of bench/page_template.md. `make bench-page` runs it; run it after a bench script
appended records, and commit the records, the page and the pictures together.

    python bench/render_page.py [--results DIR] [--page FILE] [--images DIR]

Each `<!-- bench: NAME -->` line of the template becomes the tables (and pictures) of Page.NAME. For each
measurement a table shows the newest session that holds the table's figures: the newest such record, pooled with
the records of the same day and commit (runs of one code made in several calls; a seed run twice counts once, the
later run), with its date and command below the table. The output is deterministic (no clock, sorted inputs,
fixed plot settings); each picture carries a digest of the figures it draws as its PNG comment, which
tests/bench/test_benchmarks_page.py compares with what the records give.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import re
import statistics
import sys
from typing import Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import quality_change  # noqa: E402
import quality_tables  # noqa: E402
import records  # noqa: E402
import tabular_quality as quality  # noqa: E402

PAGE = os.path.join(records.PROJECT_ROOT, "docs", "benchmarks.md")
IMAGES = os.path.join(records.PROJECT_ROOT, "docs", "images")
PICTURE_PREFIX = "benchmarks-"
MISSING = "–"


# ------------------------------------------------------------------------------------------------ sessions

def lookup(figures: dict, path: str):
    """A dotted path's value in nested dicts ("tfx_eval_metrics.binary_accuracy"), or None."""
    value = figures
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@dataclasses.dataclass
class Session:
    """A measurement's newest figures: its records (oldest first) pooled into one `figures` dict."""
    records: list[dict]

    @property
    def newest(self) -> dict:
        return self.records[-1]

    @property
    def measurement(self) -> str:
        return self.newest["measurement"]

    @property
    def day(self) -> str:
        return self.newest["date"][:10]

    @property
    def figures(self) -> dict:
        """The records' figures, a later record's over an earlier one's; "runs" concatenated (a seed's later run
        replaces its earlier one)."""
        pooled, runs = {}, []
        for record in self.records:
            pooled.update({key: value for key, value in record["figures"].items() if key != "runs"})
            for run in record["figures"].get("runs", []):
                runs = [kept for kept in runs if "seed" not in run or kept.get("seed") != run["seed"]] + [run]
        pooled["runs"] = runs
        return pooled

    def get(self, path: str):
        """A figure of the whole measurement (not per run)."""
        return lookup(self.figures, path)

    def values(self, path: str) -> list:
        """The runs' values of a figure, in run order (the runs without it left out)."""
        return [lookup(run, path) for run in self.figures["runs"] if _number(lookup(run, path))]

    def stats(self, path: str) -> dict | None:
        """{"n", "mean", "median", "min", "max"} of a figure over the runs, else the record's "summary" of it
        (as far as it goes), else None."""
        values = self.values(path)
        if values:
            return {"n": len(values), "mean": statistics.mean(values), "median": statistics.median(values),
                    "min": min(values), "max": max(values)}
        summary = self.get("summary")
        return summary[path] if isinstance(summary, dict) and isinstance(summary.get(path), dict) else None


def holds(*paths: str) -> Callable[[dict], bool]:
    """A record filter: the record has one of these figures (in a run, its summary or the figures)."""
    def has(record: dict) -> bool:
        figures = record["figures"]
        places = [figures] + list(figures.get("runs") or [])
        return any(lookup(place, path) is not None or path in (figures.get("summary") or {})
                   for place in places for path in paths)
    return has


def newest_session(found: list[dict], wanted: Callable[[dict], bool] | None = None) -> Session | None:
    """The newest session among one measurement's records (in appended order) that `wanted` keeps."""
    kept = [(record["date"], order, record) for order, record in enumerate(found) if wanted is None or wanted(record)]
    if not kept:
        return None
    kept.sort(key=lambda item: item[:2])
    newest = kept[-1][2]
    same = [record for _, _, record in kept if record is newest or (
        newest.get("commit") and record.get("commit") == newest["commit"] and
        record.get("dirty") == newest.get("dirty") and record["date"][:10] == newest["date"][:10])]
    return Session(same)


def sessions(found: list[dict], wanted: Callable[[dict], bool] | None = None) -> list[Session]:
    """The newest session of each measurement among `found`, sorted by measurement."""
    by_measurement = {}
    for record in found:
        by_measurement.setdefault(record["measurement"], []).append(record)
    chosen = (newest_session(group, wanted) for _, group in sorted(by_measurement.items()))
    return [session for session in chosen if session is not None]


# ------------------------------------------------------------------------------------------------ formatting

def number(value, spec: str = ".1f", unit: str = "") -> str:
    """A figure as text; MISSING for None."""
    return MISSING if value is None else f"{value:{spec}}{unit}"


def per_run(session: Session, path: str, spec: str = ".1f", unit: str = "") -> str:
    """Every run's value ("25.5, 25.8 s", "0.29x, 0.32x"; median (min–max) over n beyond five runs), else the
    summary's."""
    values = session.values(path)
    if 0 < len(values) <= 5:
        each = "" if unit.startswith(" ") else unit
        return ", ".join(f"{value:{spec}}{each}" for value in values) + (unit if not each else "")
    return spread(session.stats(path), spec, unit, middle="median")


def spread(stats: dict | None, spec: str = ".4f", unit: str = "", middle: str = "mean") -> str:
    """"mean (min–max)" (or the median), "min–max", or the one figure the stats hold."""
    if not stats:
        return MISSING
    centre = stats.get(middle) if stats.get(middle) is not None else stats.get("mean")
    low, high = stats.get("min"), stats.get("max")
    if centre is not None and low is not None and high is not None and low != high:
        suffix = f" over {stats['n']}" if middle == "median" and stats.get("n") else ""
        return f"{centre:{spec}}{unit} ({low:{spec}}–{high:{spec}}){suffix}"
    if centre is not None:
        return f"{centre:{spec}}{unit}"
    if low is not None and high is not None:
        return f"{low:{spec}}–{high:{spec}}{unit}"
    return MISSING


def percent(session: Session, path: str) -> str:
    values = session.values(path)
    return ", ".join(f"{100 * value:.1f}%" for value in values) if values else MISSING


class Sources:
    """Numbers the commands (with their notes) of the sessions a table shows, [1], [2], ..., each once, and
    lists them below the table."""

    def __init__(self):
        self.texts: list[str] = []

    @staticmethod
    def text(session: Session) -> str:
        commands = list(dict.fromkeys(record["command"] for record in session.records))
        notes = list(dict.fromkeys(record["note"] for record in session.records if record.get("note")))
        transcribed = any(record.get("source") != records.RUN for record in session.records)
        return ("; ".join(f"`{command}`" for command in commands) + (" (transcribed)" if transcribed else "")
                + "".join(f" {note}" for note in notes))

    def cell(self, session: Session) -> str:
        text = self.text(session)
        if text not in self.texts:
            self.texts.append(text)
        return f"{session.day} [{self.texts.index(text) + 1}]"

    def lines(self) -> list[str]:
        return [f"- [{number_}] {text}" for number_, text in enumerate(self.texts, start=1)] + [""] if self.texts \
            else []


Column = tuple[str, Callable[[Session], str]]


def table(columns: list[Column], rows: list[Session]) -> list[str]:
    """A Markdown table, one row per session, a "measured" column (date and source number) last; a column whose
    every cell is MISSING is left out. Then the sources' lines. No rows: no table."""
    if not rows:
        return []
    sources = Sources()
    columns = columns + [("measured", sources.cell)]
    cells = [[cell(row) for _, cell in columns] for row in rows]
    shown = [i for i, (header, _) in enumerate(columns) if i == 0 or any(line[i] != MISSING for line in cells)]
    lines = ["| " + " | ".join(columns[i][0] for i in shown) + " |", "|" + " --- |" * len(shown)]
    lines += ["| " + " | ".join(line[i] for i in shown) + " |" for line in cells]
    return lines + [""] + sources.lines()


def verdict(met: bool | None) -> str:
    return "n/a" if met is None else "met" if met else "**missed**"


# ------------------------------------------------------------------------------------------------ quality

def quality_value(value, metric: str | None) -> str:
    """A quality figure: dollars and counts of 100 or more with 2 decimals and separators, others with 4."""
    if value is None:
        return MISSING
    return f"{value:,.2f}" if metric in quality.LOWER_IS_BETTER and abs(value) >= 100 else f"{value:.4f}"


@dataclasses.dataclass
class Scored:
    """One table's newest quality session and what the goal makes of it."""
    name: str
    session: Session

    @property
    def metric(self):
        return self.session.get("metric")

    @property
    def half(self) -> str:
        """The set the table is in by today's rule (a record's own "half" is the set of its day's rule)."""
        return quality_tables.half_of(self.name)

    @property
    def ours(self):
        stats = self.session.stats("value")
        return stats.get("mean") if stats else None

    def yardstick(self, name: str):
        return self.session.get(f"yardsticks.{name}")

    @property
    def better(self):
        """The better of LightGBM's and CatBoost's figures (None unless the table has both)."""
        return quality.better_yardstick(self.metric, self.yardstick("lightgbm"), self.yardstick("catboost"))

    @property
    def within_goal(self) -> bool | None:
        return quality.within_goal(self.metric, self.ours, self.yardstick("lightgbm"))

    @property
    def within_goal_of_better(self) -> bool | None:
        return quality.within_goal(self.metric, self.ours, self.better)

    def advantage_over(self, name: str) -> float | None:
        """Ours against a yardstick ("lightgbm", "catboost") as the goal's mean takes it (None where the table
        has no figure of it or is not judged)."""
        reference = self.yardstick(name)
        if quality.within_goal(self.metric, self.ours, reference) is None:
            return None
        return quality.advantage(self.metric, self.ours, reference)

    @property
    def advantage(self) -> float | None:
        """Ours against LightGBM as the goal's mean takes it (None where the table is not judged)."""
        return self.advantage_over("lightgbm")


def _ours(scored: Scored) -> str:
    stats = scored.session.stats("value")
    large = scored.ours is not None and scored.metric in quality.LOWER_IS_BETTER and abs(scored.ours) >= 100
    return spread(stats, ",.2f" if large else ".4f")


def _mean_cell(path: str) -> Callable[[Scored], str]:
    def cell(scored: Scored) -> str:
        stats = scored.session.stats(path)
        return quality_value(stats.get("mean") if stats else None, scored.metric)
    return cell


def _yardstick_cell(name: str) -> Callable[[Scored], str]:
    return lambda scored: quality_value(scored.yardstick(name), scored.metric)


def _seeds(scored: Scored) -> str:
    """The runs' seeds, else how many runs the summary says."""
    seeds = [str(run["seed"]) for run in scored.session.figures["runs"] if "seed" in run]
    if seeds:
        return ", ".join(seeds)
    stats = scored.session.stats("value") or {}
    return f"{stats['n']} runs" if stats.get("n") else MISSING


def _seconds(path: str) -> Callable[[Scored], str]:
    """The runs' mean seconds, else the summary's range."""
    def cell(scored: Scored) -> str:
        stats = scored.session.stats(path) or {}
        return number(stats["mean"]) if stats.get("mean") is not None else spread(stats, ".1f")
    return cell


# To show a new figure, add a column here: (header, a function of the table's Scored session giving its cell, or
# MISSING), e.g. ("CatBoost", _yardstick_cell("catboost")) for figures["yardsticks"]["catboost"], or
# ("statistics s", _seconds("steps.StatisticsGen")) for a per-run figure run["steps"]["StatisticsGen"]. A column no
# row has a figure for stays off the page; figures no column names stay in the records, not on the page.
QUALITY_COLUMNS: list[tuple[str, Callable[[Scored], str]]] = [
    ("table", lambda scored: scored.name),
    ("metric", lambda scored: quality.METRIC_LABELS.get(scored.metric, scored.metric or MISSING)),
    ("ours, mean (min–max)", _ours),
    ("seeds", _seeds),
    ("LightGBM", _yardstick_cell("lightgbm")),
    ("CatBoost", _yardstick_cell("catboost")),
    ("linear", _yardstick_cell("linear")),
    ("ours vs LightGBM", lambda scored: quality.gap(scored.metric, scored.ours, scored.yardstick("lightgbm"))
     .replace("n/a", MISSING)),
    ("goal", lambda scored: verdict(scored.within_goal).replace("n/a", MISSING)),
    ("ours vs better", lambda scored: quality.gap(scored.metric, scored.ours, scored.better).replace("n/a", MISSING)),
    ("goal vs better", lambda scored: verdict(scored.within_goal_of_better).replace("n/a", MISSING)),
    ("Trainer s", _seconds("trainer_seconds")),
    ("fitting s", _seconds("fit_seconds")),
    ("SavedModel", _mean_cell("savedmodel")),
    ("full_int8", _mean_cell("full_int8")),
    ("dynamic_int8", _mean_cell("dynamic_int8")),
]


def quality_scored(found: list[dict], model: str = quality.SCHEMA) -> list[Scored]:
    """The newest session of each table measured with `model`, as Scored, in the tables' order."""
    chosen = sessions(found, lambda record: record["figures"].get("model", quality.SCHEMA) == model)
    order = list(quality_tables.TABLES)
    scored = [Scored(session.measurement.split(",")[0], session) for session in chosen]
    return sorted(scored, key=lambda item: (order.index(item.name) if item.name in order else len(order), item.name))


def quality_table(scored: list[Scored]) -> list[str]:
    """The QUALITY_COLUMNS of each table, one row a table."""
    by_session = {id(item.session): item for item in scored}
    columns = [(header, lambda session, cell=cell: cell(by_session[id(session)])) for header, cell in QUALITY_COLUMNS]
    return table(columns, [item.session for item in scored])


ADVANTAGE_ORDER = ("AUC", "accuracy", "MAE")


def goal_summary(scored: list[Scored], against: str = "lightgbm") -> dict:
    """Tables within goal (of those scored) against LightGBM (`against` "lightgbm") or against the better of
    LightGBM and CatBoost ("better"), and the mean advantage per metric label over LightGBM and over CatBoost
    ({"lightgbm": {label: mean}, "catboost": ...}; a yardstick no table has a figure of left out)."""
    verdicts = {item.name: item.within_goal if against == "lightgbm" else item.within_goal_of_better
                for item in scored}
    judged = [name for name, met in verdicts.items() if met is not None]
    advantages = {}
    for name in ("lightgbm", "catboost"):
        for item in scored:
            if item.advantage_over(name) is not None:
                advantages.setdefault(name, {}).setdefault(quality.METRIC_LABELS.get(item.metric, item.metric),
                                                           []).append(item.advantage_over(name))
    order = lambda item: (ADVANTAGE_ORDER.index(item[0]) if item[0] in ADVANTAGE_ORDER else len(ADVANTAGE_ORDER),
                          item[0])
    return {"met": sum(bool(verdicts[name]) for name in judged), "judged": len(judged), "tables": len(scored),
            "missed": [name for name in judged if not verdicts[name]],
            "advantage": {name: {label: statistics.mean(values) for label, values in sorted(by_label.items(),
                                                                                             key=order)}
                          for name, by_label in advantages.items()}}


YARDSTICK_NAMES = {"lightgbm": "LightGBM", "catboost": "CatBoost", "better": "the better of LightGBM and CatBoost"}


def goal_lines(scored: list[Scored]) -> list[str]:
    """Tables within goal of LightGBM and, where the tables have CatBoost figures, of the better of the two; the
    mean beside each yardstick."""
    lines = []
    for against in ("lightgbm", "better"):
        summary = goal_summary(scored, against)
        if against == "better" and not summary["judged"]:
            continue
        unscored = summary["tables"] - summary["judged"]
        lines.append(f"Within goal of {YARDSTICK_NAMES[against]}: **{summary['met']} of {summary['judged']}**"
                     + (f" ({unscored} without {'a LightGBM figure' if against == 'lightgbm' else 'both figures'})"
                        if unscored else "")
                     + f"; missed: {', '.join(summary['missed']) or 'none'}.")
    for name, by_label in goal_summary(scored)["advantage"].items():
        lines.append(f"Mean beside {YARDSTICK_NAMES[name]}: "
                     + "; ".join(_advantage_text(label, value, name) for label, value in by_label.items()) + ".")
    return [" ".join(lines), ""]


def _advantage_text(label: str, value: float, name: str = "lightgbm") -> str:
    return f"{YARDSTICK_NAMES[name]}'s {label} over ours {value:.3f}" if label == "MAE" else f"{label} {value:+.4f}"


# ------------------------------------------------------------------------------------------------ pictures

@dataclasses.dataclass
class Picture:
    """A PNG the page shows: its file name, the figures it draws and how it draws them."""
    name: str
    data: dict
    draw: Callable[[dict, str], None]

    @property
    def digest(self) -> str:
        return hashlib.sha256(json.dumps(self.data, sort_keys=True).encode()).hexdigest()[:16]


def quality_picture_data(scored: list[Scored]) -> dict:
    """Per metric label: [table, ours against LightGBM (difference, or ratio for MAE) as mean, min, max, goal]."""
    data = {}
    for item in scored:
        lightgbm, stats = item.yardstick("lightgbm"), item.session.stats("value")
        if item.within_goal is None or not stats or None in (stats.get("min"), stats.get("max")):
            continue
        ratio = item.metric in quality.LOWER_IS_BETTER
        against = (lambda value: value / lightgbm) if ratio else (lambda value: value - lightgbm)
        goal = quality.GOAL_RATIO if ratio else quality.GOAL_DIFFERENCE[item.metric]
        data.setdefault(quality.METRIC_LABELS.get(item.metric, item.metric), []).append(
            [item.name, round(against(stats["mean"]), 6), round(against(stats["min"]), 6),
             round(against(stats["max"]), 6), goal])
    return data


def scale_picture_data(found: list[dict]) -> dict:
    """Per series: [rows, every run's whole-run seconds] at each size, from each size's newest session."""
    data = {}
    for session in sessions(found, holds("whole_run_s")):
        data.setdefault(session.get("series"), []).append([session.get("rows"), session.values("whole_run_s")])
    return {series: sorted(points) for series, points in sorted(data.items())}


def _pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as pyplot
    matplotlib.rcParams.update(matplotlib.rcParamsDefault)
    matplotlib.rcParams.update({"font.family": "DejaVu Sans", "font.size": 9, "figure.dpi": 100,
                                "savefig.dpi": 100, "axes.grid": True, "grid.alpha": 0.3})
    return pyplot


def _save(pyplot, figure, path: str, digest: str) -> None:
    figure.savefig(path, format="png", metadata={"Software": None, "Comment": f"figures {digest}"})
    pyplot.close(figure)


def draw_quality(data: dict, path: str, digest: str) -> None:
    """One panel per metric: ours against LightGBM per table (mean, min–max), LightGBM's line and the goal's."""
    pyplot = _pyplot()
    from matplotlib.ticker import MaxNLocator
    labels = list(data)
    height = 1.4 + 0.32 * max(len(points) for points in data.values())
    figure, axes = pyplot.subplots(1, len(labels), figsize=(4 * len(labels), height), squeeze=False)
    for axis, label in zip(axes[0], labels):
        points = data[label][::-1]
        ratio = label == "MAE"
        base = 1.0 if ratio else 0.0
        cap = 0.5 if ratio else 0.08
        for row, (name, mean, low, high, goal) in enumerate(points):
            clipped = [min(max(value, base - cap), base + cap) for value in (mean, low, high)]
            colour = "tab:blue" if (mean <= goal if ratio else mean >= goal) else "tab:red"
            axis.plot([clipped[1], clipped[2]], [row, row], color=colour, linewidth=2)
            axis.plot(clipped[0], row, "o", color=colour)
            if clipped[0] != mean:
                axis.annotate(f"{mean:.2f}x" if ratio else f"{mean:+.3f}", (clipped[0], row), ha="right",
                              textcoords="offset points", xytext=(-6, 4), fontsize=7)
        lightgbm = axis.axvline(base, color="black", linewidth=1)
        goal = axis.axvline(points[0][4], color="tab:red", linestyle="--", linewidth=1)
        axis.set_yticks(range(len(points)), [point[0] for point in points])
        axis.set_ylim(-0.6, len(points) - 0.4)
        axis.set_xlim(base - cap * 1.05, base + cap * 1.05)
        axis.xaxis.set_major_locator(MaxNLocator(5))
        axis.set_title(f"{label}: ours / LightGBM" if ratio else f"{label}: ours - LightGBM")
    figure.legend([lightgbm, goal], ["LightGBM", "the goal (red dots miss it)"], loc="lower center", ncol=2,
                  fontsize=8)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    _save(pyplot, figure, path, digest)


def draw_scale(data: dict, path: str, digest: str) -> None:
    """Whole-run seconds against rows (log scale), every run and the median line per series, the 300 s target."""
    pyplot = _pyplot()
    figure, axis = pyplot.subplots(figsize=(7, 4.2))
    for series, points in data.items():
        rows = [point[0] for point in points if point[1]]
        line = axis.plot(rows, [statistics.median(point[1]) for point in points if point[1]], marker="o",
                         label=series)[0]
        for row, seconds in points:
            axis.scatter([row] * len(seconds), seconds, color=line.get_color(), s=12, alpha=0.6)
    axis.axhline(300, color="tab:red", linestyle="--", linewidth=1, label="target at 100x: under 300 s")
    axis.set_xscale("log")
    axis.set_xlabel("rows")
    axis.set_ylabel("whole run (s)")
    axis.legend(fontsize=7)
    figure.tight_layout()
    _save(pyplot, figure, path, digest)


def png_comment(path: str) -> str | None:
    """The "Comment" text chunk of a PNG file, or None."""
    with open(path, "rb") as handle:
        content = handle.read()
    position = 8
    while position + 8 <= len(content):
        length = int.from_bytes(content[position:position + 4], "big")
        kind, body = content[position + 4:position + 8], content[position + 8:position + 8 + length]
        if kind == b"tEXt" and body.startswith(b"Comment\0"):
            return body[len(b"Comment\0"):].decode("latin-1")
        position += 12 + length
    return None


TEMPLATE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "page_template.md")
PLACEHOLDER = re.compile(r"^<!-- bench: (\w+) -->$")
VARIANTS = ("float32", "float16", "dynamic_int8", "full_int8")
FARE_SERIES = "taxi, configs/taxi_fare.yaml"


def _by(*keys: str) -> Callable[[Session], tuple]:
    """A sort key: these figures of a session, missing ones first."""
    return lambda session: tuple((session.get(key) is not None, session.get(key) or 0) for key in keys)


def _wide_totals(session: Session) -> list[float]:
    """Each run's seconds for the three commands: its total, else the sum of its commands' seconds."""
    totals = []
    for run in session.figures["runs"]:
        parts = [run.get(key) for key in ("prepare_data_s", "init_s", "run_s")]
        total = run.get("total_s", sum(parts) if all(_number(part) for part in parts) else None)
        if total is not None:
            totals.append(total)
    return totals


def _worse_by_spread(session: Session) -> float:
    """A quality change's worsening (after against before, in the metric's direction) over the larger spread of its
    two sides; ±inf where that spread is 0."""
    worse_by = quality_change.worse_by(session.figures)
    if session.get("spread"):
        return worse_by / session.get("spread")
    return math.copysign(math.inf, worse_by) if worse_by else 0.0


class Page:
    """The page from the template and the records ({bench: records}): each `<!-- bench: NAME -->` line of the
    template becomes what the method NAME writes."""

    def __init__(self, found: dict[str, list[dict]], template: str):
        self.found, self.template = found, template
        self.shown: list[Session] = []
        self.pictures: list[Picture] = []

    def records(self, bench: str) -> list[dict]:
        return self.found.get(bench, [])

    def sessions(self, bench: str, *paths: str, order: Callable[[Session], object] | None = None) -> list[Session]:
        """The newest session of each of a bench's measurements holding one of `paths`, noted as shown."""
        chosen = sessions(self.records(bench), holds(*paths) if paths else None)
        self.shown += chosen
        return sorted(chosen, key=order) if order else chosen

    def picture(self, name: str, data: dict, draw, alt: str) -> list[str]:
        if not data:
            return []
        self.pictures.append(Picture(PICTURE_PREFIX + name, data, draw))
        return [f"![{alt}](images/{PICTURE_PREFIX}{name})", ""]

    def build(self) -> str:
        lines = self.template.splitlines()
        blocks = {}
        for name in [match.group(1) for match in map(PLACEHOLDER.match, lines) if match]:
            if name != "machines":  # last: it names the machines of every table's figures
                blocks[name] = getattr(self, name)()
        blocks["machines"] = self.machines()
        page = []
        for line in lines:
            match = PLACEHOLDER.match(line)
            page += blocks[match.group(1)] if match else [line]
        text = "\n".join(page)
        while "\n\n\n" in text:
            text = text.replace("\n\n\n", "\n\n")
        return text.strip() + "\n"

    def machines(self) -> list[str]:
        described = set()
        for record in (record for session in self.shown for record in session.records):
            machine = record.get("machine") or {}
            described.add(f"{machine.get('cores')} cores, {machine.get('memory_gib')} GiB, "
                          f"{machine.get('cpu') or 'CPU model not recorded'}, "
                          f"{'' if machine.get('avx512_bf16') else 'no '}AVX512_BF16")
        return ["Machines these figures ran on (none with a GPU): " + "; ".join(sorted(described)) + "."] \
            if described else []

    # -------------------------------------------------------------------- targets

    def targets(self) -> list[str]:
        rows = [target for target in (self._target_run(), self._target_memory(), self._target_wait(),
                                      self._target_demo(), self._target_host(), self._target_wide(),
                                      *self._targets_quality(), self._target_sixty_thousand()) if target]
        lines = ["| target | figure | measured | status |", "| --- | --- | --- | --- |"]
        return lines + [f"| {target} | {figure} | {day} | {verdict(met)} |" for target, figure, day, met in rows]

    def _fare_at(self, copies: int, path: str) -> Session | None:
        return next((session for session in sessions(self.records("scale"), holds(path))
                     if session.get("series") == FARE_SERIES and session.get("copies") == copies), None)

    def _target_run(self):
        session = self._fare_at(100, "whole_run_s")
        if session:
            return ("whole run at 100x (taxi fare, 1,500,200 rows) under 300 s",
                    per_run(session, "whole_run_s", ".1f", " s"), session.day, max(session.values("whole_run_s")) < 300)

    def _target_memory(self):
        session = self._fare_at(100, "peak_rss_gb")
        if session:
            return ("peak RSS at 100x at most 2.1 GB", per_run(session, "peak_rss_gb", ".2f", " GB"), session.day,
                    max(session.values("peak_rss_gb")) <= 2.1)

    def _target_wait(self):
        found = {copies: self._fare_at(copies, "input_wait_fraction") for copies in (1, 10, 100)}
        worst = {copies: max(session.values("input_wait_fraction")) for copies, session in found.items() if session}
        if worst:
            return ("Trainer input wait under 5% (taxi fare, the worst run at each size)",
                    " · ".join(f"{copies}x {100 * value:.1f}%" for copies, value in worst.items()),
                    max(session.day for session in found.values() if session), max(worst.values()) < 0.05)

    def _target_demo(self):
        session = next(iter(sessions(self.records("demo_vs_tfx"), holds("ratio"))), None)
        if session:
            return ("`make demo` at most 0.22x TFX's example's wall time", per_run(session, "ratio", ".2f", "x"),
                    session.day, max(session.values("ratio")) <= 0.22)

    def _target_host(self):
        found = sessions(self.records("trainer_throughput"), holds("ratio"))
        lowest = {}
        for session in found:
            model = session.get("model")
            lowest[model] = min([lowest.get(model, float("inf"))] + session.values("ratio"))
        if lowest:
            return ("host ceiling at least 20x the model's rate (the lowest run per model)",
                    " · ".join(f"`{model}` {value:.1f}x" for model, value in sorted(lowest.items())),
                    max(session.day for session in found), min(lowest.values()) >= 20)

    def _target_wide(self):
        session = next((session for session in sessions(self.records("wide_table"), holds("total_s", "run_s"))
                        if session.get("columns") == 1000 and session.get("rows") == 2000), None)
        if session:
            seconds, peaks = _wide_totals(session), session.values("peak_gb")
            return ("wide table, 1,000 numeric columns x 2,000 rows: the three commands under 5 minutes, under 4 GB",
                    ", ".join(f"{value:.1f}" for value in seconds) + " s; " + per_run(session, "peak_gb", ".2f", " GB"),
                    session.day, max(seconds) < 300 and (not peaks or max(peaks) < 4))

    def _targets_quality(self) -> list[tuple]:
        everything = quality_scored(self.records("tabular_quality"))
        scored = [item for item in everything if item.half == quality_tables.CHECK]
        targets = []
        if scored:  # the check set's single scoring: every table of the set counts, one without figures as missed
            summary, tables = goal_summary(scored, "better"), len(quality_tables.tables_in(quality_tables.CHECK))
            day = max(item.session.day for item in scored)
            targets.append(("check set: at least 85% of its tables within goal of the better of LightGBM and CatBoost",
                            f"{summary['met']} of {tables} ({100 * summary['met'] / tables:.0f}%)", day,
                            summary["met"] >= 0.85 * tables))
            for name, by_label in summary["advantage"].items():
                targets.append((f"check set: on average at least as good as {YARDSTICK_NAMES[name]}",
                                " · ".join(_advantage_text(label, value, name) for label, value in by_label.items()),
                                day, all(value >= (1 if label == "MAE" else 0) for label, value in by_label.items())))
        fare = next((item for item in everything if item.name == "taxi_fare"), None)
        stats = fare.session.stats("value") if fare else None
        if stats and stats.get("n", 0) >= 2:
            width = stats["max"] - stats["min"]
            targets.append(("bundled taxi fare: MAE at most 0.95, its spread over three runs at most 0.02",
                            f"{stats['mean']:.4f}, spread {width:.3f}", fare.session.day,
                            stats["mean"] <= 0.95 and width <= 0.02))
        return targets

    def _target_sixty_thousand(self):
        session = next((session for session in sessions(self.records("by_hand"), holds("total_s"))
                        if 50_000 <= (session.get("rows") or 0) <= 70_000), None)
        if session:
            return (f"the three commands on a 60,000-row table at most 5 minutes ({session.measurement.split(',')[0]}, "
                    f"{session.get('rows'):,} rows)",
                    per_run(session, "total_s", ".1f", " s"), session.day, max(session.values("total_s")) <= 300)

    # -------------------------------------------------------------------- sections

    def scale(self) -> list[str]:
        series = ("data, config", lambda s: s.get("series") or MISSING)
        rows = ("rows", lambda s: number(s.get("rows"), ","))
        lines = table([series, rows, ("whole run", lambda s: per_run(s, "whole_run_s", ".1f", " s")),
                       ("peak RSS", lambda s: per_run(s, "peak_rss_gb", ".2f", " GB")),
                       ("Trainer input wait", lambda s: percent(s, "input_wait_fraction")),
                       ("Trainer examples/s", lambda s: per_run(s, "trainer_examples_per_s", ",.0f"))],
                      self.sessions("scale", "whole_run_s", order=_by("series", "rows")))
        return lines + self.picture("scale.png", scale_picture_data(self.records("scale")), draw_scale,
                                    "Whole-run seconds against rows at 1x, 10x and 100x")

    def demo(self) -> list[str]:
        lines = table([("", lambda s: "wall time"),
                       ("TFX `taxi_pipeline_native_keras`", lambda s: per_run(s, "tfx_s", ".1f", " s")),
                       ("`make demo`", lambda s: per_run(s, "demo_s", ".1f", " s")),
                       ("ratio", lambda s: per_run(s, "ratio", ".2f", "x"))], self.sessions("demo_vs_tfx", "ratio"))
        return lines + table([("", lambda s: "eval metrics"),
                              ("demo AUC", lambda s: per_run(s, "demo_auc", ".4f")),
                              ("demo accuracy", lambda s: per_run(s, "demo_binary_accuracy", ".4f")),
                              ("TFX example's accuracy", lambda s: per_run(s, "tfx_eval_metrics.binary_accuracy",
                                                                           ".4f"))],
                             self.sessions("demo_vs_tfx", "demo_auc"))

    def nothing_new(self) -> list[str]:
        return table([("cold run", lambda s: per_run(s, "cold_run_s", ".1f", " s")),
                      ("re-run, nothing new", lambda s: per_run(s, "nothing_new_s", ".2f", " s")),
                      ("re-run with `--force` (every step cached)", lambda s: per_run(s, "forced_s", ".1f", " s"))],
                     self.sessions("by_hand", "nothing_new_s"))

    def throughput(self) -> list[str]:
        model = ("model", lambda s: f"`{s.get('model')}`")
        lines = table([model, ("rows", lambda s: number(s.get("rows"), ",")),
                       ("host ceiling (ex/s)", lambda s: per_run(s, "host_examples_per_s", ",.0f")),
                       ("model in memory (ex/s)", lambda s: per_run(s, "in_memory_examples_per_s", ",.0f")),
                       ("host / model", lambda s: per_run(s, "ratio", ".1f", "x")),
                       ("input wait", lambda s: percent(s, "input_wait_fraction")),
                       ("Trainer s", lambda s: per_run(s, "trainer_s", ".0f"))],
                      self.sessions("trainer_throughput", "host_examples_per_s", "ratio", order=_by("model", "rows")))
        return lines

    def halves(self) -> list[str]:
        return [f"- **{half.capitalize()} set ({len(names)})**: {', '.join(names)}."
                for half, names in ((half, quality_tables.tables_in(half))
                                    for half in (quality_tables.TUNING, quality_tables.CHECK))]

    def quality(self) -> list[str]:
        found, lines = self.records("tabular_quality"), []
        everything, hand = quality_scored(found), quality_scored(found, quality.HAND)
        self.shown += [item.session for item in everything + hand]
        for half, title in ((quality_tables.CHECK, "The check set"), (quality_tables.TUNING, "The tuning set")):
            scored = [item for item in everything if item.half == half]
            if scored:
                lines += [f"### {title}", ""] + quality_table(scored) + goal_lines(scored)
                lines += self.picture(f"quality-{half}.png", quality_picture_data(scored), draw_quality,
                                      f"The {half} set: ours beside LightGBM per table")
        if hand:
            lines += ["### Hand-written model modules", ""] + quality_table(hand)
        return lines

    def dates(self) -> list[str]:
        return table([("days, training / held out",
                       lambda s: f"{number(s.get('training_days'), ',')} / {number(s.get('holdout_days'), ',')}"),
                      ("ours, holdout accuracy", lambda s: per_run(s, "accuracy", ".4f")),
                      ("LightGBM with the date's parts", lambda s: number(s.get("lightgbm_with_dates"), ".4f")),
                      ("LightGBM without the date", lambda s: number(s.get("lightgbm_without_dates"), ".4f")),
                      ("majority class", lambda s: f"{number(s.get('majority_accuracy'), '.4f')} "
                                                   f"({s.get('majority_class') or MISSING})")],
                     self.sessions("date_table", "accuracy"))

    def csv(self) -> list[str]:
        sources = Sources()
        lines = ["| command | rows | seconds | peak memory | measured |", "| --- | --- | --- | --- | --- |"]
        for command, key in (("prepare-data --csv", "prepare_data"), ("init", "init")):
            lines += [f"| `{command}` | {number(session.get('rows'), ',')} "
                      f"| {per_run(session, f'{key}_s', '.1f', ' s')} "
                      f"| {per_run(session, f'{key}_peak_mb', ',.0f', ' MB')} | {sources.cell(session)} |"
                      for session in self.sessions("csv_onboarding", f"{key}_s", order=_by("rows"))]
        return lines + [""] + sources.lines()

    def wide(self) -> list[str]:
        return table([("columns x rows", lambda s: s.measurement),
                      ("the three commands", lambda s: ", ".join(f"{v:,.1f}" for v in _wide_totals(s)) + " s"
                       if _wide_totals(s) else MISSING),
                      ("prepare-data", lambda s: per_run(s, "prepare_data_s", ".1f", " s")),
                      ("init", lambda s: per_run(s, "init_s", ".1f", " s")),
                      ("run", lambda s: per_run(s, "run_s", ".1f", " s")),
                      ("peak memory", lambda s: per_run(s, "peak_gb", ".2f", " GB")),
                      ("Trainer", lambda s: per_run(s, "trainer_s", ".1f", " s")),
                      ("of which fitting", lambda s: per_run(s, "fit_s", ".1f", " s"))],
                     self.sessions("wide_table", "total_s", "run_s", order=_by("rows", "columns")))

    def stream(self) -> list[str]:
        found = self.sessions("retraining_stream", "spans", order=_by("cold", "window"))
        spans = max((len(session.get("spans") or []) for session in found), default=0)

        def auc(span: int) -> Callable[[Session], str]:
            def cell(session: Session) -> str:
                row = next((row for row in session.get("spans") or [] if row.get("span") == span), {})
                if row.get("holdout_auc") is None:
                    return MISSING
                return f"{row['holdout_auc']:.4f}" + ("" if row.get("blessed") else " (not blessed)")
            return cell

        lines = ["Holdout AUC of the model served after each span:", ""]
        lines += table([("window", lambda s: f"{s.get('window')} span{'' if s.get('window') == 1 else 's'}, "
                                             + ("from scratch" if s.get("cold") else "warm start"))]
                       + [(f"span {span}", auc(span)) for span in range(1, spans + 1)], found)
        gates = [(session, row, check) for session in found if session.get("window") == 1 and not session.get("cold")
                 for row in session.get("spans") or [] for check in row.get("checks") or []
                 if check.get("gate") == "vs_production" and check.get("value") is not None]
        if gates:
            sources = Sources()
            lines += ["The `vs_production` gate of the 1-span window, on each span's eval split:", "",
                      "| span | eval examples | candidate AUC | production AUC | difference, 95% interval | passed "
                      "| measured |", "| --- | --- | --- | --- | --- | --- | --- |"]
            lines += [f"| {row['span']} | {check['examples']:,} | {check['value']:.4f} | {check['reference']:.4f} "
                      f"| [{check['interval'][0]:+.4f}, {check['interval'][1]:+.4f}] "
                      f"| {'yes' if check['passed'] else 'no'} | {sources.cell(session)} |"
                      for session, row, check in gates]
            lines += [""] + sources.lines()
        return lines

    def evaluator(self) -> list[str]:
        return table([("evaluator", lambda s: s.get("executor") or s.measurement),
                      ("eval examples x models",
                       lambda s: f"{number(s.get('eval_examples'), ',')} x {number(s.get('models'), 'd')}"),
                      ("seconds", lambda s: per_run(s, "seconds", ".1f", " s")),
                      ("model-examples/s", lambda s: per_run(s, "model_examples_per_s", ",.0f"))],
                     self.sessions("evaluator_speed", "seconds"))

    def tflite(self) -> list[str]:
        sources = Sources()
        lines = ["| model | variant | size (bytes) | weights (bytes, vs float32) | median latency | AUC (SavedModel) "
                 "| mean / max diff vs serving_raw | verdict | measured |", "|" + " --- |" * 9]
        for session in self.sessions("tflite_ladder", "variants"):
            variants = session.get("variants") or {}
            base = (variants.get("float32") or {}).get("weight_bytes")
            ordered = sorted(variants.items(), key=lambda item: (
                VARIANTS.index(item[0]) if item[0] in VARIANTS else len(VARIANTS), item[0]))
            for index, (name, result) in enumerate(ordered):
                weights, first = result.get("weight_bytes"), index == 0
                saved = session.get("savedmodel_auc")
                verdict_ = ("recommended" if result.get("recommended") else
                            "accepted" if result.get("accepted") else "rejected")
                model = f"`{session.measurement}`" if first else ""
                lines.append(
                    f"| {model} | {name} | {number(result.get('size_bytes'), ',')} "
                    f"| {number(weights, ',')}{f' ({weights / base:.2f}x)' if weights and base else ''} "
                    f"| {number(result.get('median_latency_us'), '.1f', ' µs')} | {number(result.get('auc'), '.4f')}"
                    f"{f' ({saved:.4f})' if first and saved is not None else ''} "
                    f"| {number(result.get('mean_abs_diff'), '.4f')} / {number(result.get('max_abs_diff'), '.4f')} "
                    f"| {verdict_} | {sources.cell(session) if first else ''} |")
        return lines + [""] + sources.lines()

    def time_split(self) -> list[str]:
        def cell(part: str, spec: str = ".1f") -> Callable[[Session], str]:
            def text(session: Session) -> str:
                before, after = session.get("before") or {}, session.get("after") or {}
                now = number(after.get(part), spec, " s")
                return f"{number(before.get(part), spec, ' s')} → {now}" if before else now
            return text

        def share(session: Session) -> str:
            def of(figures: dict) -> str:
                fitting, trainer = figures.get("fitting"), figures.get("trainer")
                return f"{fitting / trainer:.0%}" if _number(fitting) and _number(trainer) and trainer else MISSING
            before = session.get("before")
            return f"{of(before)} → {of(session.get('after') or {})}" if before else of(session.get("after") or {})

        def code(session: Session) -> str:
            before, after = session.get("before_code"), session.get("after_code")
            return f"{before or MISSING} → {after or MISSING}" if session.get("before") else (after or MISSING)

        return table([("table", lambda s: s.measurement), ("rows", lambda s: number(s.get("rows"), ",")),
                      ("columns", lambda s: number(s.get("columns"), "d")),
                      ("three commands", cell("three commands", ".0f")), ("whole run", cell("run", ".0f")),
                      ("Trainer", cell("trainer")), ("fitting", cell("fitting")),
                      ("fitting / Trainer", share), ("ModelExport", cell("export")), ("code", code)],
                     self.sessions("time_split", "after"))

    def quality_change(self) -> list[str]:
        """A line per change (before → after code, each table's newest comparison): the tables not worse beyond
        the larger run-to-run spread of the two sides, those worse, those scored on another eval split, the table
        nearest to worse (its change against that spread), the day and the command."""
        changes: dict[tuple, list[Session]] = {}
        for session in self.sessions("quality_change", "verdict"):
            changes.setdefault((session.get("before_code"), session.get("after_code")), []).append(session)
        newest = {codes: max(group, key=lambda session: session.newest["date"]) for codes, group in changes.items()}
        lines = []
        for (before, after), group in sorted(changes.items(), key=lambda item: newest[item[0]].newest["date"]):
            said = {verdict_: sorted(s.measurement for s in group if s.get("verdict") == verdict_)
                    for verdict_ in ("not worse", "worse", "other eval split")}
            judged = [s for s in group if s.get("verdict") in ("worse", "not worse")]
            text = (f"- `{before or MISSING}` → `{after or MISSING}`: **{len(said['not worse'])} of {len(judged)} "
                    f"tables not worse** beyond the larger spread ({', '.join(said['not worse']) or 'none'})")
            if said["worse"]:
                text += f"; **worse**: {', '.join(said['worse'])}"
            if said["other eval split"]:
                text += f"; not judged, scored on another eval split: {', '.join(said['other eval split'])}"
            if judged:
                nearest = max(judged, key=_worse_by_spread)
                text += (f"; nearest to worse: {nearest.measurement} "
                         f"({quality.METRIC_LABELS.get(nearest.get('metric'), nearest.get('metric'))} "
                         f"{quality_change.change_text(nearest.figures)}, spread {nearest.get('spread'):.4f})")
            shown = newest[(before, after)]
            lines.append(f"{text}. {shown.day}: {Sources.text(shown)}")
        return lines

    def beam(self) -> list[str]:
        return table([("mode", lambda s: f"`{s.get('mode')}`"), ("records", lambda s: number(s.get("records"), ",")),
                      ("seconds", lambda s: per_run(s, "seconds", ".1f", " s")),
                      ("every record counted", lambda s: "yes" if all(
                          run.get("all_counted") for run in s.figures["runs"]) else "**no**")],
                     self.sessions("direct_runner_modes", "seconds"))


def render(found: dict[str, list[dict]], template: str | None = None) -> tuple[str, list[Picture]]:
    """Input: {bench: records} and the page's template text (default bench/page_template.md). Output: the page's
    Markdown and the pictures it shows."""
    if template is None:
        with open(TEMPLATE) as handle:
            template = handle.read()
    page = Page(found, template)
    return page.build(), page.pictures


def write(results: str, page_path: str, images: str) -> list[str]:
    """Renders from the records under `results`, writes the page and its pictures (and removes pictures of this
    page that it no longer shows). Output: the paths written."""
    text, pictures = render(records.read(results))
    os.makedirs(images, exist_ok=True)
    with open(page_path, "w") as handle:
        handle.write(text)
    written = [page_path]
    for picture in pictures:
        path = os.path.join(images, picture.name)
        picture.draw(picture.data, path, picture.digest)
        written.append(path)
    names = {picture.name for picture in pictures}
    for stale in sorted(os.listdir(images)):
        if stale.startswith(PICTURE_PREFIX) and stale.endswith(".png") and stale not in names:
            os.remove(os.path.join(images, stale))
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=records.RESULTS_DIR, help="the records' folder")
    parser.add_argument("--page", default=PAGE, help="the page to write")
    parser.add_argument("--images", default=IMAGES, help="where the page's pictures go")
    args = parser.parse_args()
    for path in write(args.results, args.page, args.images):
        print(f"wrote {os.path.relpath(path)}")


if __name__ == "__main__":
    main()
