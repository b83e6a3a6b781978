"""Typed records that steps hand each other, with the JSON they are written as: what a trained model is
(ModelFacts), what a training did (TrainingReport), each gate check and the evaluator's verdict (GateCheck,
EvaluationReport), what ModelExport made (ExportReport), and reading a ModelBlessing. The writer builds the
record and writes `to_json()`; every reader goes through `from_json`, where the default for a report written
before a field existed is decided once (LEGACY_TASK).
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field

from components.core import artifact_files, contract
from components.core.tasks import LEGACY_TASK, LabelSummary, Task, task_named

INPUT_BOUND = 0.05  # a training slower than on in-memory batches by more than this share waited for something...
HOST_BOUND = 2.0  # ...for input only when the host delivers less than this many times the model's rate


# ------------------------------------------------------------------------------------------- trained model

def model_ready_dir(serving_model_dir: str) -> str:
    """Where the model-ready Keras files and the model facts sit beside a serving SavedModel."""
    # Not os.path.normpath: it turns s3://bucket/x into s3:/bucket/x, a local relative path.
    return os.path.join(os.path.dirname(serving_model_dir.rstrip("/")), contract.MODEL_READY_DIR)


@dataclass(frozen=True)
class ModelFacts:
    """What later steps read about a trained model: its task, label and classes, the numerics it trained with,
    and the label counts of each split. `legacy`: a model exported before facts were written (nothing else
    is known of it but that it is binary)."""
    model: str
    task_name: str
    label: str
    classes: tuple[str, ...]
    precision: str
    xla: bool | None
    labels: dict[str, LabelSummary] = field(default_factory=dict)
    legacy: bool = False
    variant: str = ""  # the model module's candidate it was built as ("": a module without candidates)

    @property
    def task(self) -> Task:
        return task_named(self.task_name)

    def to_json(self) -> dict:
        return {"model": self.model, "task": self.task_name, "label": self.label, "classes": list(self.classes),
                "precision": self.precision, "xla": self.xla, "variant": self.variant,
                "labels": {split: summary.to_json() for split, summary in self.labels.items()}}

    @classmethod
    def from_json(cls, value: dict | None) -> "ModelFacts":
        if not value:
            return cls("", LEGACY_TASK, "", (), "", None, {}, legacy=True)
        return cls(value.get("model", ""), value.get("task", LEGACY_TASK), value.get("label", ""),
                   tuple(value.get("classes", ())), value.get("precision", ""), value.get("xla"),
                   {split: LabelSummary.from_json(summary) for split, summary in value.get("labels", {}).items()},
                   variant=value.get("variant", ""))


def write_model_facts(serving_model_dir: str, facts: ModelFacts) -> None:
    artifact_files.write_json(os.path.join(model_ready_dir(serving_model_dir), contract.MODEL_FACTS_FILE),
                              facts.to_json())


def read_model_facts(serving_model_dir: str) -> ModelFacts:
    """The facts of a trained model (legacy ones for a model exported before they were written)."""
    return ModelFacts.from_json(artifact_files.read_json_if_exists(
        os.path.join(model_ready_dir(serving_model_dir), contract.MODEL_FACTS_FILE)))


# ---------------------------------------------------------------------------------------------- training

@dataclass
class TrainingReport:
    """training_report.json: what one Trainer did (or, `skipped`, why the FP32 baseline was not trained)."""
    model: str = ""
    task_name: str = LEGACY_TASK
    label: str = ""
    classes: list[str] = field(default_factory=list)
    labels: dict[str, LabelSummary] = field(default_factory=dict)
    device: dict = field(default_factory=dict)
    strategy: str = ""
    strategy_reason: str = ""
    replicas: int = 1
    worker: str = ""
    precision: str = ""
    precision_reason: str = ""
    xla: bool = False
    xla_reason: str = ""
    train_examples: int = 0
    cached_in_memory: bool = False
    plan: dict = field(default_factory=dict)  # components/trainer/plan.py TrainingPlan's fields
    steps_per_execution: int = 1
    warm_start: dict = field(default_factory=dict)
    resumed_from_step: int = 0
    steps_run: int = 0
    checkpoints_written: int = 0
    examples_per_second: float = 0.0
    step_seconds: float = 0.0
    in_memory_examples_per_second: float = 0.0
    input_wait_fraction: float | None = None
    # the input pipeline alone (no model): how many examples/s the host can deliver (0.0: not measured)
    host_examples_per_second: float = 0.0
    input_cache: str = ""  # where the model-ready tensors were kept between epochs: memory | disk | "" (none)
    loss_scale_history: list[float] = field(default_factory=list)
    fit_seconds: float = 0.0
    total_seconds: float = 0.0
    # where total_seconds went (TRAINER_PHASES): preparing (the sample read, the preprocessing fitted, the labels
    # read, the input cache placed), building (the model built, compiled and probed for the device, the warm
    # start), fitting, choosing (validation passes that choose the intervals averaged) and exporting
    phase_seconds: dict[str, float] = field(default_factory=dict)
    interval_seconds: list[float] = field(default_factory=list)  # each interval fit ran, its validation included
    final_metrics: dict[str, float] = field(default_factory=dict)  # at the interval whose weights were kept
    history: dict[str, list[float]] = field(default_factory=dict)
    model_description: str = ""  # what the model module says it is (its DESCRIPTION)
    # training records that validated every interval (0: none): held out, or with folds > 1 all of them, each
    # scored by the copy of the model that never trained on it
    validation_examples: int = 0
    folds: int = 1  # the copies of the model, one per fold, whose mean is served (1: one model)
    intervals_run: int = 0
    best_interval: int = 0  # the interval whose weights were kept, best on validation (0: the last)
    # with train.average_intervals: the intervals whose weights were averaged and served, best first (the best
    # interval alone when no other one improved the average on validation)
    averaged_intervals: list[int] = field(default_factory=list)
    stopped_early: bool = False
    time_budget_seconds: float = 0.0  # train.time_budget_seconds (0: none)
    intervals_before_budget: int = 0  # the intervals planned before the time budget cut them (0: not cut)
    stopped_at_budget: bool = False  # the time budget ended training
    # the model module's candidate served (its CANDIDATES' name; "": a module without candidates; a warm start
    # continues the base model's); with train.search, what each candidate tried scored: name, validation (the best
    # interval's value), best_interval, intervals_run, fit_seconds, time_budget_seconds, resumed_from_step, in
    # the order trained
    candidate: str = ""
    candidates: list[dict] = field(default_factory=list)
    search_note: str = ""  # why train.search tried no candidate, or stopped after the first
    folds_note: str = ""  # why train.folds was not applied (a training split too small to deal into folds)
    skipped: bool = False  # the FP32 baseline, not trained: the candidate is its own baseline
    skip_reason: str = ""
    candidate_run: str = ""

    @property
    def task(self) -> Task:
        return task_named(self.task_name)

    @property
    def headroom(self) -> float | None:
        """How many times faster than this model's step rate (on in-memory batches) the host can deliver
        input: an accelerator that much faster would still be fed (None: not measured)."""
        if not self.host_examples_per_second or not self.in_memory_examples_per_second:
            return None
        return self.host_examples_per_second / self.in_memory_examples_per_second

    @property
    def input_bound(self) -> bool:
        """Training ran slower than on in-memory batches by more than INPUT_BOUND and the host's own ceiling
        says input is why: it delivers less than HOST_BOUND times the model's rate."""
        return (self.input_wait_fraction or 0.0) > INPUT_BOUND and self.headroom is not None and (
            self.headroom < HOST_BOUND)

    def input_line(self) -> str:
        """The input wait with the host's headroom; "input-bound" when the host is the bottleneck, and what
        else the time went to when training was slow although the host had room to spare."""
        wait = "n/a" if self.input_wait_fraction is None else f"{100 * self.input_wait_fraction:.1f}%"
        headroom = "" if self.headroom is None else f", host feeds {self.headroom:.1f}x the model's rate"
        if self.input_bound:
            return f"input-bound: input wait {wait}{headroom}"
        if (self.input_wait_fraction or 0.0) > INPUT_BOUND:
            cause = ("not input, the host feeds {:.1f}x the model's rate".format(self.headroom)
                     if self.headroom is not None else "the host's ceiling was not measured")
            return (f"{wait} slower than on in-memory batches ({cause}): the time went to validation passes, "
                    "callbacks, checkpoints or other load on the machine")
        return f"input wait {wait}{headroom}"

    @property
    def validation_value(self) -> float | None:
        """The validation value of the task's per-epoch metric at the interval kept (None when not measured)."""
        return self.final_metrics.get(f"val_{self.task.validation_metric}")

    def schedule_line(self) -> str:
        """How long training ran, why it ended and which interval it kept, e.g. "12 of 40 intervals (stopped
        early), best 7 on 1,024 held-out training records", "30 of 200 intervals (time budget of 120 s), best
        28 out of fold on all 6,000 training records (4 folds), served averaged with intervals 25 and 30" or
        "40 of 40 intervals, the last kept (no validation slice)"."""
        planned = self.plan.get("intervals", self.intervals_run)
        ended = (" (stopped early)" if self.stopped_early else
                 f" (time budget of {self.time_budget_seconds:g} s)" if self.stopped_at_budget else "")
        cut = (f" (cut from {self.intervals_before_budget} to fit the time budget)" if self.intervals_before_budget
               else "")
        line = f"{self.intervals_run} of {planned} intervals{cut}{ended}"
        if self.validation_examples and self.folds > 1:
            line += (f", best {self.best_interval} out of fold on all {self.validation_examples:,} training records "
                     f"({self.folds} folds)")
        elif self.validation_examples:
            line += f", best {self.best_interval} on {self.validation_examples:,} held-out training records"
        else:
            line += ", the last kept (no validation slice)"
        if self.folds_note:
            line += f" ({self.folds_note})"
        if len(self.averaged_intervals) > 1:
            line += f", served averaged with {_and(self.averaged_intervals[1:])}"
        elif self.averaged_intervals:
            line += ", served alone (no average of the next best intervals scored better)"
        if self.time_budget_seconds:
            line += f"; fitting took {self.fit_seconds:.0f} s of a {self.time_budget_seconds:g} s budget"
        return line

    def search_line(self) -> str:
        """What train.search tried and chose, in the order trained, e.g. "16 bins chosen out of fold: 16 bins
        0.8272 (best 36 of 49), 48 bins 0.8213 (best 39 of 52)", and why it stopped short or tried none ("":
        no search)."""
        if len(self.candidates) < 2:
            return self.search_note
        where = "out of fold" if self.folds > 1 else "on validation"
        tried = ", ".join(f"{c['name']} {'n/a' if c['validation'] is None else format(c['validation'], '.4f')} "
                          f"(best {c['best_interval']} of {c['intervals_run']})" for c in self.candidates)
        return f"{self.candidate} chosen {where}: {tried}" + (f"; {self.search_note}" if self.search_note else "")

    def facts(self) -> ModelFacts:
        return ModelFacts(self.model, self.task_name, self.label, tuple(self.classes), self.precision, self.xla,
                          dict(self.labels), variant=self.candidate)

    def to_json(self) -> dict:
        if self.skipped:
            return {"skipped": True, "reason": self.skip_reason, "candidate_run": self.candidate_run}
        value = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                 if f.name not in ("task_name", "labels", "plan", "skipped", "skip_reason", "candidate_run")}
        return {"task": self.task_name, **value, **self.plan,
                "labels": {split: summary.to_json() for split, summary in self.labels.items()}}

    @classmethod
    def from_json(cls, value: dict | None) -> "TrainingReport | None":
        """The report (None for {} or None: no report); unknown keys are kept out, missing ones default."""
        if not value:
            return None
        if value.get("skipped"):
            return cls(skipped=True, skip_reason=value.get("reason", ""), candidate_run=value.get("candidate_run", ""))
        names = {f.name for f in dataclasses.fields(cls)}
        known = {key: item for key, item in value.items() if key in names and key not in ("labels", "plan")}
        return cls(**known, task_name=value.get("task", LEGACY_TASK),
                   labels={split: LabelSummary.from_json(s) for split, s in value.get("labels", {}).items()},
                   plan={key: item for key, item in value.items() if key not in names and key != "task"})


