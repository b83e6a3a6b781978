"""What `init` decides from the columns it read (pipeline/onboarding/span_columns.py): whether the label can be
trained on, the task its values suggest (unless told) and its classes, the label's numbers a task's own
settings are proposed from, and the columns the model leaves out (constant, too rare, an id, several values per
record) with why. Each refusal is an InitError naming the column.
"""
from __future__ import annotations

from components.core.tasks import LabelNumbers, TaskError, task_for_label, task_named
from pipeline.onboarding.span_columns import Column, InitError

MOSTLY_MISSING = 0.5  # a label missing in more than this share of rows cannot be trained on
UNIQUE_ID_MIN_ROWS = 20  # below this many rows, a column of distinct values is not called an id
RARE = 0.01  # a column present in fewer than this share of records is too rare to learn from
ID_SHARE = 0.98  # estimated distinct values in at least this share of the records: an id


def choose_task(label: Column, asked: str | None) -> tuple[str, list[str], str]:
    """Input: the label's column and the task asked for (None: choose). Output: (task name, classes, why).
    InitError when the label cannot serve the task. A float label whose values are whole numbers (pandas
    writes a 0/1 column with missing cells as 0.0/1.0) can be a class id."""
    distinct = label.sorted_values()
    whole = label.kind == "float" and bool(distinct) and all(float(value).is_integer() for value in distinct)
    count = label.distinct
    if asked:
        try:
            task = task_named(asked)
        except TaskError as error:
            raise InitError(f"--task {asked}: {error}") from None
        problem = task.label_problem(label.kind, count, whole)
        if problem:
            sample = f" ({', '.join(map(str, distinct[:3]))}...)" if label.kind == "string" else ""
            raise InitError(f"--task {asked}: the label {label.name!r} {problem}{sample}")
        reason = "set with --task"
    else:
        task = task_for_label(label.kind, count, whole)
        reason = f"{label.kind} label with {count:,} distinct values" + (", all whole" if whole and count == 2 else "")
    classes = task.class_names([int(value) if whole else value for value in distinct])
    return task.name, classes, reason


def check_label(columns: dict[str, Column], label: str, records: int, unlabelled: int = 0,
                names: set[str] | None = None) -> Column:
    """The label's column, given the records that hold it and those that do not (`unlabelled`); InitError when
    it is absent, missing in most records, several-valued or constant."""
    if label not in columns:
        raise InitError(f"--label {label}: no such column (columns: {', '.join(sorted(names or columns))})")
    column = columns[label]
    total = records + unlabelled
    if unlabelled > MOSTLY_MISSING * total:
        raise InitError(f"--label {label}: missing in {unlabelled:,} of {total:,} records: too few labeled examples")
    if column.multi_valued:
        raise InitError(f"--label {label}: several values in one record; a label is one value per example")
    if column.distinct < 2:
        raise InitError(f"--label {label}: every record has the same value ({column.sorted_values()[0]!r}): one "
                        "class, nothing to learn")
    return column


def check_unlabelled(label: str, records: int, unlabelled: int, prepared: bool, refuse: bool) -> None:
    """InitError when some records lack the label and cannot be left out: asked not to (`refuse`), or the
    data root is not prepare-data's (`prepared` False: its TFRecord files are the user's, not rewritten)."""
    if not unlabelled:
        return
    where = (f"--label {label}: missing in {unlabelled:,} of {records + unlabelled:,} records, which cannot be "
             "trained or evaluated on")
    if refuse:
        raise InitError(f"{where} (--refuse-unlabelled); leave those rows out (prepare-data --csv FILE --require "
                        f"{label}) and run init again, or run init without --refuse-unlabelled, which leaves them "
                        "out of the spans and counts them")
    if not prepared:
        raise InitError(f"{where}; init leaves such records out only of spans prepare-data wrote, and these TFRecord "
                        "files are yours: leave the records out of them (or prepare the table with prepare-data "
                        "--csv) and run init again")


def exclusions(columns: dict[str, Column], label: str, records: int, asked: list[str]) -> dict[str, str]:
    """Feature -> why the model leaves it out: asked for, constant, too rare, a distinct value per record (an
    id: integers, strings or whole numbers written as floats; not a date), or several values per record."""
    unknown = sorted(set(asked) - set(columns))
    if unknown:
        raise InitError(f"--exclude: no such column(s): {', '.join(unknown)} (columns: {', '.join(sorted(columns))})")
    if label in asked:
        raise InitError(f"--exclude {label}: the label cannot be left out")
    excluded = {name: "excluded with --exclude" for name in asked}
    for name, column in sorted(columns.items()):
        if name == label or name in excluded:
            continue
        if column.multi_valued:
            excluded[name] = "several values per record"
        elif column.present < RARE * records:
            excluded[name] = f"present in {column.present:,} of {records:,} records: too rare to learn from"
        elif column.distinct <= 1:
            excluded[name] = "the same value wherever present"
        elif ((column.kind != "float" or column.whole) and not column.is_date and records >= UNIQUE_ID_MIN_ROWS
              and column.present == records and column.distinct >= ID_SHARE * records):
            excluded[name] = "a different value in every record: an id, not a feature" + (
                f"; {seconds_advice(column)}" if column.looks_like_seconds else "") + (
                " (whole numbers written as floats)" if column.kind == "float" else "")
    return excluded


def seconds_advice(column: Column) -> str:
    """What to do with an integer column that looks like Unix seconds."""
    import datetime

    first, last = (datetime.datetime.fromtimestamp(value, datetime.timezone.utc).date() for value in column.int_range)
    return (f"it looks like Unix seconds ({first} to {last}): init --dates {column.name} reads it as a date "
            "(calendar features)")


def label_numbers(statistics, label: str) -> LabelNumbers | None:
    """A numeric label's least, median, mean, spread and 10th and 90th percentiles (from the quantiles
    histogram) in the sample's TFDV statistics (None: none)."""
    feature = next((f for f in statistics.datasets[0].features if f.path.step[-1:] == [label]), None)
    if feature is None or not feature.HasField("num_stats"):
        return None
    numbers = feature.num_stats
    return LabelNumbers(numbers.min, numbers.median, numbers.mean, numbers.std_dev, *_tenth_and_ninetieth(numbers))


def _tenth_and_ninetieth(numbers) -> tuple[float | None, float | None]:
    """The 10th and 90th percentiles from a TFDV NumericStatistics' quantiles histogram (equal-count buckets:
    bucket i starts at quantile i / n); (None, None) without one of at least 10 buckets."""
    quantiles = next((h for h in numbers.histograms if h.type == h.QUANTILES), None)
    buckets = list(quantiles.buckets) if quantiles is not None else []
    if len(buckets) < 10:
        return None, None
    tenth = round(len(buckets) / 10)
    return buckets[tenth].low_value, buckets[len(buckets) - tenth].low_value
