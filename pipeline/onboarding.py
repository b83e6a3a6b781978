"""`python -m pipeline init`: a user's TFRecords (from `prepare-data --csv`, or their own) turned into a
curated schema and a config that trains the schema-driven model (models/tabular.py), with no code.

It reads the latest span under the data root as ingestion does (every record must be a tf.Example), computes
TFDV statistics, infers a schema and curates it: string domains from the values seen, presence from what is
seen, a drift comparator on the label and every feature the model uses, the label in the TRAINING environment
only (its classes are the config's, checked by the Trainer). It chooses the task from the label's values
unless told, leaves out the columns that cannot help (constant, a unique value per row, too rare, several
values per row) and says why, and writes <folder>/<name>.yaml and <folder>/schemas/<name>/schema.pbtxt. Bad
input raises InitError naming the column, file or folder, before anything is written.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import tempfile

from components.settings import IngestConfig
from components.tasks import BINARY, MULTICLASS, REGRESSION, TASK_NAMES

CLASSIFICATION_MAX_INTS = 20  # an integer label with at most this many distinct values is a class id
MOSTLY_MISSING = 0.5  # a label missing in more than this share of rows cannot be trained on
UNIQUE_ID_MIN_ROWS = 20  # below this many rows, a column of distinct values is not called an id
RARE = 0.01  # a column present in fewer than this share of records is too rare to learn from
NUMBER_DRIFT = 0.3  # Jensen-Shannon divergence over quantile histograms (as the taxi schema)
CATEGORY_DRIFT = 0.15  # L-infinity distance between the value distributions
TARGET_STEPS = 400  # training steps init aims at on small data (epochs x batches)


class InitError(ValueError):
    """The data or the arguments cannot make a project; the message names the column, file or folder."""


@dataclasses.dataclass
class Column:
    """One feature across the span's records: its kind, values and how often it is present."""
    name: str
    kind: str  # int | float | string
    values: list  # the present values (one per record where present)
    multi_valued: bool = False

    @property
    def distinct(self) -> int:
        return len(set(self.values))


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
    inputs: dict[str, list[str]]  # kind -> feature names the model uses
    excluded: dict[str, str]  # feature -> why it is left out
    task_reason: str
    schema_text: str = ""
    batch_size: int = 256
    epochs: int = 10

    @property
    def config_path(self) -> str:
        return os.path.join(self.folder, f"{self.name}.yaml")

    @property
    def schema_path(self) -> str:
        return os.path.join(self.folder, "schemas", self.name, "schema.pbtxt")

    def render(self) -> str:
        lines = [f"read {self.records:,} records from {self.data_root}",
                 f"task: {self.task} ({self.task_reason})", f"label: {self.label}"]
        if self.classes:
            lines.append("classes: " + ", ".join(f"{i} {name!r}" for i, name in enumerate(self.classes))
                         + (f" (positive: {self.classes[1]!r})" if self.task == BINARY else ""))
        for kind, names in self.inputs.items():
            if names:
                lines.append(f"{kind} features: {', '.join(names)}")
        for name, reason in self.excluded.items():
            lines.append(f"left out: {name} ({reason})")
        lines += [f"training: batch size {self.batch_size}, {self.epochs} epochs",
                  f"wrote {self.config_path}", f"wrote {self.schema_path}",
                  "edit either to change what was decided (README: Your own data), then run:",
                  f"  python -m pipeline run --config {os.path.relpath(self.config_path)}"]
        return "\n".join(lines)

    def config_text(self) -> str:
        data_root = os.path.relpath(os.path.abspath(self.data_root), os.path.abspath(self.folder))
        excluded = "".join(f"    - {name}  # {reason}\n" for name, reason in self.excluded.items())
        classes = "[" + ", ".join(_yaml_string(name) for name in self.classes) + "]"
        return (
            f"# Written by `python -m pipeline init`; edit it freely. Paths are relative to this file's folder.\n"
            f"pipeline_name: {self.name}\n"
            f"data_root: {_yaml_string(data_root)}\n"
            f"output_dir: output/{self.name}\n"
            f"schema_path: schemas/{self.name}/schema.pbtxt\n"
            f"task:\n"
            f"  type: {self.task}  # {self.task_reason}\n"
            f"  label: {_yaml_string(self.label)}\n"
            + (f"  classes: {classes}  # label ids 0, 1, ... in this order\n" if self.classes else "")
            + ("  exclude:  # columns the model leaves out (still validated by the schema)\n" + excluded
               if excluded else "  exclude: []\n")
            + "train:\n"
            "  model: models.tabular  # built from the schema; write a module of your own to go further\n"
            f"  batch_size: {self.batch_size}\n"
            f"  epochs: {self.epochs}  # about {TARGET_STEPS} training steps over {self.records:,} records\n"
            "evaluate:\n"
            '  slice_feature: ""  # a feature to report metrics per value of\n'
            "  absolute_bar: null  # a bar on the primary metric, on top of beating the trivial predictor\n")

    def write(self, force: bool = False) -> None:
        """Writes the config and the schema; InitError if either exists and `force` is off."""
        for path in (self.config_path, self.schema_path):
            if os.path.exists(path) and not force:
                raise InitError(f"{path} already exists: choose another --name, or --force to overwrite it")
        os.makedirs(os.path.dirname(self.schema_path), exist_ok=True)
        with open(self.schema_path, "w") as handle:
            handle.write(self.schema_text)
        with open(self.config_path, "w") as handle:
            handle.write(self.config_text())


