"""`python -m pipeline init`: a user's TFRecords (from `prepare-data --csv`, or their own) turned into a
curated schema and a config that trains the schema-driven model (models/tabular.py), with no code.

It reads the latest span under the data root as ingestion does (every record must be a tf.Example), in
batches and in bounded memory (per column: counters, at most EXACT_DISTINCT distinct values and a sketch;
a uniform sample of STATISTICS_ROWS records), computes TFDV statistics of the sample, infers a schema and
curates it: presence as seen, string
features open to new values (a new category is measured as drift, not refused), dates marked as times, a
drift comparator on the label and every other feature the model uses, the label in the TRAINING environment
only (its classes are the config's, checked by the Trainer), and a feature the model leaves out checked for
its type only. It chooses the task from the label's values unless told, leaves out the columns that cannot
help (constant, a unique value per row, too rare, several values per row, no value at all) and says why, and
writes <folder>/<name>.yaml and <folder>/schemas/<name>/schema.pbtxt. Records without a value for the label
are left out of every decision and counted; for data prepare-data wrote, write() also leaves them out of the
spans and records the label, so that later spans leave such rows out as they are prepared. Bad input raises
InitError naming the column, file or folder, before anything is written.
"""
from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from components.core.contract import DATE_RANGE, DATE_RANGE_TEXT
from components.settings import FOLDS_MIN_RECORDS, PIPELINE_NAME, IngestConfig
from pipeline.onboarding.csv_spans import PLAUSIBLE_SECONDS
from components.core.tasks import LabelNumbers, TaskError, task_for_label, task_named
from models.defaults import Defaults, defaults_for

MOSTLY_MISSING = 0.5  # a label missing in more than this share of rows cannot be trained on
EMPTY_REASON = ("no value in any record, so not in the schema; a later span that fills it is left out of the "
                "model until init is run again")
UNIQUE_ID_MIN_ROWS = 20  # below this many rows, a column of distinct values is not called an id
RARE = 0.01  # a column present in fewer than this share of records is too rare to learn from
NUMBER_DRIFT = 0.3  # Jensen-Shannon divergence over quantile histograms (as the taxi schema)
CATEGORY_DRIFT = 0.15  # L-infinity distance between the value distributions
SCHEDULES = {"cosine": "after the warmup, down to 0 at the last step", "constant": "after the warmup"}
# The eval split the gates score: a third of a table's records up to 30,000 of them, EVAL_RECORDS beyond (at
# least a tenth): enough to resolve the gates' tolerances, and the rest trains.
EVAL_RECORDS = 10_000
# Regression: a label >= 0 whose mean lies this far above its median (in standard deviations, times 3:
# Pearson's second skewness) is trained and predicted as log(1 + label)
EXACT_DISTINCT = 10_000  # distinct values kept per column; beyond, their number is estimated
SKETCH_SIZE = 4096  # hashes kept per column for that estimate (about 2% error)
ID_SHARE = 0.98  # estimated distinct values in at least this share of the records: an id
DECODE_BATCH = 4096  # records decoded at once
STATISTICS_ROWS = 25_000  # the schema is inferred from TFDV statistics of a uniform sample of this many records


class InitError(ValueError):
    """The data or the arguments cannot make a project; the message names the column, file or folder."""


class DistinctCounter:
    """How many distinct values a column holds, in bounded memory: exact up to EXACT_DISTINCT values (they
    are kept, so a label's classes are known), estimated beyond (the K smallest of their 64-bit hashes: a
    KMV sketch, within a few percent)."""

    def __init__(self):
        self.values: set | None = set()  # None once there are more than EXACT_DISTINCT
        self.smallest = np.zeros(0, np.uint64)

    def add(self, values: np.ndarray) -> None:
        import pandas as pd

        if not len(values):
            return
        if self.values is not None:
            self.values.update(np.unique(values).tolist())
            if len(self.values) > EXACT_DISTINCT:
                self.values = None
        hashes = np.unique(pd.util.hash_array(values))
        self.smallest = np.unique(np.concatenate([self.smallest, hashes[:SKETCH_SIZE]]))[:SKETCH_SIZE]

    @property
    def count(self) -> int:
        if self.values is not None:
            return len(self.values)
        return int((SKETCH_SIZE - 1) / (float(self.smallest[-1]) / 2.0 ** 64))


