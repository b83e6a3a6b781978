"""AtomicPusher: blessed ExportedModel -> a new version folder in the push directory, published atomically.

Consumes: `exported_model` (ModelExport's output), `blessing` (PrecisionEvaluator's ModelBlessing).
Produces: `pushed_model` (PushedModel with TFX's properties: pushed, pushed_destination, pushed_version).
Parameters: `push_dir`, where the numbered versions live. Nothing in it changes unless the model is
blessed; a version already published from the same model is not published again.
"""
from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.core import contract
from components.atomic_pusher import executor
from components.core.artifacts import ExportedModel


class AtomicPusherSpec(ComponentSpec):
    PARAMETERS = {contract.PUSH_DIR: ExecutionParameter(type=str)}
    INPUTS = {contract.EXPORTED_MODEL: ChannelParameter(type=ExportedModel),
              contract.BLESSING: ChannelParameter(type=standard_artifacts.ModelBlessing)}
    OUTPUTS = {contract.PUSHED_MODEL: ChannelParameter(type=standard_artifacts.PushedModel)}


class AtomicPusher(base_component.BaseComponent):
    SPEC_CLASS = AtomicPusherSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, exported_model: types.BaseChannel, blessing: types.BaseChannel, push_dir: str):
        super().__init__(spec=AtomicPusherSpec(exported_model=exported_model, blessing=blessing, push_dir=push_dir,
                                               pushed_model=types.Channel(type=standard_artifacts.PushedModel)))
