"""create_pipeline(config) -> tfx Pipeline: wiring only, shared by the local and Kubeflow runners.

TFRecordIngest -> StatisticsGen -> ImportSchemaGen (curated schema) -> ExampleValidator -> ValidationGate
               -> Trainer -> Evaluator (vs latest blessed model) -> Pusher (only when blessed)
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import os

import tensorflow_model_analysis as tfma
from tfx import v1 as tfx

from components.tfrecord_ingest.component import TFRecordIngest
from components.tfrecord_ingest.records import fingerprint_input
from components.validation_gate.component import ValidationGate
from pipeline.config import PipelineConfig

TRAINER_RUN_FN = "components.trainer.run_fn.run_fn"


def create_pipeline(config: PipelineConfig) -> tfx.dsl.Pipeline:
    """Input: a checked PipelineConfig. Output: the TFX pipeline (no runner attached)."""
    ingest = TFRecordIngest(input_base=config.data_root, eval_fraction=config.ingest.eval_fraction,
                            input_fingerprint=fingerprint_input(config.data_root))
    statistics_gen = tfx.components.StatisticsGen(examples=ingest.outputs["examples"])
    schema_gen = tfx.components.ImportSchemaGen(schema_file=config.schema_path)
    example_validator = tfx.components.ExampleValidator(
        statistics=statistics_gen.outputs["statistics"], schema=schema_gen.outputs["schema"])
    validation_gate = ValidationGate(anomalies=example_validator.outputs["anomalies"])
    trainer = tfx.components.Trainer(
        run_fn=TRAINER_RUN_FN,
        examples=ingest.outputs["examples"],
        schema=schema_gen.outputs["schema"],
        custom_config=trainer_custom_config(config))
    trainer.add_upstream_node(validation_gate)  # blocking anomalies stop the run before any training
    latest_blessed = tfx.dsl.Resolver(
        strategy_class=tfx.dsl.experimental.LatestBlessedModelStrategy,
        model=tfx.dsl.Channel(type=tfx.types.standard_artifacts.Model),
        model_blessing=tfx.dsl.Channel(type=tfx.types.standard_artifacts.ModelBlessing),
    ).with_id("latest_blessed_model_resolver")
    evaluator = tfx.components.Evaluator(
        examples=ingest.outputs["examples"],
        model=trainer.outputs["model"],
        baseline_model=latest_blessed.outputs["model"],
        eval_config=eval_config(config))
    pusher = tfx.components.Pusher(
        model=trainer.outputs["model"],
        model_blessing=evaluator.outputs["blessing"],
        push_destination=tfx.proto.PushDestination(
            filesystem=tfx.proto.PushDestination.Filesystem(base_directory=config.push_dir)))
    return tfx.dsl.Pipeline(
        pipeline_name=config.pipeline_name,
        pipeline_root=config.pipeline_root,
        components=[ingest, statistics_gen, schema_gen, example_validator, validation_gate, trainer, latest_blessed,
                    evaluator, pusher],
        enable_cache=config.enable_cache,
        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(
            config.metadata_path),
        beam_pipeline_args=config.beam_pipeline_args)


def trainer_custom_config(config: PipelineConfig) -> dict:
    """The Trainer's settings, where interrupted trainings keep checkpoints, and a digest of the trainer and
    model code so that code changes bust the cache."""
    code = hashlib.sha256()
    for package in ("components.trainer", "models"):
        folder = os.path.dirname(inspect.getfile(importlib.import_module(package)))
        for name in sorted(os.listdir(folder)):
            if name.endswith(".py"):
                with open(os.path.join(folder, name), "rb") as handle:
                    code.update(name.encode() + handle.read())
    return {**dataclasses.asdict(config.train), "code_fingerprint": code.hexdigest()[:16],
            "checkpoint_root": os.path.join(os.path.abspath(config.pipeline_root), "checkpoints", "Trainer")}


def eval_config(config: PipelineConfig) -> tfma.EvalConfig:
    """TFMA config: AUC must clear `min_auc` and, once a model was blessed, not drop more than `max_auc_drop`."""
    return tfma.EvalConfig(
        model_specs=[tfma.ModelSpec(signature_name="serving_default", label_key=importlib.import_module(config.train.model).LABEL_KEY,
                                    preprocessing_function_names=["transform_features"])],
        slicing_specs=[tfma.SlicingSpec()],
        metrics_specs=[tfma.MetricsSpec(metrics=[
            tfma.MetricConfig(class_name="ExampleCount"),
            tfma.MetricConfig(class_name="BinaryAccuracy"),
            tfma.MetricConfig(class_name="AUC", threshold=tfma.MetricThreshold(
                value_threshold=tfma.GenericValueThreshold(lower_bound={"value": config.evaluate.min_auc}),
                change_threshold=tfma.GenericChangeThreshold(
                    direction=tfma.MetricDirection.HIGHER_IS_BETTER,
                    absolute={"value": -config.evaluate.max_auc_drop}))),
        ])])