@dataclasses.dataclass
class Column:
    """One feature across the span's records: its kind, how often it is present, its distinct values."""
    name: str
    kind: str  # int | float | string
    present: int = 0  # records that hold a value
    multi_valued: bool = False
    distinct_values: DistinctCounter = dataclasses.field(default_factory=DistinctCounter)
    is_date: bool = False  # int64 seconds since the epoch (prepare-data wrote a date column)
    int_range: tuple[int, int] | None = None  # an integer column's least and greatest value
    whole: bool = True  # every value a whole number (a float column of ids written 1.0, 2.0, ... by pandas)

    @property
    def looks_like_seconds(self) -> bool:
        """An integer column whose values all lie in 1990..2040 as Unix seconds, and differ: maybe times."""
        low, high = self.int_range or (0, 0)
        return (self.kind == "int" and not self.is_date and PLAUSIBLE_SECONDS[0] <= low < high <= PLAUSIBLE_SECONDS[1]
                and self.distinct > 2)

    @property
    def distinct(self) -> int:
        return self.distinct_values.count

    def sorted_values(self) -> list:
        """The distinct values (only while they are few enough to be known exactly), numbers before text."""
        return sorted(self.distinct_values.values or (), key=lambda value: (isinstance(value, str), value))


@dataclasses.dataclass
class Project:
    """What init decided; `render()` says it, `write()` writes the files."""
    name: str
    folder: str
    data_root: str
    records: int
    task: str
    label: str
    classes: list[str]
    inputs: dict[str, list[str]]  # kind (float, int, string, date) -> feature names the model uses
    excluded: dict[str, str]  # feature -> why it is left out
    task_reason: str
    schema_text: str = ""
    batch_size: int = 256
    epochs: int = 10
    eval_fraction: float = IngestConfig.eval_fraction
    # the task's own settings (Task.propose_settings), setting -> (value, why): a regression's label_transform
    task_settings: dict[str, tuple[object, str]] = dataclasses.field(default_factory=dict)
    unlabelled: int = 0  # records of the latest span without a value for the label: left out by write()
    empty: list[str] = dataclasses.field(default_factory=list)  # columns with no value in any record (no schema)
    notes: list[str] = dataclasses.field(default_factory=list)  # columns that may be meant otherwise, and how
    prepared: bool = False  # the data root is prepare-data's (COLUMNS_FILE): write() records the label there
    left_out_spans: dict[str, int] = dataclasses.field(default_factory=dict)  # span folder -> records write() left out
    missing_tokens: list[str] = dataclasses.field(default_factory=list)  # prepare-data --na's, when not the default

    @property
    def training_records(self) -> int:
        """About how many records the training split holds (the eval split takes eval_fraction)."""
        return training_records(self.records, self.eval_fraction)

    @property
    def defaults(self) -> Defaults:
        """The schema-driven model's defaults for this task (models/defaults.py): what the `train` section carries."""
        return defaults_for(self.task)

    @property
    def training_steps(self) -> int:
        """The steps the Trainer's plan gives the planned epochs over the training split, on one device."""
        from components.settings import TrainConfig
        from components.trainer.plan import training_plan
        settings = TrainConfig(batch_size=self.batch_size, epochs=self.epochs)
        return training_plan(max(1, self.training_records), settings, replicas=1).total_steps

    @property
    def folds(self) -> int:
        """The defaults' folds, or 0 when the training split holds fewer than FOLDS_MIN_RECORDS records."""
        return self.defaults.folds if self.training_records >= FOLDS_MIN_RECORDS else 0

    @property
    def config_path(self) -> str:
        return os.path.join(self.folder, f"{self.name}.yaml")

    @property
    def schema_path(self) -> str:
        return os.path.join(self.folder, "schemas", self.name, "schema.pbtxt")

    def render(self) -> str:
        unlabelled = (f" ({self.unlabelled:,} more without a value for the label {self.label!r}, left out)"
                      if self.unlabelled else "")
        lines = [f"read {self.records:,} records from {self.data_root}{unlabelled}",
                 f"task: {self.task} ({self.task_reason})", f"label: {self.label}"]
        if self.classes:
            lines.append("classes: " + ", ".join(f"{i} {name!r}" for i, name in enumerate(self.classes))
                         + (f" (positive: {self.classes[1]!r})" if len(self.classes) == 2 else ""))
        for kind, names in self.inputs.items():
            if names:
                lines.append(f"{kind} features: {', '.join(names)}")
        for name, reason in self.excluded.items():
            lines.append(f"left out: {name} ({reason})")
        for name in self.empty:
            lines.append(f"left out: {name} ({EMPTY_REASON})")
        if self.unlabelled:
            spans = ", ".join(f"{os.path.basename(span)}: {count:,}" for span, count in self.left_out_spans.items())
            count = sum(self.left_out_spans.values()) or self.unlabelled
            lines.append(f"left out of training and evaluation: {count:,} record(s) without a value for the label "
                         f"{self.label!r} ({spans or 'none written'}; the spans were written again without them, the "
                         "CSV still holds them; later spans prepare-data writes into this data root leave such rows "
                         "out too, and say how many)")
        defaults = task_named(self.task).settings
        for setting, (value, reason) in self.task_settings.items():
            if value != defaults.get(setting):
                lines.append(f"{setting.replace('_', ' ')}: {value} ({reason})")
        lines += [f"note: {note}" for note in self.notes]
        kept = (f"the model trained once per fold of {self.folds} (each copy on the other folds), every epoch "
                f"scored out of fold on all {self.training_records:,} training records, the best kept"
                if self.folds else "one model, no validation (too few records)")
        lines += [f"eval split: {self.eval_fraction:.0%} of the records",
                  f"training: batch size {self.batch_size}, {self.epochs} epochs planned from the table's size "
                  f"({self.training_steps:,} steps, whatever the machine's load; fewer when the out-of-fold score "
                  f"stops improving), {kept}",
                  f"wrote {self.config_path}", f"wrote {self.schema_path}",
                  "edit either to change what was decided (README: Your own data), then run:",
                  f"  python -m pipeline run --config {os.path.relpath(self.config_path)}"]
        return "\n".join(lines)

    def config_text(self) -> str:
        """The config as YAML; every string quoted (a name such as 2024, on or 1e3 reads back as text)."""
        data_root = os.path.relpath(os.path.abspath(self.data_root), os.path.abspath(self.folder))
        excluded = "".join(f"    - {_yaml_string(name)}  # {_comment(reason)}\n" for name, reason in self.excluded.items())
        dates = self.inputs.get("date", [])
        row = self.defaults
        return (
            f"# Written by `python -m pipeline init`; edit it freely. Paths are relative to this file's folder.\n"
            f"pipeline_name: {_yaml_string(self.name)}\n"
            f"data_root: {_yaml_string(data_root)}\n"
            f"output_dir: {_yaml_string('output/' + self.name)}\n"
            f"schema_path: {_yaml_string(f'schemas/{self.name}/schema.pbtxt')}\n"
            f"task:\n"
            f"  type: {self.task}  # {_comment(self.task_reason)}\n"
            f"  label: {_yaml_string(self.label)}\n"
            + (f"  classes: {_yaml_list(self.classes)}  # label ids 0, 1, ... in this order\n" if self.classes else "")
            + ("  exclude:  # columns the model leaves out (the schema checks only their type)\n" + excluded
               if excluded else "  exclude: []\n")
            + "".join(f"  # left out, not in the schema: {_yaml_string(name)} ({EMPTY_REASON})\n"
                      for name in self.empty)
            + (f"  dates: {_yaml_list(dates)}  # int64 seconds since 1970-01-01 UTC: the model derives calendar "
               "features\n" if dates else "")
            + "".join(f"  {setting}: {value}  # {_comment(reason)}\n"
                      for setting, (value, reason) in self.task_settings.items())
            + (f"  missing_tokens: {_yaml_list(self.missing_tokens)}  # what prepare-data read as missing: the model "
               "serves them as missing too\n" if self.missing_tokens else "")
            + ("" if self.eval_fraction == IngestConfig.eval_fraction else
               f"ingest:\n  eval_fraction: {self.eval_fraction:.4f}  # about {EVAL_RECORDS:,} records for the gates\n")
            + "train:\n"
            "  model: models.tabular  # built from the schema; write a module of your own to go further\n"
            f"  batch_size: {self.batch_size}\n"
            f"  epochs: {self.epochs}  # at most: {self.training_steps:,} training steps over "
            f"{self.training_records:,} training records, planned from the table's size\n"
            f"  learning_rate: {row.learning_rate}\n"
            f"  schedule: {row.schedule}  # {SCHEDULES[row.schedule]}\n"
            f"  weight_decay: {row.weight_decay}  # AdamW, decoupled\n"
            + (f"  folds: {self.folds}  # the model's members dealt to {self.folds} copies, each trained on the other folds "
               "of the training split; every epoch scored out of fold on every training record, the best kept; the "
               "members' mean served\n"
               f"  early_stopping_patience: {row.patience(self.epochs)}  # epochs with no better out-of-fold score "
               "or loss\n"
               f"  average_intervals: {row.average_intervals}  # the best epochs' weights averaged, best first, each "
               "joining while the out-of-fold score of the average improves\n"
               f"  search: {str(row.search).lower()}  # true: the model's number encodings (coarse and fine bins) "
               "trained in turn, the better out of fold served\n"
               if self.folds else "  folds: 0  # " + ("too few records to validate on" if row.folds else "no bagging")
               + ": one model, its whole plan\n")
            + f"  time_budget_seconds: {row.time_budget_seconds:g}  # "
            + ("off: the planned epochs train whatever the machine's load; seconds of fitting here cut the plan to "
               "the epochs that fit (a ceiling; the model then depends on the machine)\n" if not row.time_budget_seconds
               else "seconds of fitting: the plan cut to the epochs that fit (the model then depends on the "
                    "machine); 0: off\n")
            + "evaluate:\n"
            '  slice_feature: ""  # a feature to report metrics per value of\n'
            "  absolute_bar: null  # a bar on the primary metric, on top of beating the trivial predictor\n")

    def write(self, force: bool = False) -> None:
        """Writes the config and the schema; InitError if either exists and `force` is off. For data prepare-data
        wrote, first leaves the records without a label out of its spans and records the label, so that later
        spans leave such rows out as they are prepared (csv_spans.leave_out_unlabelled)."""
        from pipeline.onboarding.csv_spans import leave_out_unlabelled, read_record, write_record

        for path in (self.config_path, self.schema_path):
            if os.path.exists(path) and not force:
                raise InitError(f"{path} already exists: choose another --name, or --force to overwrite it")
        if self.unlabelled:
            self.left_out_spans = leave_out_unlabelled(self.data_root, self.label)
        elif self.prepared and (record := read_record(self.data_root)) is not None:
            if record.get("label") != self.label:
                write_record(self.data_root, {**record, "label": self.label})
        os.makedirs(os.path.dirname(self.schema_path), exist_ok=True)
        with open(self.schema_path, "w", encoding="utf-8") as handle:
            handle.write(self.schema_text)
        with open(self.config_path, "w", encoding="utf-8") as handle:
            handle.write(self.config_text())


