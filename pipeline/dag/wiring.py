"""create_pipeline(config) -> tfx Pipeline: wiring only, shared by the local and Kubeflow runners.

TFRecordIngest (latest span, or the last N) -> StatisticsGen -> ImportSchemaGen (curated schema) -> ExampleValidator
  -> ValidationGate (blocking anomalies; drift from the statistics of the data the served model was trained on)
  -> Trainer (automatic strategy, precision, XLA)  +  Fp32BaselineTrainer (same model, float32, no XLA),
     both warm-started from the latest blessed model; the baseline reads the candidate's training report and
     trains only when the candidate's numerics differ (mixed precision or XLA), unless it is known ahead
     that they do (a compile for accelerators), when the two train side by side
  -> PrecisionEvaluator (candidate vs FP32 baseline vs latest blessed model; blessing + report)
  -> ModelExport (blessed model: SavedModel + TFLite ladder, each re-evaluated)
  -> AtomicPusher (new version folder, only when blessed)

Cache keys: TFX reuses a step when its inputs, parameters and executor spec are unchanged, and knows
nothing of our code. Each custom step's executor spec therefore carries `--code_fingerprint=<digest>`
(an extra flag: part of TFX's cache key, unused by the executor) over its component package, the project
modules that imports, and for ModelExport the `train.model` module; both Trainers carry the same digest
of components/trainer and the model module in their custom_config; in local runs ImportSchemaGen carries a
digest of the schema file's bytes. A change to any of that code or the schema reruns that step and what follows.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os

# Direct imports, not the `tfx.v1` umbrella: it also loads every other TFX component and the Google Cloud
# extensions, seconds of start-up that a cached re-run would mostly spend importing.
from tfx.components.example_validator.component import ExampleValidator
from tfx.components.schema_gen.import_schema_gen.component import ImportSchemaGen
from tfx.components.statistics_gen.component import StatisticsGen
from tfx.dsl.components.common.resolver import Resolver
from tfx.dsl.input_resolution.strategies.latest_artifact_strategy import LatestArtifactStrategy
from tfx.dsl.input_resolution.strategies.latest_blessed_model_strategy import LatestBlessedModelStrategy
from tfx.dsl.io import fileio
from tfx.orchestration import metadata, pipeline as tfx_pipeline
from tfx.types import BaseChannel, Channel, standard_artifacts

from components.core import contract
from components.atomic_pusher.component import AtomicPusher
from components.model_export.component import ModelExport
from components.precision_evaluator.component import PrecisionEvaluator
from components.tfrecord_ingest.component import TFRecordIngest
from components.trainer.component import Trainer
from components.tfrecord_ingest.spans import fingerprint_input
from components.core.artifacts import ValidationReport
from components.validation_gate.component import ValidationGate
from pipeline.runs.code_fingerprint import code_fingerprint
from components.settings import StepSettings
from pipeline.config import PipelineConfig, prediction_target, user_code
from pipeline.dag.resolvers import LatestBlessedModelFromOtherData, LatestOfBlessedData

TRAINER_PACKAGE = "components.trainer"


@dataclasses.dataclass
class DataNodes:
    """The data half of the DAG: ingestion, statistics, the curated schema and the validation gate."""
    ingest: TFRecordIngest
    statistics_gen: StatisticsGen
    schema_gen: ImportSchemaGen
    example_validator: ExampleValidator
    previous_validation: Resolver
    validation_gate: ValidationGate

    @property
    def examples(self) -> BaseChannel:
        return self.ingest.outputs[contract.EXAMPLES]

    @property
    def schema(self) -> BaseChannel:
        return self.schema_gen.outputs[contract.SCHEMA]

    def nodes(self) -> list:
        return [self.ingest, self.statistics_gen, self.schema_gen, self.example_validator, self.previous_validation,
                self.validation_gate]


@dataclasses.dataclass
class TrainingNodes:
    """The two Trainers and the resolver of the latest blessed model (warm start, production reference)."""
    latest_blessed: Resolver
    trainer: Trainer
    baseline_trainer: Trainer

    @property
    def production_model(self) -> BaseChannel:
        return self.latest_blessed.outputs[contract.MODEL]

    def nodes(self) -> list:
        return [self.latest_blessed, self.trainer, self.baseline_trainer]


def create_pipeline(config: PipelineConfig, pipeline_root: str | None = None,
                    fingerprint_data: bool = True, vertex_training: dict | None = None,
                    baseline_after_candidate: bool = True) -> tfx_pipeline.Pipeline:
    """Input: a checked PipelineConfig; optionally a pipeline root other than the config's (a URI when
    compiling for Kubeflow), whether to fingerprint the input files now (off when the files are read
    only at run time elsewhere), Vertex AI training settings (TFX's Vertex Trainer custom_config keys)
    to run both trainers as multi-replica CustomJobs, and whether the FP32 baseline takes the candidate's
    ModelRun (it then runs after the candidate and trains only when the candidate's numerics differ; False:
    the two train side by side, see baseline_after_candidate). Output: the TFX pipeline (no runner attached)."""
    pipeline_root = _absolute(pipeline_root or config.pipeline_root)  # MLMD's URIs then read from any directory
    data_fingerprint = fingerprint_input(config.data_root, config.ingest.span_window) if fingerprint_data else ""
    data = data_nodes(config, data_fingerprint)
    training = training_nodes(config, data, data_fingerprint, os.path.join(pipeline_root, "checkpoints"),
                              vertex_training, baseline_after_candidate)
    release = release_nodes(config, data, training)
    if fingerprint_data:  # a local run: the schema is read here (compiled, it is a path in the step's image)
        data.schema_gen.executor_spec.add_extra_flags([f"--schema_fingerprint={_file_digest(config.schema_path)}"])
    return tfx_pipeline.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=pipeline_root,
        components=data.nodes() + training.nodes() + release,
        enable_cache=config.enable_cache,
        metadata_connection_config=metadata.sqlite_metadata_connection_config(
            config.metadata_path),
        beam_pipeline_args=config.beam_pipeline_args)


def data_nodes(config: PipelineConfig, data_fingerprint: str) -> DataNodes:
    """TFRecordIngest -> StatisticsGen -> ImportSchemaGen -> ExampleValidator -> ValidationGate (blocking
    anomalies; drift from the statistics of the data the served model was trained on)."""
    ingest = TFRecordIngest(input_base=config.data_root, eval_fraction=config.ingest.eval_fraction,
                            span_window=config.ingest.span_window, input_fingerprint=data_fingerprint,
                            split_leaves_out=prediction_target(config).label_sources)
    examples = ingest.outputs[contract.EXAMPLES]
    statistics_gen = StatisticsGen(examples=examples)
    statistics = statistics_gen.outputs[contract.STATISTICS]
    schema_gen = ImportSchemaGen(schema_file=config.schema_path)
    schema = schema_gen.outputs[contract.SCHEMA]
    example_validator = ExampleValidator(statistics=statistics, schema=schema)
    previous_validation = _resolver("previous_validation_resolver", data_fingerprint,
                                    **{contract.PREVIOUS_VALIDATION_REPORT: Channel(type=ValidationReport)})
    validation_gate = ValidationGate(
        anomalies=example_validator.outputs[contract.ANOMALIES], statistics=statistics, schema=schema,
        examples=examples, previous_report=previous_validation.outputs[contract.PREVIOUS_VALIDATION_REPORT])
    for node in (ingest, validation_gate):
        _key_cache_on_code(node)
    return DataNodes(ingest, statistics_gen, schema_gen, example_validator, previous_validation, validation_gate)


def training_nodes(config: PipelineConfig, data: DataNodes, data_fingerprint: str, checkpoint_root: str,
                   vertex_training: dict | None, baseline_after_candidate: bool) -> TrainingNodes:
    """The candidate's Trainer and the FP32 baseline Trainer, both after the ValidationGate and warm-started
    from the latest blessed model (when warm start is on)."""
    latest_blessed = _resolver("latest_blessed_model_resolver", data_fingerprint, blessed_model=True,
                               **{contract.MODEL: Channel(type=standard_artifacts.Model),
                                  contract.MODEL_BLESSING: Channel(type=standard_artifacts.ModelBlessing)})
    base_model = latest_blessed.outputs[contract.MODEL] if config.train.warm_start else None
    trainer = _trainer(config, data.examples, data.schema, base_model, contract.TRAINER_NODE, checkpoint_root,
                       vertex_training)
    candidate_run = trainer.outputs[contract.MODEL_RUN] if baseline_after_candidate else None
    baseline_trainer = _trainer(config, data.examples, data.schema, base_model, contract.FP32_BASELINE_NODE,
                                checkpoint_root, vertex_training, candidate_run=candidate_run, precision="float32",
                                xla="off", input_probe_steps=0)  # the reference: its input wait is not what we tune
    for node in (trainer, baseline_trainer):
        node.add_upstream_node(data.validation_gate)  # blocking anomalies and drift stop the run before training
    return TrainingNodes(latest_blessed, trainer, baseline_trainer)


def release_nodes(config: PipelineConfig, data: DataNodes, training: TrainingNodes) -> list:
    """PrecisionEvaluator (candidate vs FP32 baseline vs production) -> ModelExport -> AtomicPusher."""
    model = training.trainer.outputs[contract.MODEL]
    baseline_model = training.baseline_trainer.outputs[contract.MODEL]
    evaluator = PrecisionEvaluator(
        examples=data.examples, model=model, baseline_model=baseline_model,
        production_model=training.production_model, settings=step_settings(config, config.evaluate))
    blessing = evaluator.outputs[contract.BLESSING]
    export = ModelExport(examples=data.examples, schema=data.schema, model=model, baseline_model=baseline_model,
                         blessing=blessing, settings=step_settings(config, config.export))
    pusher = AtomicPusher(exported_model=export.outputs[contract.EXPORTED_MODEL], blessing=blessing,
                          push_dir=_absolute(config.push_dir))
    _key_cache_on_code(pusher)
    _key_cache_on_code(evaluator, *user_code(config)[1:])  # a task of one's own scores its models
    _key_cache_on_code(export, *user_code(config))  # it rebuilds the model-ready model with the model's code
    return [evaluator, export, pusher]


def _absolute(path: str) -> str:
    """A local path made absolute; a URI (gs://, s3://...) as it is."""
    return path if "://" in path else os.path.abspath(path)


def _resolver(node_id: str, data_fingerprint: str, blessed_model: bool = False, **channels) -> Resolver:
    """A resolver node over `channels`: the newest artifact (or, with `blessed_model`, the newest blessed
    model and its blessing) not made from this run's data when its fingerprint is known (local runs; see
    pipeline/dag/resolvers.py), else TFX's stock strategy (the only kind Kubeflow Pipelines v2 runs)."""
    if data_fingerprint:
        strategy = LatestBlessedModelFromOtherData if blessed_model else LatestOfBlessedData
        return Resolver(strategy_class=strategy, config={contract.INPUT_FINGERPRINT: data_fingerprint},
                        **channels).with_id(node_id)
    strategy = (LatestBlessedModelStrategy if blessed_model
                else LatestArtifactStrategy)
    return Resolver(strategy_class=strategy, **channels).with_id(node_id)


def baseline_after_candidate(config: PipelineConfig, accelerators: bool) -> bool:
    """Whether the FP32 baseline should wait for the candidate to learn whether it must train (True), or train
    beside it (False) because the candidate's numerics will differ anyway: a precision other than float32
    set in the config, XLA on, or (precision auto) training on accelerators, which get mixed precision.
    Local runs run one step at a time, so waiting costs nothing there."""
    train = config.train
    differ = train.precision in ("mixed_float16", "mixed_bfloat16") or train.xla == "on" or (
        train.precision == "auto" and accelerators)
    return not differ


def _trainer(config: PipelineConfig, examples: BaseChannel, schema: BaseChannel, base_model: BaseChannel | None,
             node_id: str, checkpoint_root: str, vertex_training: dict | None, candidate_run: BaseChannel | None = None,
             **train_overrides) -> Trainer:
    """The GPU-aware Trainer as node `node_id` on the `examples` and `schema` channels, warm-started from
    `base_model` (a channel, or None), given the candidate's ModelRun (`candidate_run`, the FP32 baseline
    only), with `train_overrides` applied to the train config; run as a Vertex AI CustomJob with
    `vertex_training` merged into its custom_config when given (the same run_fn then runs in every replica)."""
    custom_config = trainer_custom_config(config, os.path.join(checkpoint_root, node_id), **train_overrides)
    trainer_class = Trainer
    if vertex_training:
        from components.trainer.vertex import VertexTrainer as trainer_class
        custom_config = {**custom_config, **vertex_training}
    return trainer_class(examples=examples, schema=schema, base_model=base_model, candidate_run=candidate_run,
                         custom_config=custom_config).with_id(node_id)


def step_settings(config: PipelineConfig, section) -> StepSettings:
    """Input: the checked config and one step's section of it. Output: that step's settings record (with the
    config's `task` section, the model module's name and what its models predict)."""
    return StepSettings(section, config.task, config.train.model, prediction_target(config))


def trainer_custom_config(config: PipelineConfig, checkpoint_dir: str, **train_overrides) -> dict:
    """The Trainer's settings record (train_overrides applied to the `train` section), where interrupted trainings keep checkpoints,
    and a digest of the trainer package, the model module and a task of one's own (wherever they live) and the
    project code they import, so that code changes bust the cache."""
    return {contract.SETTINGS: step_settings(config, dataclasses.replace(config.train, **train_overrides)).to_json(),
            contract.CODE_FINGERPRINT: code_fingerprint(TRAINER_PACKAGE, *user_code(config)),
            contract.CHECKPOINT_ROOT: checkpoint_dir}


def _key_cache_on_code(node, *extra_modules: str) -> None:
    """Adds `--code_fingerprint=<digest>` to the node's own executor spec (TFX copies the class's spec per
    node): the digest of the node's component package and `extra_modules` (see code_fingerprint)."""
    package = type(node).__module__.rpartition(".")[0]
    node.executor_spec.add_extra_flags([f"--{contract.CODE_FINGERPRINT}={code_fingerprint(package, *extra_modules)}"])


def _file_digest(path: str) -> str:
    """A 16-hex-digit SHA-256 digest of a file's bytes (a local path or a URI)."""
    with fileio.open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()[:16]
