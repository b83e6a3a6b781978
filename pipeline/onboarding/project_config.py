"""What `init` decided, as a Project: the lines it prints (`render`), the config it writes (`config_text`: the
`task` section from the data, the `train` section from the task's row of models/defaults.py and the plan from
the table's size, the eval split's share) and the files (`write`: the config and the curated schema, and for
data prepare-data wrote the label recorded and unlabelled records left out of the spans).
"""
from __future__ import annotations

import dataclasses
import json
import os

from components.settings import FOLDS_MIN_RECORDS, IngestConfig
from components.core.tasks import task_named
from models.defaults import Defaults, defaults_for
from pipeline.onboarding.span_columns import InitError

EMPTY_REASON = ("no value in any record, so not in the schema; a later span that fills it is left out of the "
                "model until init is run again")
SCHEDULES = {"cosine": "after the warmup, down to 0 at the last step", "constant": "after the warmup"}
# The eval split the gates score: a third of a table's records up to 30,000 of them, EVAL_RECORDS beyond (at
# least a tenth): enough to resolve the gates' tolerances, and the rest trains.
EVAL_RECORDS = 10_000


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
        spans leave such rows out as they are prepared (unlabelled_rows.leave_out_unlabelled)."""
        from pipeline.onboarding.column_record import read_record, write_record
        from pipeline.onboarding.unlabelled_rows import leave_out_unlabelled

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


def name_from(folder_name: str) -> str:
    """A project name (components.settings.PIPELINE_NAME) from a folder's name: accents dropped, every run of other
    signs (a space, a '.') made one '-', at most 63 characters; "project" when nothing is left ("my data" ->
    "my-data", "Données 2024.v2" -> "Donnees-2024-v2")."""
    import re
    import unicodedata

    ascii_name = unicodedata.normalize("NFKD", folder_name).encode("ascii", "ignore").decode()
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", ascii_name).strip("-_")[:63].rstrip("-_")
    return name or "project"
