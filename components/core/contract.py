"""The names the pipeline's pieces share, defined once: channel keys, execution parameters, artifact
properties, report files, SavedModel signatures, and the choices of strategy, precision and TFLite variant
that both the config's checks and the components know. Components, the pipeline wiring, the run report and
the MLMD readers import them from here; no component imports another component's executor to reach one.

Keys that TFX's own components use (examples, schema, model, ...) are spelled as in TFX's
`tfx/types/standard_component_specs.py` (a test checks that they agree). Plain strings only: importing
this module imports nothing else.
"""

# ------------------------------------------------------------------ channel keys (component inputs and outputs)
EXAMPLES = "examples"  # Examples: TFRecordIngest's output; StatisticsGen, Trainer, evaluator and export read it
SCHEMA = "schema"  # Schema: ImportSchemaGen's output
STATISTICS = "statistics"  # ExampleStatistics: StatisticsGen's output
ANOMALIES = "anomalies"  # ExampleAnomalies: ExampleValidator's output
MODEL = "model"  # Model: a Trainer's output; the candidate in the evaluator and ModelExport; a resolver's
MODEL_RUN = "model_run"  # ModelRun: a Trainer's logs and training_report.json
CANDIDATE_RUN = "candidate_run"  # FP32 baseline Trainer input (and its custom_config key): the candidate's ModelRun
BASELINE_MODEL = "baseline_model"  # the FP32 baseline trainer's model
PRODUCTION_MODEL = "production_model"  # the latest blessed model (optional evaluator input)
EVALUATION = "evaluation"  # ModelEvaluation: TFMA's output plus precision_report.json
BLESSING = "blessing"  # ModelBlessing: the evaluator's verdict
MODEL_BLESSING = "model_blessing"  # the blessed-model resolver's blessing channel
VALIDATION_REPORT = "report"  # ValidationReport: the ValidationGate's output
PREVIOUS_VALIDATION_REPORT = "previous_report"  # the previous span's ValidationReport (drift reference)
EXPORTED_MODEL = "exported_model"  # ExportedModel: SavedModel plus TFLite variants
PUSHED_MODEL = "pushed_model"  # PushedModel: the AtomicPusher's output

# ------------------------------------------------------------------------------------- execution parameters
INPUT_BASE = "input_base"
EVAL_FRACTION = "eval_fraction"
SPAN_WINDOW = "span_window"
SPLIT_LEAVES_OUT = "split_leaves_out"  # the features the eval split's hash leaves out (the label's), a JSON list
INPUT_FINGERPRINT = "input_fingerprint"
SETTINGS = "settings"  # each step's StepSettings (components/settings.py) as JSON: a parameter, or a custom_config key
PUSH_DIR = "push_dir"
CHECKPOINT_ROOT = "checkpoint_root"  # Trainer custom_config: where interrupted trainings keep checkpoints
CODE_FINGERPRINT = "code_fingerprint"  # Trainer custom_config (and custom steps' executor flag): cache key only

# ------------------------------------------------------------------------ artifact custom properties
SPANS_PROPERTY = "spans"  # Examples (and artifacts made from them): the span numbers read, comma-separated
FINGERPRINT_PROPERTY = "input_fingerprint"  # Examples (and artifacts made from them): digest of the input files
SPAN_PROPERTY = "span"  # the newest span an artifact was made from
SPLIT_EXAMPLES_PROPERTY = "{split}_examples"  # Examples: records per split
INPUT_FILES_PROPERTY = "input_files"
INPUT_DIR_PROPERTY = "input_dir"
BLOCKING_PROPERTY = "blocking"  # ValidationReport: 1 when the run must stop
BLESSED_PROPERTY = "blessed"  # ModelBlessing: 1 when blessed (TFX's ARTIFACT_PROPERTY_BLESSED_KEY)
CHOSEN_PROPERTY = "chosen"  # ModelBlessing: which model the blessing is for ("candidate" or "baseline")
EXPORTED_PROPERTY = "exported"
SOURCE_MODEL_URI_PROPERTY = "source_model_uri"
RECOMMENDED_TFLITE_PROPERTY = "recommended_tflite"
PUSHED_PROPERTY = "pushed"  # PushedModel: 1 when pushed (as TFX's Pusher)
PUSHED_DESTINATION_PROPERTY = "pushed_destination"
PUSHED_VERSION_PROPERTY = "pushed_version"