# -------------------------------------------------------------------------------------------- evaluation

@dataclass
class GateCheck:
    gate: str  # absolute_bar | beats_trivial | fp32_parity | vs_production
    model: str
    metric: str
    value: float | None  # the model's metric (None: not measured, the gate does not apply)
    reference: float | None  # the bar, or the reference model's metric
    reference_model: str  # bar | trivial | fp32_baseline | production
    improvement: float | None  # how much better than the reference, in the metric's units (negative: worse)
    interval: list[float] | None  # the confidence interval of `improvement` (None for the bar)
    tolerance: float  # how much worse than the reference the model may be, in the metric's units
    examples: int  # eval examples compared
    passed: bool
    note: str = ""  # why a gate does not apply, or that the eval split is too small to resolve its tolerance

    def describe(self) -> str:
        """One line: the values, the difference with its interval, the tolerance, the result."""
        result = "pass" if self.passed else "FAIL"
        if self.value is None:
            return f"{self.gate}: {self.model} {self.metric} {self.note} ({result})"
        if self.interval is None:
            return (f"{self.gate}: {self.model} {self.metric} {format_number(self.value)} vs bar "
                    f"{format_number(self.reference)} ({result})")
        low, high = self.interval
        line = (f"{self.gate}: {self.model} {self.metric} {format_number(self.value)} vs {self.reference_model} "
                f"{format_number(self.reference)}: {'better' if self.improvement >= 0 else 'worse'} by "
                f"{abs(self.improvement):.4f}, interval [{low:+.4f}, {high:+.4f}], tolerance {self.tolerance:.4g}, "
                f"{self.examples:,} examples ({result})")
        return line + (f"; {self.note}" if self.note else "")


