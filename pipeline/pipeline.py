"""create_pipeline(config) -> tfx Pipeline: wiring only, shared by the local and Kubeflow runners.

TFRecordIngest -> StatisticsGen -> ImportSchemaGen (curated schema) -> ExampleValidator -> ValidationGate
  -> Trainer (automatic strategy, precision, XLA)  +  Fp32BaselineTrainer (same model, float32, no XLA)
  -> PrecisionEvaluator (candidate vs FP32 baseline vs latest blessed model; blessing + report)
  -> ModelExport (blessed model: SavedModel + TFLite ladder, each re-evaluated)
  -> AtomicPusher (new version folder, only when blessed)
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import json
import os

from tfx import v1 as tfx

from components.atomic_pusher.component import AtomicPusher
from components.model_export.component import ModelExport
from components.precision_evaluator.component import PrecisionEvaluator
from components.tfrecord_ingest.component import TFRecordIngest
from components.tfrecord_ingest.records import fingerprint_input
from components.validation_gate.component import ValidationGate
from pipeline.config import PipelineConfig

TRAINER_RUN_FN = "components.trainer.run_fn.run_fn"
FP32_BASELINE_TRAINER = "Fp32BaselineTrainer"


def create_pipeline(config: PipelineConfig, pipeline_root: str | None = None,
                    fingerprint_data: bool = True) -> tfx.dsl.Pipeline:
    """Input: a checked PipelineConfig; optionally a pipeline root other than the config's (a URI when
    compiling for Kubeflow) and whether to fingerprint the input files now (off when the files are read
    only at run time elsewhere). Output: the TFX pipeline (no runner attached)."""
    pipeline_root = pipeline_root or config.pipeline_root
    ingest = TFRecordIngest(input_base=config.data_root, eval_fraction=config.ingest.eval_fraction,
                            input_fingerprint=fingerprint_input(config.data_root) if fingerprint_data else "")
    statistics_gen = tfx.components.StatisticsGen(examples=ingest.outputs["examples"])
    schema_gen = tfx.components.ImportSchemaGen(schema_file=config.schema_path)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"])
    validation_gate = ValidationGate(anomalies=example_validator.outputs["anomalies"])
    checkpoint_root = os.path.join(_absolute(pipeline_root), "checkpoints")
    trainer = _trainer(config, ingest, schema_gen, "Trainer", checkpoint_root)
    baseline_trainer = _trainer(config, ingest, schema_gen, FP32_BASELINE_TRAINER, checkpoint_root,
                                precision="float32", xla="off")
    for node in (trainer, baseline_trainer):
        node.add_upstream_node(validation_gate)  # blocking anomalies stop the run before any training
    latest_blessed = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")
    model_module = importlib.import_module(config.train.model)
    evaluator = PrecisionEvaluator(
        examples=ingest.outputs["examples"],
        model=trainer.outputs["model"],
        baseline_model=baseline_trainer.outputs["model"],
        production_model=latest_blessed.outputs["model"],
        settings=json.dumps({**dataclasses.asdict(config.evaluate), "label_key": model_module.LABEL_KEY}))
    export = ModelExport(
        examples=ingest.outputs["examples"],
        model=trainer.outputs["model"],
        baseline_model=baseline_trainer.outputs["model"],
        blessing=evaluator.outputs["blessing"],
        model_module=config.train.model,
        settings=json.dumps(dataclasses.asdict(config.export)))
    pusher = AtomicPusher(exported_model=export.outputs["exported_model"], blessing=evaluator.outputs["blessing"],
                          push_dir=_absolute(config.push_dir))
    return tfx.dsl.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=pipeline_root,
        components=[ingest, statistics_gen, schema_gen, example_validator, validation_gate, trainer, baseline_trainer,
                    latest_blessed, evaluator, export, pusher],
        enable_cache=config.enable_cache,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            config.metadata_path),
        beam_pipeline_args=config.beam_pipeline_args)


def _absolute(path: str) -> str:
    """A local path made absolute; a URI (gs://, s3://...) as it is."""
    return path if "://" in path else os.path.abspath(path)


def _trainer(config: PipelineConfig, ingest, schema_gen, node_id: str, checkpoint_root: str,
             **train_overrides) -> tfx.components.Trainer:
    """The GPU-aware Trainer as node `node_id`, with `train_overrides` applied to the train config."""
    return tfx.components.Trainer(
        run_fn=TRAINER_RUN_FN,
        examples=ingest.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        custom_config=trainer_custom_config(config, os.path.join(checkpoint_root, node_id),
                                            **train_overrides)).with_id(node_id)


def trainer_custom_config(config: PipelineConfig, checkpoint_dir: str, **train_overrides) -> dict:
    """The Trainer's settings, where interrupted trainings keep checkpoints, and a digest of the trainer and
    model code so that code changes bust the cache."""
    code = hashlib.sha256()
    for package in ("components.trainer", "models"):
        folder = os.path.dirname(inspect.getfile(importlib.import_module(package)))
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as handle:
                    code.update(name.encode() + handle.read())
    return {**dataclasses.asdict(config.train), **train_overrides, "code_fingerprint": code.hexdigest()[:16],
            "checkpoint_root": checkpoint_dir}