# ---------------------------------------------------------------------- files inside artifacts
INGEST_REPORT_FILE = "ingest_report.json"  # Examples
STATISTICS_FILE = "FeatureStats.pb"  # what StatisticsGen writes in each split folder
ANOMALIES_FILE = "SchemaDiff.pb"  # what ExampleValidator writes in each split folder
VALIDATION_REPORT_FILE = "validation_report.json"  # ValidationReport
STATISTICS_COPY_DIR = "statistics"  # ValidationReport: this span's statistics, the next run's drift reference
TRAINING_REPORT_FILE = "training_report.json"  # ModelRun
SKIPPED_BASELINE_FILE = "fp32_baseline_skipped.json"  # in a baseline Model's Format-Serving: why it was not trained
MODEL_FACTS_FILE = "model_facts.json"  # beside the Keras files: what the evaluator and export need to know
PRECISION_REPORT_FILE = "precision_report.json"  # ModelEvaluation: the decision, every check, the metrics
PRECISION_REPORT_MARKDOWN = "precision_report.md"
EXPORT_REPORT_FILE = "export_report.json"  # ExportedModel
EXPORT_REPORT_MARKDOWN = "export_report.md"
SAVED_MODEL_DIR = "saved_model"  # ExportedModel: the serving SavedModel
TFLITE_DIR = "tflite"  # ExportedModel: one .tflite file per variant
PUSHED_TFLITE_FILE = "model.tflite"  # a pushed version: the recommended variant beside the SavedModel
PUSH_INFO_FILE = "push_info.json"  # a pushed version: where it came from

# ------------------------------------------------------------- the SavedModel's signatures and Keras files
SERVING_SIGNATURE = "serving_default"  # serialized tf.Example -> the task's outputs (components/core/tasks.py)
RAW_SIGNATURE = "serving_raw"  # one tensor per raw feature -> the task's outputs
TRANSFORM_SIGNATURE = "transform_features"  # serialized tf.Example -> label (TFMA derives labels with it)
PREPROCESS_SIGNATURE = "preprocess"  # one tensor per raw feature -> model-ready tensors (host side)
MODEL_READY_DIR = "Format-Keras"  # beside the serving SavedModel: the model and its preprocessing as Keras files
MODEL_READY_FILE = "model_ready.keras"
PREPROCESSING_FILE = "preprocessing.keras"  # the fitted preprocessing (a later warm start reuses it)

# ------------------------------------------------------------------ model roles in the evaluator's reports
CANDIDATE, FP32_BASELINE, PRODUCTION, TRIVIAL = "candidate", "fp32_baseline", "production", "trivial"
OVERALL = "overall"  # the metrics tables' whole-eval-split slice

# --------------------------------------------------------------------------------- a step's progress
PROGRESS = "Progress: "  # a log line a long step writes (the Trainer's ProgressLine); the local runner prints it
# under the step's name

# ------------------------------------------------------------------------------- pipeline node ids
TRAINER_NODE = "Trainer"  # the candidate's Trainer (TFX's default id for its Trainer)
FP32_BASELINE_NODE = "Fp32BaselineTrainer"  # the same training in plain float32: the reference

# ------------------------------------------------------------------- choices the config checks against
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")  # the Trainer's distribution strategies
POLICIES = ("float32", "mixed_float16", "mixed_bfloat16")  # the Trainer's Keras precision policies
TFLITE_VARIANTS = ("float32", "float16", "dynamic_int8", "full_int8")  # ModelExport's TFLite ladder

# ------------------------------------------------------------------------------ the records' dates
# A date or date-time is int64 seconds since 1970-01-01T00:00Z; the instants every model and prepare-data
# read: 0001-01-01T00:00:00Z to 9999-12-31T23:59:59Z (proleptic Gregorian calendar, as Python's datetime)
DATE_RANGE = (-62_135_596_800, 253_402_300_799)
DATE_RANGE_TEXT = "0001-01-01 to 9999-12-31 UTC"