def _and(intervals: list[int]) -> str:
    """e.g. "interval 5", "intervals 5 and 9", "intervals 5, 9 and 12"."""
    names = [str(i) for i in intervals]
    listed = names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
    return f"interval{'s' if len(names) > 1 else ''} {listed}"


def format_number(value: float | None) -> str:
    """4 decimals, counts as integers, undefined metrics (None) as n/a."""
    if value is None:
        return "n/a"
    return f"{int(value):,}" if float(value).is_integer() and abs(value) > 1 else f"{value:.4f}"


@dataclass
class EvaluationReport:
    """precision_report.json: the evaluator's verdict, every gate check, and the metrics of each model per
    slice ({slice: {model role: {metric: value}}})."""
    blessed: bool
    chosen_model: str | None  # candidate, fp32_baseline, or None (nothing blessed)
    summary: str
    checks: list[GateCheck] = field(default_factory=list)
    task_name: str = LEGACY_TASK
    primary_metric: str = ""
    classes: list[str] = field(default_factory=list)
    eval_examples: int = 0
    trivial_predictor: str = ""
    fp32_parity: str = ""
    notes: list[str] = field(default_factory=list)
    settings: dict = field(default_factory=dict)
    models: dict[str, dict] = field(default_factory=dict)
    metrics: dict[str, dict[str, dict[str, float | None]]] = field(default_factory=dict)
    confusion_matrix: dict[str, list[list[int]]] = field(default_factory=dict)

    @property
    def task(self) -> Task:
        return task_named(self.task_name)

    @property
    def primary(self):
        """The Metric the gates decided on."""
        return self.task.metric(self.primary_metric or self.task.primary.name)

    def overall(self, model: str) -> dict[str, float | None]:
        return dict(self.metrics.get(contract.OVERALL, {}).get(model, {}))

    def to_json(self) -> dict:
        value = dataclasses.asdict(self)
        value["task"] = value.pop("task_name")
        if not self.confusion_matrix:
            value.pop("confusion_matrix")
        return value

    @classmethod
    def from_json(cls, value: dict | None) -> "EvaluationReport | None":
        if not value:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        known = {key: item for key, item in value.items() if key in names and key != "checks"}
        return cls(**known, task_name=value.get("task", LEGACY_TASK),
                   checks=[GateCheck(**check) for check in value.get("checks", [])])