def _yaml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)  # a JSON string is a YAML string, quotes and escapes included


def _yaml_list(values: list[str]) -> str:
    return "[" + ", ".join(_yaml_string(value) for value in values) + "]"


def _comment(text: str) -> str:
    return " ".join(str(text).split())  # a comment is one line


KINDS = {"int64": "int", "float": "float", "large_binary": "string", "binary": "string"}  # decoded value types


@dataclasses.dataclass
class SpanReading:
    """What read_columns saw of the latest span: the columns of the records kept, how many were kept, a uniform
    sample of them, how many were left out for lacking the label, and every column name any record holds."""
    columns: dict[str, Column]
    records: int
    sample: list[bytes]
    unlabelled: int = 0
    names: set[str] = dataclasses.field(default_factory=set)
    span_dir: str = ""


def read_columns(data_root: str, label: str | None = None) -> SpanReading:
    """The latest span under `data_root`, read as ingestion reads it, a batch of records at a time. With a
    `label`, the records without a value for it are counted and left out of everything else (when no record
    holds the label, none is left out: check_label names the missing column). Output: the columns, the records
    kept, a uniform sample of at most STATISTICS_ROWS of them (serialized; the same for the same data), the
    records left out. InitError naming the folder, or the file and record that is no tf.Example with
    features."""
    import random
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    from components.tfrecord_ingest.tfrecord_files import iter_records
    from components.tfrecord_ingest.spans import IngestionError, list_record_files, resolve_spans
    reading = SpanReading({}, 0, [])
    chooser = random.Random(0)

    def note(batch: list[bytes], path: str, first: int) -> None:
        kept = _note_batch(reading, decoder, batch, path, first, label)
        for record in (record for record, keep in zip(batch, kept) if keep):
            reading.records += 1
            if len(reading.sample) < STATISTICS_ROWS:  # a reservoir: every record kept with the same chance
                reading.sample.append(record)
            elif (slot := chooser.randrange(reading.records)) < STATISTICS_ROWS:
                reading.sample[slot] = record

    try:
        (_, span_dir), = resolve_spans(data_root, 1)
        reading.span_dir = span_dir
        files = list_record_files(span_dir)
        decoder = ExamplesToRecordBatchDecoder()
        for path in files:
            batch: list[bytes] = []
            first = 0
            for index, record in iter_records(path):
                if not batch:
                    first = index
                batch.append(record)
                if len(batch) == DECODE_BATCH:
                    note(batch, path, first)
                    batch = []
            if batch:
                note(batch, path, first)
    except IngestionError as error:
        raise InitError(str(error)) from None
    if label is not None and label not in reading.names:
        reading.records, reading.unlabelled = reading.records + reading.unlabelled, 0
    if not reading.records and not reading.unlabelled:
        raise InitError(f"{data_root}: no records")
    for name, kind in _date_columns(data_root).items():
        if name in reading.columns and reading.columns[name].kind == "int":
            reading.columns[name].is_date = kind == "date"
    return reading


