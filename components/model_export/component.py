"""ModelExport: the blessed model -> ExportedModel (SavedModel + TFLite ladder, each variant re-evaluated).

Consumes: `examples` (train split calibrates full int8; a bounded, evenly spread sample of the eval split,
`export.scoring_examples`, scores every variant and the SavedModel), `schema` (the
curated schema: a schema-driven model module reads it), `model` and `baseline_model` (the two Trainers'
outputs: the blessing says which one is blessed), `blessing`.
Produces: `exported_model` holding saved_model/, tflite/<variant>.tflite (device models: raw features in,
the model's preprocessing inside, TFLite builtin ops only) and export_report.json/.md; custom properties
`exported` (0 when nothing was blessed) and `recommended_tflite`.
Parameters: `settings`, the step's StepSettings as JSON (components/settings.py): the `export` config
section, the config's `task` section and the model module (it parses raw examples; its INPUTS are the device
inputs, their defaults the missing-value convention).
"""
from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.core import contract
from components.core.artifacts import ExportedModel
from components.model_export import executor
from components.settings import StepSettings




class ModelExportSpec(ComponentSpec):
    PARAMETERS = {contract.SETTINGS: ExecutionParameter(type=str)}
    INPUTS = {
        contract.EXAMPLES: ChannelParameter(type=standard_artifacts.Examples),
        contract.SCHEMA: ChannelParameter(type=standard_artifacts.Schema),
        contract.MODEL: ChannelParameter(type=standard_artifacts.Model),
        contract.BASELINE_MODEL: ChannelParameter(type=standard_artifacts.Model),
        contract.BLESSING: ChannelParameter(type=standard_artifacts.ModelBlessing),
    }
    OUTPUTS = {contract.EXPORTED_MODEL: ChannelParameter(type=ExportedModel)}


class ModelExport(base_component.BaseComponent):
    SPEC_CLASS = ModelExportSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, examples: types.BaseChannel, schema: types.BaseChannel, model: types.BaseChannel,
                 baseline_model: types.BaseChannel, blessing: types.BaseChannel,
                 settings: StepSettings):
        super().__init__(spec=ModelExportSpec(
            examples=examples, schema=schema, model=model, baseline_model=baseline_model, blessing=blessing,
            settings=settings.to_json(),
            exported_model=types.Channel(type=ExportedModel)))