def _yaml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML string, quotes and escapes included


def read_columns(data_root: str) -> tuple[dict[str, Column], int, str]:
    """The latest span under `data_root`, read as ingestion reads it. Output: (column name -> Column, records,
    a plain TFRecord copy of the records for TFDV). InitError naming the folder or file and record."""
    import tensorflow as tf

    from components.tfrecord_ingest.records import (IngestionError, check_example, iter_records, list_record_files,
                                                    resolve_spans)
    try:
        (_, span_dir), = resolve_spans(data_root, 1)
        files = list_record_files(span_dir)
        columns: dict[str, Column] = {}
        records = 0
        copy = tempfile.NamedTemporaryFile(prefix="init-", suffix=".tfrecord", delete=False)
        copy.close()
        try:
            with tf.io.TFRecordWriter(copy.name) as writer:
                for path in files:
                    for index, record in iter_records(path):
                        problem = check_example(record)
                        if problem:
                            raise InitError(f"{path}: record {index}: {problem}")
                        writer.write(record)
                        records += 1
                        _note_columns(columns, tf.train.Example.FromString(record))
        except BaseException:
            os.remove(copy.name)
            raise
    except IngestionError as error:
        raise InitError(str(error)) from None
    if not records:
        os.remove(copy.name)
        raise InitError(f"{data_root}: no records")
    return columns, records, copy.name


KINDS = {"int64_list": "int", "float_list": "float", "bytes_list": "string"}  # tf.Example value lists


def _note_columns(columns: dict[str, Column], example) -> None:
    """Adds one tf.Example's first value of each present feature to `columns` (name -> Column)."""
    for name, feature in example.features.feature.items():
        kind = feature.WhichOneof("kind")
        values = list(getattr(feature, kind).value) if kind else []
        if not values:
            continue
        column = columns.setdefault(name, Column(name, KINDS[kind], []))
        column.multi_valued |= len(values) > 1
        column.values.append(values[0].decode("utf-8", "replace") if kind == "bytes_list" else values[0])


def choose_task(label: Column, asked: str | None) -> tuple[str, list[str], str]:
    """Input: the label's column and the task asked for (None: choose). Output: (task, classes,
    why). InitError when the label cannot serve the task."""
    distinct = sorted(set(label.values), key=lambda value: (isinstance(value, str), value))
    if asked and asked not in TASK_NAMES:
        raise InitError(f"--task {asked}: one of {', '.join(TASK_NAMES)}")
    if asked == REGRESSION and label.kind == "string":
        raise InitError(f"--task regression: the label {label.name!r} holds strings ({', '.join(map(str, distinct[:3]))}"
                        f"...); choose binary or multiclass, or another label")
    if asked in (BINARY, MULTICLASS) and label.kind == "float":
        raise InitError(f"--task {asked}: the label {label.name!r} holds floats; a class label holds strings or "
                        "integers (choose regression, or another label)")
    classes = [str(value) for value in distinct]
    if asked == BINARY and len(classes) != 2:
        raise InitError(f"--task binary: the label {label.name!r} has {len(classes)} distinct values, not 2")
    if asked == MULTICLASS and len(classes) < 3:
        raise InitError(f"--task multiclass: the label {label.name!r} has {len(classes)} distinct values; a "
                        f"multi-class label has 3 or more (choose binary)")
    if asked:
        return asked, classes if asked != REGRESSION else [], "set with --task"
    if label.kind == "float" or (label.kind == "int" and len(classes) > CLASSIFICATION_MAX_INTS):
        return REGRESSION, [], f"{label.kind} label with {len(classes)} distinct values"
    task = BINARY if len(classes) == 2 else MULTICLASS
    return task, classes, f"{label.kind} label with {len(classes)} distinct values"


def check_label(columns: dict[str, Column], label: str, records: int) -> Column:
    """The label's column; InitError when it is absent, mostly or partly missing, or constant."""
    if label not in columns:
        raise InitError(f"--label {label}: no such column (columns: {', '.join(sorted(columns))})")
    column = columns[label]
    missing = records - len(column.values)
    if missing > MOSTLY_MISSING * records:
        raise InitError(f"--label {label}: missing in {missing:,} of {records:,} records: too few labeled examples")
    if missing:
        raise InitError(f"--label {label}: missing in {missing:,} of {records:,} records, which cannot be trained "
                        f"or evaluated on; leave those rows out (prepare-data --csv FILE --require {label}) and run "
                        "init again")
    if column.multi_valued:
        raise InitError(f"--label {label}: several values in one record; a label is one value per example")
    if column.distinct < 2:
        raise InitError(f"--label {label}: every record has the same value ({column.values[0]!r}): one class, "
                        "nothing to learn")
    return column


