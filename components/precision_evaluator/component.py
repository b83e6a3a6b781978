"""PrecisionEvaluator: candidate + FP32 baseline (+ latest blessed model) -> ModelBlessing + evaluation report.

Consumes: `examples` (eval split), `model` (the candidate from the GPU-aware Trainer), `baseline_model` (the
same Trainer at float32 without XLA), optional `production_model` (the latest blessed model, from TFX's
LatestBlessedModelStrategy resolver).
Produces: `evaluation` (ModelEvaluation: TFMA results plus precision_report.json/.md) and `blessing` (a
standard ModelBlessing that refers to the candidate, or to the FP32 baseline after a fallback).
Parameters: `settings`, the step's StepSettings as JSON (components/settings.py): the `evaluate` config
section and the models' target (label key, task, class names).
"""
from tfx import types
from tfx.dsl.components.base import base_beam_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.core import contract
from components.precision_evaluator import executor
from components.settings import StepSettings


class PrecisionEvaluatorSpec(ComponentSpec):
    PARAMETERS = {contract.SETTINGS: ExecutionParameter(type=str)}
    INPUTS = {
        contract.EXAMPLES: ChannelParameter(type=standard_artifacts.Examples),
        contract.MODEL: ChannelParameter(type=standard_artifacts.Model),
        contract.BASELINE_MODEL: ChannelParameter(type=standard_artifacts.Model),
        contract.PRODUCTION_MODEL: ChannelParameter(type=standard_artifacts.Model, optional=True),
    }
    OUTPUTS = {
        contract.EVALUATION: ChannelParameter(type=standard_artifacts.ModelEvaluation),
        contract.BLESSING: ChannelParameter(type=standard_artifacts.ModelBlessing),
    }


class PrecisionEvaluator(base_beam_component.BaseBeamComponent):
    SPEC_CLASS = PrecisionEvaluatorSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, examples: types.BaseChannel, model: types.BaseChannel, baseline_model: types.BaseChannel,
                 settings: StepSettings, production_model: types.BaseChannel | None = None):
        super().__init__(spec=PrecisionEvaluatorSpec(
            examples=examples, model=model, baseline_model=baseline_model, production_model=production_model,
            settings=settings.to_json(),
            evaluation=types.Channel(type=standard_artifacts.ModelEvaluation),
            blessing=types.Channel(type=standard_artifacts.ModelBlessing)))
