"""The GPU-aware Trainer: TFX's Trainer (run_fn = components.trainer.run_fn.run_fn) with one more, optional
input, the candidate's ModelRun, for the FP32 baseline trainer.

Consumes: `examples`, `schema`, optional `base_model` (warm start), optional `candidate_run` (the
candidate Trainer's ModelRun: the baseline reads the numerics the candidate trained with and does not train
the same float32 model again). Produces: `model` (serving SavedModel and Keras files) and `model_run`
(training_report.json, TensorBoard logs). Parameters: `custom_config`, the step's settings record
(components/settings.py StepSettings, as JSON) plus the checkpoint root and code fingerprint (run_fn.py).
With `candidate_run`, the baseline runs after the candidate, in the same pod or another (Kubeflow), since
that input orders the two.
"""
from __future__ import annotations

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.proto import trainer_pb2
from tfx.types import standard_artifacts, standard_component_specs
from tfx.types.component_spec import ChannelParameter
from tfx.utils import json_utils

from components.core import contract
from components.trainer.executor import Executor

RUN_FN = "components.trainer.run_fn.run_fn"


class TrainerSpec(standard_component_specs.TrainerSpec):
    INPUTS = {**standard_component_specs.TrainerSpec.INPUTS,
              contract.CANDIDATE_RUN: ChannelParameter(type=standard_artifacts.ModelRun, optional=True)}


class Trainer(base_component.BaseComponent):
    """TFX's Trainer spec with `candidate_run`; built here because TFX's Trainer builds its own spec class."""

    SPEC_CLASS = TrainerSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(Executor)

    def __init__(self, examples: types.BaseChannel, schema: types.BaseChannel, custom_config: dict,
                 base_model: types.BaseChannel | None = None, candidate_run: types.BaseChannel | None = None):
        super().__init__(spec=TrainerSpec(
            examples=examples, schema=schema, base_model=base_model, candidate_run=candidate_run,
            run_fn=RUN_FN, train_args=trainer_pb2.TrainArgs(), eval_args=trainer_pb2.EvalArgs(),
            custom_config=json_utils.dumps(custom_config),
            model=types.Channel(type=standard_artifacts.Model),
            model_run=types.Channel(type=standard_artifacts.ModelRun)))