def exclusions(columns: dict[str, Column], label: str, records: int, asked: list[str]) -> dict[str, str]:
    """Feature -> why the model leaves it out: asked for, constant, too rare, a distinct value per record (an
    id), or several values per record."""
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
        elif len(column.values) < RARE * records:
            excluded[name] = f"present in {len(column.values):,} of {records:,} records: too rare to learn from"
        elif column.distinct <= 1:
            excluded[name] = "the same value wherever present"
        elif (column.kind != "float" and records >= UNIQUE_ID_MIN_ROWS
              and column.distinct == len(column.values) == records):
            excluded[name] = "a different value in every record: an id, not a feature"
    return excluded


def curated_schema(statistics, label: str, excluded: set[str]) -> str:
    """TFDV's inferred schema, curated: environments with the label in TRAINING only and unconstrained (its
    classes and presence are the config's, checked by the Trainer), a drift comparator on the label and every
    feature the model uses (an id or a timestamp the model leaves out drifts by nature); a feature the model
    leaves out keeps its type but no presence constraint (a rare one may be absent from a whole split)."""
    import tensorflow_data_validation as tfdv
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = tfdv.infer_schema(statistics)
    schema.default_environment[:] = ["TRAINING", "SERVING"]
    for feature in schema.feature:
        if feature.name == label:
            feature.not_in_environment.append("SERVING")
            feature.ClearField("presence")
            feature.ClearField("domain")
            if feature.HasField("string_domain"):
                feature.ClearField("string_domain")
        if feature.name in excluded:  # no input of the model: only its type is checked, not its presence
            feature.ClearField("presence")
            continue
        if feature.type == schema_pb2.BYTES:
            feature.drift_comparator.infinity_norm.threshold = CATEGORY_DRIFT
        else:
            comparator = feature.drift_comparator.jensen_shannon_divergence
            comparator.threshold = NUMBER_DRIFT
            comparator.source.type = comparator.source.QUANTILES
    # Inferred string domains live at the top level: the label's values are its classes, not a domain.
    kept = [domain for domain in schema.string_domain if domain.name != label]
    del schema.string_domain[:]
    schema.string_domain.extend(kept)
    header = ("# Curated by `python -m pipeline init` from TFDV statistics of the data: presence and string\n"
              "# domains as seen; a drift comparator on the label and every feature the model uses (L-infinity on\n"
              "# strings, Jensen-Shannon over quantiles on numbers); the label in the TRAINING environment only,\n"
              "# its classes in the config.\n"
              "# Edit it to tighten or loosen what the ValidationGate blocks on.\n")
    return header + text_format.MessageToString(schema)


def training_size(records: int, eval_fraction: float = IngestConfig.eval_fraction) -> tuple[int, int]:
    """(batch size, epochs) giving about TARGET_STEPS steps on small data; the config defaults on large data."""
    train_rows = max(1, int(records * (1 - eval_fraction)))
    batch = 256 if train_rows >= 20_000 else 64 if train_rows >= 2_000 else 32
    epochs = min(200, max(10, math.ceil(TARGET_STEPS * batch / train_rows)))
    return batch, epochs


def plan_project(folder: str, data_root: str, label: str, task: str | None = None, name: str | None = None,
                 exclude: list[str] = ()) -> Project:
    """Reads the data and decides everything; writes nothing. InitError naming what is wrong."""
    import tensorflow_data_validation as tfdv

    name = name or os.path.basename(os.path.abspath(data_root).rstrip("/")) or "project"
    if not name.replace("-", "").replace("_", "").isalnum():
        raise InitError(f"--name {name!r}: letters, digits, '-' and '_' only (it names files and the pipeline)")
    columns, records, copy = read_columns(data_root)
    try:
        label_column = check_label(columns, label, records)
        task, classes, task_reason = choose_task(label_column, task)
        excluded = exclusions(columns, label, records, list(exclude))
        inputs = {kind: [n for n, c in sorted(columns.items()) if c.kind == kind and n != label and n not in excluded]
                  for kind in ("float", "int", "string")}
        if not any(inputs.values()):
            reasons = ("; ".join(f"{column}: {why}" for column, why in excluded.items())
                       or "the label is the only column")
            raise InitError(f"no column is left for the model to learn from ({reasons})")
        statistics = tfdv.generate_statistics_from_tfrecord(data_location=copy)
        schema_text = curated_schema(statistics, label, set(excluded))
    finally:
        os.remove(copy)
    batch, epochs = training_size(records)
    return Project(name, folder, data_root, records, task, label, classes, inputs, excluded, task_reason,
                   schema_text, batch, epochs)