def _note_batch(reading: SpanReading, decoder, batch: list[bytes], path: str, first_index: int,
                label: str | None = None) -> np.ndarray:
    """Adds one batch of serialized records to `reading.columns`: those that hold `label` (every record when
    None, or when no record seen so far holds it). Output: which records were kept. InitError naming the file
    and record for a record that is no tf.Example, or one with no features."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from components.tfrecord_ingest.tfrecord_files import check_example
    try:
        decoded = decoder.DecodeBatch(batch)
    except RuntimeError:
        decoded = None
    if decoded is None or decoded.num_columns == 0:
        for offset, record in enumerate(batch):
            problem = check_example(record)
            if problem:
                raise InitError(f"{path}: record {first_index + offset}: {problem}")
    lengths = {name: pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
               for name, values in zip(decoded.schema.names, decoded.columns)}
    any_present = np.logical_or.reduce([length > 0 for length in lengths.values()])
    if not any_present.all():
        offset = int(np.argmin(any_present))
        raise InitError(f"{path}: record {first_index + offset}: tf.Example with no features")
    reading.names |= {name for name, length in lengths.items() if (length > 0).any()}
    keep = np.ones(decoded.num_rows, bool)
    if label is not None:
        keep = lengths[label] > 0 if label in lengths else np.zeros(decoded.num_rows, bool)
        reading.unlabelled += int((~keep).sum())
        if not keep.all():
            decoded = decoded.filter(pa.array(keep))
    for name, values in zip(decoded.schema.names, decoded.columns):
        lengths = pc.fill_null(pc.list_value_length(values), 0).to_numpy(zero_copy_only=False)
        held = lengths > 0
        kind = KINDS.get(str(values.type.value_type), "string")
        column = reading.columns.setdefault(name, Column(name, kind))
        column.present += int(held.sum())
        column.multi_valued |= bool((lengths > 1).any())
        first = pc.list_element(pc.filter(values, held), 0) if held.any() else None
        if first is not None:
            first = first.to_numpy(zero_copy_only=False)
            if kind == "string":
                first = np.array([value.decode("utf-8", "replace") for value in first], dtype=object)
            elif kind == "float":
                column.whole &= bool(np.all(np.isfinite(first) & (np.floor(first) == first)))
            elif kind == "int":
                low, high = int(first.min()), int(first.max())
                column.int_range = (min(low, column.int_range[0]), max(high, column.int_range[1])) \
                    if column.int_range else (low, high)
            column.distinct_values.add(first)
    return keep


def _date_columns(data_root: str) -> dict[str, str]:
    """Column -> type, as prepare-data --csv recorded them for the data root ({} for other data)."""
    from tfx.dsl.io import fileio

    from pipeline.onboarding.csv_spans import COLUMNS_FILE
    path = os.path.join(data_root, COLUMNS_FILE)
    if not fileio.exists(path):
        return {}
    with fileio.open(path) as handle:
        return json.loads(handle.read()).get("types", {})


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
                f"; {_seconds_advice(column)}" if column.looks_like_seconds else "") + (
                " (whole numbers written as floats)" if column.kind == "float" else "")
    return excluded


def _seconds_advice(column: Column) -> str:
    """What to do with an integer column that looks like Unix seconds."""
    import datetime

    first, last = (datetime.datetime.fromtimestamp(value, datetime.timezone.utc).date() for value in column.int_range)
    return (f"it looks like Unix seconds ({first} to {last}): init --dates {column.name} reads it as a date "
            "(calendar features)")


def curated_schema(statistics, label: str, excluded: set[str], dates: set[str],
                   sometimes_missing: set[str] = frozenset()) -> str:
    """TFDV's inferred schema, curated: environments with the label in TRAINING only and unconstrained (its
    classes and presence are the config's, checked by the Trainer); string features open to new values (no
    domain: a new category is measured as drift and reported; list the values in a string_domain to refuse
    others); dates marked as times (UNIX seconds); a drift comparator on the label and every feature the model
    uses, but dates (a date moves on by nature); a feature the model leaves out keeps its type and nothing else
    (a rare one may be absent from a whole split, and its values may change freely). `sometimes_missing`: the
    features absent from some record (the statistics may have seen a sample in which they never were): no
    feature of them is required in every record."""
    import tensorflow_data_validation as tfdv
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = tfdv.infer_schema(statistics)
    schema.default_environment[:] = ["TRAINING", "SERVING"]
    for feature in schema.feature:
        feature.ClearField("domain_info")  # inferred string domains would refuse every new category
        if feature.name == label:
            feature.not_in_environment.append("SERVING")
            feature.ClearField("presence")
        if feature.name in excluded:  # no input of the model: only its type is checked
            for constraint in ("presence", "value_count", "shape"):
                feature.ClearField(constraint)
            continue
        if feature.name in sometimes_missing:
            feature.ClearField("shape")  # a fixed shape requires the feature in every record
            feature.presence.ClearField("min_fraction")
            feature.value_count.min, feature.value_count.max = 1, 1
        if feature.name in dates:
            feature.time_domain.integer_format = schema_pb2.TimeDomain.UNIX_SECONDS
        elif feature.type == schema_pb2.BYTES:
            feature.drift_comparator.infinity_norm.threshold = CATEGORY_DRIFT
        else:
            comparator = feature.drift_comparator.jensen_shannon_divergence
            comparator.threshold = NUMBER_DRIFT
            comparator.source.type = comparator.source.QUANTILES
    del schema.string_domain[:]
    header = ("# Curated by `python -m pipeline init` from TFDV statistics of the data: presence as seen; string\n"
              "# features open to new values (add a string_domain to refuse values outside a list); dates as UNIX\n"
              "# seconds; a drift comparator on the label and every other feature the model uses (L-infinity on\n"
              "# strings, Jensen-Shannon over quantiles on numbers); the label in the TRAINING environment only,\n"
              "# its classes in the config; a left-out feature checked for its type only.\n"
              "# Edit it to tighten or loosen what the ValidationGate blocks on.\n")
    return header + text_format.MessageToString(schema, as_utf8=True)


def sample_statistics(sample: list[bytes]):
    """TFDV statistics of a sample of serialized tf.Examples, computed in memory (no Beam pipeline): what the
    schema is inferred from. What a sample cannot know (which columns are ever missing, or multi-valued) comes
    from read_columns' full pass: see curated_schema."""
    import tensorflow_data_validation as tfdv
    from tensorflow_data_validation.statistics.stats_impl import generate_statistics_in_memory
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    record_batch = ExamplesToRecordBatchDecoder().DecodeBatch(sample)
    return generate_statistics_in_memory(record_batch, tfdv.StatsOptions(use_sketch_based_topk_uniques=True))