# ------------------------------------------------------------------------------------------------- export

@dataclass
class ExportReport:
    """export_report.json: the SavedModel's scores and one entry per TFLite variant (its metrics, size,
    latency, output differences with their paired intervals, verdict), or why nothing was exported. The
    SavedModel and every variant are scored on the same `scored_examples` of the eval split's `eval_examples`
    records (0: a report from before sampling, scored on all of them)."""
    exported: bool
    reason: str = ""
    task_name: str = LEGACY_TASK
    primary_metric: str = ""
    classes: list[str] = field(default_factory=list)
    eval_examples: int = 0  # records in the eval split
    scored_examples: int = 0  # of them, the records scored (0: every one, a report written before sampling)
    scoring_sample: str = ""  # how they were chosen
    confidence: float = 0.0  # of each variant's "drop_interval" and "mean_abs_diff_interval" (0.0: none given)
    savedmodel: dict[str, float] = field(default_factory=dict)
    inputs: str = ""
    device_inputs: list[dict] = field(default_factory=list)
    device_output: str = ""
    compared_with: str = ""
    runtime: str = ""
    max_tflite_drop: float = 0.0
    variants: dict[str, dict] = field(default_factory=dict)
    failed_variants: dict[str, str] = field(default_factory=dict)
    recommended: str | None = None
    source_model: dict = field(default_factory=dict)

    @property
    def task(self) -> Task:
        return task_named(self.task_name)

    @property
    def scored(self) -> int:
        """How many eval records the SavedModel and the variants were scored on."""
        return self.scored_examples or self.eval_examples

    def to_json(self) -> dict:
        if not self.exported:
            return {"exported": False, "reason": self.reason}
        value = dataclasses.asdict(self)
        value["task"] = value.pop("task_name")
        value.pop("reason")
        return value

    @classmethod
    def from_json(cls, value: dict | None) -> "ExportReport | None":
        if not value:
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{key: item for key, item in value.items() if key in names},
                   task_name=value.get("task", LEGACY_TASK))


# ----------------------------------------------------------------------------------------------- blessing

def is_blessed(blessing) -> bool:
    """Whether a ModelBlessing artifact says blessed (TFX's property, as TFX's Evaluator writes it)."""
    from tfx.components.evaluator import constants

    return blessing.get_int_custom_property(constants.ARTIFACT_PROPERTY_BLESSED_KEY) == constants.BLESSED_VALUE


def blessed_model(blessing, models: list):
    """The Model artifact among `models` that the blessing blesses, matched by URI: unique on every
    orchestrator, where the id is MLMD's integer locally but a resource name on Kubeflow (TFX's entrypoint
    rewrites it). ValueError when none is."""
    from tfx.components.evaluator import constants

    model_uri = blessing.get_string_custom_property(constants.ARTIFACT_PROPERTY_CURRENT_MODEL_URI_KEY)
    for model in models:
        if model.uri == model_uri:
            return model
    raise ValueError(f"the blessing at {blessing.uri} refers to the model at {model_uri}, which is not among the "
                     f"inputs ({', '.join(model.uri for model in models)})")
