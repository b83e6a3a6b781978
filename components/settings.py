"""The pipeline's typed config, every default and every value check in one place: what each section of the
YAML file may set.

`pipeline.config.load_config` reads YAML overrides into these dataclasses and checks each value against the
Check declared with its field: `setting(default, POSITIVE)`; `setting(default)` says that any value of the
field's type suits, so no field goes unchecked by omission (a test holds every field to `setting`). The
comment above or beside each field is its documentation (the docs' configuration reference is generated
from this file). They live here, below the pipeline, because the components take their own sections as
typed settings (the Trainer a TrainConfig, the evaluator an EvaluateConfig, ModelExport an ExportConfig),
components never import the pipeline, and this module imports no component package.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import typing
from dataclasses import dataclass, field

from components.core.contract import POLICIES, STRATEGIES, TFLITE_VARIANTS
from components.core.missing_values import MISSING_TOKENS
from components.core.tasks import TASK_NAMES, TASK_PATH, TASKS, PredictionTarget, RegressionTask

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHECK = "check"  # the field metadata key holding the field's Check (None: any value of its type)


class Check(typing.NamedTuple):
    """What a value must satisfy beyond its type; `message` completes "<key>: ..., got <value>"."""
    holds: typing.Callable[[typing.Any], bool]
    message: str


def setting(default: typing.Any, check: Check | None = None) -> typing.Any:
    """Input: a config field's default and the Check its value must pass (None: any value of the field's
    type). Output: the dataclass field (a list default copied per instance)."""
    if default is REQUIRED:  # no default: "" until the config gives it, and the config loader insists
        return field(default="", metadata={CHECK: check, REQUIRED: True})
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={CHECK: check})
    return field(default=default, metadata={CHECK: check})


def section_from_dict(section: type, values: dict, source: str, kind: str):
    """Input: a config section's class, its fields as a dict (dataclasses.asdict of one, e.g. after a trip
    through an executor's JSON or custom_config), where the dict came from and what kind of settings they
    are. Output: the section. Raises ValueError naming every key that is no field of the section."""
    unknown = sorted(set(values) - {f.name for f in dataclasses.fields(section)})
    if unknown:
        raise ValueError(f"{source}: unknown {kind} setting(s) {', '.join(unknown)} "
                         f"(not fields of {section.__name__})")
    return section(**values)


def _beam_flags(args: list[str]) -> bool:
    # Beam drops, with only a warning, any argument that is not a flag or the value of the flag before it.
    value_may_follow = False
    for arg in args:
        if arg.startswith("--"):
            value_may_follow = "=" not in arg
        elif value_may_follow:
            value_may_follow = False
        else:
            return False
    return True


NOT_EMPTY = Check(lambda v: bool(v.strip()), "must not be empty")
# A pipeline's name: MLMD names each step's context "<pipeline>.<step>", TFX takes at most 63 characters, and the
# Kubeflow compile lowercase letters, digits and '-' (checked there: pipeline.config.check_kubeflow_name)
PIPELINE_NAME_PATTERN = r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}"
PIPELINE_NAME = Check(lambda v: re.fullmatch(PIPELINE_NAME_PATTERN, v) is not None,
                      "must be 1 to 63 letters, digits, '-' or '_', the first a letter or digit (no '.', space or "
                      "other sign: it names the run's MLMD contexts, each step's after a '.', and the compiled "
                      "pipeline)")
REQUIRED = "required"  # the field metadata key of a setting with no default: the config must give it
POSITIVE = Check(lambda v: v > 0, "must be positive")
NOT_NEGATIVE = Check(lambda v: v >= 0, "must not be negative")
OPTIONAL_NOT_NEGATIVE = Check(lambda v: v is None or v >= 0, "must not be negative (or null: none)")
AT_LEAST_1 = Check(lambda v: v >= 1, "must be at least 1")
STRICTLY_BETWEEN_0_AND_1 = Check(lambda v: 0 < v < 1, "must be between 0 and 1 (exclusive)")
STRATEGY = Check(lambda v: v in ("auto",) + STRATEGIES, "must be auto or one of " + ", ".join(STRATEGIES))
PRECISION = Check(lambda v: v in ("auto",) + POLICIES, "must be auto or one of " + ", ".join(POLICIES))
AUTO_ON_OFF = Check(lambda v: v in ("auto", "on", "off"), "must be auto, on or off")
SCHEDULE = Check(lambda v: v in ("constant", "cosine"), "must be constant or cosine")
LABEL_TRANSFORM = Check(lambda v: v in RegressionTask.LABEL_TRANSFORMS,
                        "must be " + " or ".join(RegressionTask.LABEL_TRANSFORMS))
BELOW_HALF = Check(lambda v: 0 <= v < 0.5, "must be at least 0 and below 0.5")
SEED = Check(lambda v: 0 <= v < 2**32, "must be between 0 and 2**32 - 1")  # NumPy's seed range
TFLITE_VARIANT_LIST = Check(lambda v: v and set(v) <= set(TFLITE_VARIANTS),
                            "must list one or more of " + ", ".join(TFLITE_VARIANTS))
BEAM_FLAGS = Check(_beam_flags, "must be Beam flags (--name=value, or --name then its value)")
TASK_OR_EMPTY = Check(lambda v: v == "" or v in TASKS or TASK_PATH.fullmatch(v) is not None,
                      "must be " + ", ".join(TASK_NAMES) + ', a task of your own as module:Class, or "" (the model '
                      "module declares it)")


@dataclass
class TaskConfig:
    """What the model predicts. A hand-written model module declares it itself (TASK, CLASSES, LABEL_KEY):
    these fields then stay empty or agree with it. The schema-driven model (models.tabular, what `init`
    configures) takes them from here."""
    # binary | multiclass | regression, or a task of your own as module:Class (a subclass of
    # components.core.tasks.Task, importable like a model module; staged with the pipeline for Kubeflow)
    type: str = setting("", TASK_OR_EMPTY)
    label: str = setting("")  # the label feature
    classes: list[str] = setting([])  # classification: the class names, label id 0, 1, ... in this order
    exclude: list[str] = setting([])  # features the schema-driven model leaves out
    # int64 features holding a date or date-time as seconds since 1970-01-01 UTC (what prepare-data --csv writes
    # for a date column), 0001-01-01 to 9999-12-31: the schema-driven model derives year, month, day, weekday, day
    # of year and hour, alike in the SavedModel and the device model
    dates: list[str] = setting([])
    # regression, schema-driven model: "log" trains and predicts log(1 + label) (a label >= 0 with a long right
    # tail, such as a price), "none" the label as it is; `init` chooses from the label's statistics
    label_transform: str = setting("none", LABEL_TRANSFORM)
    # string cells that mean a missing value (what prepare-data read as missing): the schema-driven model's
    # served string inputs read them, lower case, UPPER case or Capitalized, as missing too
    missing_tokens: list[str] = setting(list(MISSING_TOKENS))


@dataclass
class IngestConfig:
    # share of records hashed into the eval split (TFX's default 2:1)
    eval_fraction: float = setting(1 / 3, STRICTLY_BETWEEN_0_AND_1)
    # how many of the latest span-N folders one run reads together (1 = the latest)
    span_window: int = setting(1, AT_LEAST_1)


# A training split of fewer records than this trains one model, whatever train.folds says (init writes folds: 0
# then; the Trainer applies it too, and says so): too few to deal into folds and validate out of fold
FOLDS_MIN_RECORDS = 40


@dataclass
class TrainConfig:
    """How the model trains. The defaults below are what a config that leaves a field out gets (a hand-written
    model module's, say). The schema-driven model's own are one row per kind of task in models/defaults.py,
    which `init` writes into the config it makes: the learning rate, weight decay, schedule, folds, early
    stopping, averaged intervals, and the epochs and batch size of a plan from the table's size."""
    # a module defining components/core/model_module.py's ModelModule; the default, the schema-driven model,
    # is built from the curated schema and the `task` section. A module whose source defines no part of the
    # contract (`os`, a script) is refused without being imported
    model: str = setting("models.tabular", NOT_EMPTY)
    batch_size: int = setting(256, POSITIVE)  # per replica; the global batch is this times the replicas in sync
    epochs: int = setting(10, POSITIVE)  # passes over the training data
    # for one replica's batch; scaled linearly with replicas x accumulation
    learning_rate: float = setting(0.003, POSITIVE)
    warmup_steps: int = setting(20, NOT_NEGATIVE)  # linear learning-rate warmup from 0
    # after the warmup: "constant", or "cosine" (down to 0 at the last step, half a cosine wave)
    schedule: str = setting("constant", SCHEDULE)
    weight_decay: float = setting(0.0, NOT_NEGATIVE)  # > 0: AdamW with this decoupled weight decay (else Adam)
    # share of the training split's records held out (by a hash of each record) to validate every interval;
    # the weights of the best interval on the task's primary metric are kept; 0 = none (the eval split, which
    # the gates score, is never read by training)
    validation_share: float = setting(0.0, BELOW_HALF)
    # k-fold bagging, > 1: the training split's records are dealt into this many folds (by a keyed hash of each
    # record) and the model's members into as many copies, each with weights of its own, in one packed network
    # (a model module that builds one network: built once per fold); copy g trains on the records outside fold g,
    # every interval is validated out of fold on the whole training split (each record scored by the copy that
    # never trained on it), the best interval's weights are kept, and the model served is the members' mean.
    # 0 or 1: one copy. Not together with validation_share
    folds: int = setting(0, NOT_NEGATIVE)
    # with validation_share or folds: train each of the model module's CANDIDATES in turn (models.tabular: its
    # number encodings), each with the time budget left shared among those still to train, and serve the one
    # best on validation (out of fold with folds); the first alone, with the whole budget, when its share would
    # cut its plan. Without a time budget (or on several workers, which do not apply it) every candidate trains
    # its whole plan. No search when warm-starting (the served model's variant continues)
    search: bool = setting(False)
    # with validation_share or folds: stop after this many intervals in which neither the validation score nor
    # the validation loss improved (the best score's interval is kept either way); 0 = never stop early
    early_stopping_patience: int = setting(0, NOT_NEGATIVE)
    # with validation_share or folds, > 1: the weights of up to this many intervals best on validation are kept
    # and averaged, best first, each joining the average only when the average then scores better on
    # validation; the average is served (one validation pass per interval tried, after fitting). 1: the best
    # interval's weights alone
    average_intervals: int = setting(1, AT_LEAST_1)
    # seconds of fitting: the model is timed before it trains and the plan cut to the intervals that fit (the
    # cosine then ends with the last of them); training still ends with the interval after which another one
    # would pass the budget (the best interval's weights kept, as when it stops early); 0 = no budget. A faster
    # device runs more intervals in the same budget, up to `epochs`. Not applied with several workers
    time_budget_seconds: float = setting(0.0, NOT_NEGATIVE)
    gradient_accumulation_steps: int = setting(1, AT_LEAST_1)  # >1: apply gradients once per this many batches
    # records the input pipeline shuffles among (from the in-memory cache: each pass wholly shuffled); 0 = no shuffle
    shuffle_buffer: int = setting(10_000, NOT_NEGATIVE)
    # each split is parsed and preprocessed once and its model-ready tensors cached for every later pass: in
    # memory while their estimated size fits in this many MB (the training split first), else in a local disk
    # cache ($TMPDIR) deleted when training ends; 0 = auto: a quarter of the machine's memory (or of the
    # container's memory limit when lower)
    cache_max_mb: int = setting(0, NOT_NEGATIVE)
    # train steps per call into the device (less host overhead per step)
    steps_per_execution: int = setting(10, AT_LEAST_1)
    strategy: str = setting("auto", STRATEGY)  # auto | one_device | mirrored | multi_worker_mirrored | tpu
    precision: str = setting("auto", PRECISION)  # auto | float32 | mixed_float16 | mixed_bfloat16
    # auto (GPUs and TPUs: timed with and without, when the model compiles; CPUs: off) | on | off
    xla: str = setting("auto", AUTO_ON_OFF)
    # with xla auto: XLA is tried only when training is at least this many seconds of compute (timed without
    # XLA), long enough for its compile to pay back; 0 = always tried where XLA may gain
    xla_min_training_seconds: float = setting(60.0, NOT_NEGATIVE)
    gpu_memory_growth: bool = setting(True)  # allocate GPU memory as needed rather than all at start
    gpu_memory_limit_mb: int = setting(0, NOT_NEGATIVE)  # per GPU; 0 = no limit
    # training interval, a checkpoint at its end; 0 = one pass over the data
    checkpoint_every_steps: int = setting(0, NOT_NEGATIVE)
    # skip an interval's checkpoint until this long after the last one
    checkpoint_min_seconds: float = setting(30.0, NOT_NEGATIVE)
    # steps on in-memory batches (at most components/trainer/probing.py PROBE_SECONDS) that time the model for the
    # input wait, the time budget and the XLA choice; 0 = skip
    input_probe_steps: int = setting(50, NOT_NEGATIVE)
    profile_from_step: int = setting(10, AT_LEAST_1)  # TensorBoard profiler trace window start...
    profile_steps: int = setting(0, NOT_NEGATIVE)  # ...and length in steps; 0 = no trace
    seed: int = setting(0, SEED)  # weights init and shuffle order
    # start from the latest blessed model (its preprocessing and weights) when there is one
    warm_start: bool = setting(True)


@dataclass
class EvaluateConfig:
    """The gates decide on the task's primary metric (binary AUC, multiclass accuracy, regression MAE), in
    its direction; tolerances are in the metric's units, or a fraction of the reference's value for
    regression (components/precision_evaluator/gates.py)."""
    slice_feature: str = setting("")  # metrics are also reported per value of this feature ("" = none)
    # the primary metric must reach this (AUC and accuracy at least, MAE at most; null = no bar): on top of
    # beating the trivial predictor, which every blessed model must. A bar no model can meet (an AUC or accuracy
    # above 1) is refused at load
    absolute_bar: float | None = setting(None, OPTIONAL_NOT_NEGATIVE)
    # how much worse than the FP32 baseline the candidate may be before the data refuse it
    max_drop_vs_fp32: float = setting(0.005, NOT_NEGATIVE)
    # how much worse than the production model (the latest blessed one) a model may be
    max_drop_vs_production: float = setting(0.01, NOT_NEGATIVE)
    confidence: float = setting(0.95, STRICTLY_BETWEEN_0_AND_1)  # of the paired intervals every comparison uses
    # other metrics of the task that fp32_parity and vs_production also gate on, with the same tolerances
    # (e.g. [binary_accuracy])
    gate_metrics: list[str] = setting([])
    fallback_to_fp32: bool = setting(True)  # candidate fails FP32 parity, baseline passes the rest: bless the baseline


@dataclass
class ExportConfig:
    tflite_variants: list[str] = setting(list(TFLITE_VARIANTS), TFLITE_VARIANT_LIST)  # converted and evaluated
    # a variant whose primary metric is worse than the SavedModel's by more than this is rejected (the metric's
    # units; a fraction of the SavedModel's MAE for regression)
    max_tflite_drop: float = setting(0.01, NOT_NEGATIVE)
    representative_examples: int = setting(300, AT_LEAST_1)  # training examples that calibrate full-int8 quantization
    latency_examples: int = setting(300, AT_LEAST_1)  # the scoring's first invocations timed per variant (median)
    # eval records each TFLite variant and the SavedModel it is compared with are scored on, evenly spread over
    # the eval split (record floor(j x split size / this), j = 0, 1, ...); 0 = every record. With 20,000, the
    # 95% interval of a difference in a per-example metric in [0, 1] (accuracy) is within +/-0.0098, inside the
    # default max_tflite_drop, even were the variant's per-example results independent of the SavedModel's
    # (1.96 x sqrt(0.5 / 20,000)); paired on the same examples it is far narrower. The export report gives
    # every variant's interval and says when one holds its tolerance
    scoring_examples: int = setting(20_000, NOT_NEGATIVE)
    # of the paired intervals the export report gives each variant's drop and mean output difference
    confidence: float = setting(0.95, STRICTLY_BETWEEN_0_AND_1)


@dataclass
class StepResources:
    cpu: float = setting(2.0, POSITIVE)  # vCPUs, requested and limited
    memory_gb: float = setting(8.0, POSITIVE)  # GB, requested and limited
    accelerator: str = setting("")  # e.g. NVIDIA_TESLA_T4 (Vertex AI) or nvidia.com/gpu (Kubeflow); "" = none
    accelerator_count: int = setting(0, NOT_NEGATIVE)  # accelerators per pod (0 = none)


@dataclass
class ResourcesConfig:
    """Per-step resources in the Kubeflow compile (the local runner uses this machine as it is)."""
    data: StepResources = field(default_factory=StepResources)  # ingest, statistics, validation, push
    training: StepResources = field(default_factory=lambda: StepResources(  # both Trainers
        cpu=8.0, memory_gb=32.0, accelerator="NVIDIA_TESLA_T4", accelerator_count=1))
    evaluation: StepResources = field(default_factory=lambda: StepResources(  # TFMA and the TFLite ladder
        cpu=4.0, memory_gb=16.0))
    # Multi-worker training (Kubeflow compile only): >1 runs each Trainer as a Vertex AI CustomJob of this many
    # replicas (a chief and workers, each with `training`'s accelerators on `training_machine_type`); Vertex
    # sets TF_CONFIG on each, and the Trainer picks MultiWorkerMirroredStrategy from it.
    training_workers: int = setting(1, AT_LEAST_1)
    training_machine_type: str = setting("n1-standard-8", NOT_EMPTY)  # each replica's Vertex AI machine type
    vertex_project: str = setting("")  # required when training_workers > 1 (the Kubeflow compile says so)
    vertex_region: str = setting("us-central1", NOT_EMPTY)  # where the Vertex AI CustomJob runs


@dataclass
class PipelineConfig:
    pipeline_name: str = setting(REQUIRED, PIPELINE_NAME)  # names the run's MLMD contexts and the compiled pipeline
    # TFRecord files, or span-N/ folders of them (see ingest.span_window)
    data_root: str = setting(REQUIRED, NOT_EMPTY)
    # local: MLMD (SQLite), the run lock and reports; by default artifacts and serving too
    output_dir: str = setting("output", NOT_EMPTY)
    # pipeline root, where artifacts live: a path or a URI (gs://, s3://); default <output_dir>/pipeline
    artifact_root: str = setting("")
    serving_dir: str = setting("")  # where blessed models are pushed, a path or a URI; default <output_dir>/serving
    # the curated TFDV schema (a text proto) the data is validated against and the model may be built from
    schema_path: str = setting(REQUIRED, NOT_EMPTY)
    enable_cache: bool = setting(True)  # reuse a step's outputs when its inputs, settings and code are unchanged
    # flags for every Beam step (the runner, its options; no credential: those come from the environment)
    beam_pipeline_args: list[str] = setting(["--direct_running_mode=in_memory"], BEAM_FLAGS)
    task: TaskConfig = field(default_factory=TaskConfig)
    ingest: IngestConfig = field(default_factory=IngestConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)

    @property
    def pipeline_root(self) -> str:
        return self.artifact_root or os.path.join(self.output_dir, "pipeline")

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.output_dir, "metadata.sqlite")

    @property
    def push_dir(self) -> str:
        return self.serving_dir or os.path.join(self.output_dir, "serving")


@dataclass(frozen=True)
class StepSettings:
    """What one step of the DAG is told, as one record: its own config section (a TrainConfig, EvaluateConfig or
    ExportConfig), the config's `task` section, the model module's name and what the models predict. Built by the
    wiring, carried as the step's JSON parameter (to_json) and read back by the step (from_json): the one road
    settings take into every step."""
    section: typing.Any
    task: TaskConfig
    model: str
    target: PredictionTarget

    def to_json(self) -> str:
        return json.dumps({"section": dataclasses.asdict(self.section), "task": dataclasses.asdict(self.task),
                           "model": self.model, "target": self.target.to_json()}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, section: type, step: str) -> "StepSettings":
        """Input: to_json's output, the class of the step's config section and the step's name (for errors).
        Output: the record. Raises ValueError naming the step and any key that is no field of a section."""
        values = json.loads(text)
        return cls(section_from_dict(section, values["section"], f"{step} settings", section.__name__),
                   section_from_dict(TaskConfig, values["task"], f"{step} settings", "task"),
                   values["model"], PredictionTarget.from_json(values["target"]))