def eval_share(records: int) -> float:
    """The share of records the eval split takes: a third up to 30,000 records, then EVAL_RECORDS of them (at
    least a tenth)."""
    if records <= 3 * EVAL_RECORDS:
        return IngestConfig.eval_fraction
    return round(max(0.1, EVAL_RECORDS / records), 4)


def training_records(records: int, eval_fraction: float) -> int:
    """About how many of `records` the training split holds when the eval split takes `eval_fraction`."""
    return int(records * (1 - eval_fraction))


def training_size(records: int, eval_fraction: float, defaults: Defaults) -> tuple[int, int]:
    """Input: the records, the eval split's share and the task's defaults. Output: (batch size, epochs at most),
    the defaults' plan for the training split."""
    return defaults.plan(training_records(records, eval_fraction))


def label_numbers(statistics, label: str) -> LabelNumbers | None:
    """A numeric label's least, median, mean and spread from the sample's TFDV statistics (None: none)."""
    feature = next((f for f in statistics.datasets[0].features if f.path.step[-1:] == [label]), None)
    if feature is None or not feature.HasField("num_stats"):
        return None
    numbers = feature.num_stats
    return LabelNumbers(numbers.min, numbers.median, numbers.mean, numbers.std_dev)


def name_from(folder_name: str) -> str:
    """A project name (components.settings.PIPELINE_NAME) from a folder's name: accents dropped, every run of other
    signs (a space, a '.') made one '-', at most 63 characters; "project" when nothing is left ("my data" ->
    "my-data", "Données 2024.v2" -> "Donnees-2024-v2")."""
    import re
    import unicodedata

    ascii_name = unicodedata.normalize("NFKD", folder_name).encode("ascii", "ignore").decode()
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", ascii_name).strip("-_")[:63].rstrip("-_")
    return name or "project"


