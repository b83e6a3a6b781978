"""`python -m pipeline init`: a user's TFRecords (from `prepare-data --csv`, or their own) turned into a
curated schema and a config that trains the schema-driven model (models/tabular.py), with no code.

It reads the latest span under the data root as ingestion does (every record must be a tf.Example), in
batches and in bounded memory (span_columns.py: per column counters, its distinct values and a sketch; a uniform
sample of records), computes TFDV statistics of the sample, infers a schema and curates it (curated_schema.py):
presence as seen, string features open to new values (a new category is measured as drift, not refused), dates
marked as times, a drift comparator on the label and every other feature the model uses, the label in the
TRAINING environment only (its classes are the config's, checked by the Trainer), and a feature the model leaves
out checked for its type only. It chooses the task from the label's values unless told, leaves out the columns
that cannot help (constant, a unique value per row, too rare, several values per row, no value at all) and says
why (task_and_columns.py), and writes <folder>/<name>.yaml and <folder>/schemas/<name>/schema.pbtxt
(project_config.py: the train section from the task's row of models/defaults.py). Records without a value for
the label are left out of every decision and counted; for data prepare-data wrote, write() also leaves them out
of the spans and records the label, so that later spans leave such rows out as they are prepared. Bad input
raises InitError naming the column, file or folder, before anything is written.
"""
from __future__ import annotations

import os

from components.core.contract import DATE_RANGE, DATE_RANGE_TEXT
from components.core.tasks import task_named
from components.settings import PIPELINE_NAME
from models.defaults import defaults_for
from pipeline.onboarding.curated_schema import curated_schema, sample_statistics
from pipeline.onboarding.project_config import Project, eval_share, name_from, training_size
from pipeline.onboarding.span_columns import InitError, read_columns
from pipeline.onboarding.task_and_columns import (check_label, check_unlabelled, choose_task, exclusions,
                                                  label_numbers, seconds_advice)

__all__ = ["InitError", "plan_project"]


def plan_project(folder: str, data_root: str, label: str, task: str | None = None, name: str | None = None,
                 exclude: list[str] = (), refuse_unlabelled: bool = False, dates: list[str] = ()) -> Project:
    """Reads the data and decides everything; writes nothing (Project.write does). Records without a value for
    the label are counted and left out of every decision (write() leaves them out of the spans), unless
    `refuse_unlabelled`. `dates`: integer columns of Unix seconds the model reads as dates. InitError naming
    what is wrong."""
    from pipeline.onboarding.column_record import read_record
    from pipeline.onboarding.span_folders import read_span_note
    from pipeline.onboarding.span_writing import unread_notes

    if os.path.isfile(data_root):
        raise InitError(f"--data {data_root}: a file; --data is the folder prepare-data wrote (prepare-data --csv "
                        f"{data_root} --data data/NAME, then init --data data/NAME)")
    if "://" not in data_root and not os.path.isdir(data_root):  # said before TensorFlow loads to read the data
        raise InitError(f"{data_root}: input directory does not exist")
    folder_name = os.path.basename(os.path.abspath(data_root).rstrip("/"))
    if name is not None and not PIPELINE_NAME.holds(name):
        raise InitError(f"--name {name!r}: {PIPELINE_NAME.message} (it names the config, the schema folder and the "
                        "pipeline)")
    derived, name = name is None, name or name_from(folder_name)
    reading = read_columns(data_root, label)
    columns, records = reading.columns, reading.records
    label_column = check_label(columns, label, records, reading.unlabelled, reading.names)
    record = read_record(data_root)
    check_unlabelled(label, records, reading.unlabelled, record is not None, refuse_unlabelled)
    for column in dates:
        if column not in columns or columns[column].kind != "int" or column == label:
            raise InitError(f"--dates {column}: not an integer column of the data (a date is int64 seconds since "
                            "1970-01-01 UTC)")
        low, high = columns[column].int_range or DATE_RANGE
        if low < DATE_RANGE[0] or high > DATE_RANGE[1]:
            raise InitError(f"--dates {column}: values from {low:,} to {high:,}, outside the dates the model reads "
                            f"({DATE_RANGE_TEXT}: {DATE_RANGE[0]:,} to {DATE_RANGE[1]:,} seconds since 1970-01-01); "
                            "Unix seconds are wanted (milliseconds divided by 1,000)")
        columns[column].is_date = True
    task, classes, task_reason = choose_task(label_column, task)
    excluded = exclusions(columns, label, records, list(exclude))
    kept = {n: c for n, c in sorted(columns.items()) if n != label and n not in excluded}
    inputs = {kind: [n for n, c in kept.items() if c.kind == kind and not c.is_date] for kind in ("float", "int", "string")}
    inputs["date"] = [n for n, c in kept.items() if c.is_date]
    if not any(inputs.values()):
        reasons = ("; ".join(f"{column}: {why}" for column, why in excluded.items())
                   or "the label is the only column")
        raise InitError(f"no column is left for the model to learn from ({reasons})")
    empty = [column for column in (record or {}).get("types", {}) if column not in reading.names and column != label]
    notes = [f"int column {c!r}: {seconds_advice(column)}" for c, column in kept.items() if column.looks_like_seconds]
    if derived and name != folder_name:
        notes.append(f"named {name!r} after the data folder {folder_name!r} (a name holds letters, digits, '-' and "
                     "'_' only); --name gives another")
    if reading.span_dir:  # the cells of columns of numbers or dates that prepare-data wrote as missing
        notes += unread_notes(read_span_note(reading.span_dir).get("unread", {}),
                              os.path.basename(reading.span_dir.rstrip("/")))
    earlier = (record or {}).get("label")
    if earlier and earlier != label:
        notes.append(f"the spans were written without the rows that had no value for {earlier!r} (the label init "
                     "was given before); prepare them again from the CSV to have those rows back")
    sometimes_missing = {name for name, column in columns.items() if column.present < records}
    statistics = sample_statistics(reading.sample, label)
    schema_text = curated_schema(statistics, label, set(excluded), set(inputs["date"]), sometimes_missing)
    eval_fraction = eval_share(records)
    batch, epochs = training_size(records, eval_fraction, defaults_for(task))
    task_settings = task_named(task).propose_settings(label_numbers(statistics, label))
    return Project(name, folder, data_root, records, task, label, classes, inputs, excluded, task_reason,
                   schema_text, batch, epochs, eval_fraction, task_settings, reading.unlabelled, empty, notes,
                   prepared=record is not None and not refuse_unlabelled,
                   missing_tokens=list((record or {}).get("missing_tokens", [])))