def plan_project(folder: str, data_root: str, label: str, task: str | None = None, name: str | None = None,
                 exclude: list[str] = (), refuse_unlabelled: bool = False, dates: list[str] = ()) -> Project:
    """Reads the data and decides everything; writes nothing (Project.write does). Records without a value for
    the label are counted and left out of every decision (write() leaves them out of the spans), unless
    `refuse_unlabelled`. `dates`: integer columns of Unix seconds the model reads as dates. InitError naming
    what is wrong."""
    from pipeline.onboarding.csv_spans import read_record, read_span_note, unread_notes

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
    notes = [f"int column {c!r}: {_seconds_advice(column)}" for c, column in kept.items() if column.looks_like_seconds]
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
    statistics = sample_statistics(reading.sample)
    schema_text = curated_schema(statistics, label, set(excluded), set(inputs["date"]), sometimes_missing)
    eval_fraction = eval_share(records)
    batch, epochs = training_size(records, eval_fraction, defaults_for(task))
    task_settings = task_named(task).propose_settings(label_numbers(statistics, label))
    return Project(name, folder, data_root, records, task, label, classes, inputs, excluded, task_reason,
                   schema_text, batch, epochs, eval_fraction, task_settings, reading.unlabelled, empty, notes,
                   prepared=record is not None and not refuse_unlabelled,
                   missing_tokens=list((record or {}).get("missing_tokens", [])))
