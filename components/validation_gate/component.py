"""ValidationGate: ExampleAnomalies -> ValidationReport, or a failed run on blocking anomalies.

Consumes: `anomalies` (ExampleValidator's output, one SchemaDiff.pb per split).
Produces: `report` (ValidationReport) holding validation_report.json; custom property `blocking`.
Fails the run (so nothing downstream, training included, runs) when any anomaly has ERROR severity.
"""
from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec

from components.validation_gate import executor


class ValidationReport(types.Artifact):
    """validation_report.json: per split, the anomalies found and whether each one blocks the run."""
    TYPE_NAME = "accel_tfx.ValidationReport"  # <namespace>.<Name>: the form KFP v2 schema titles need


class ValidationGateSpec(ComponentSpec):
    PARAMETERS = {}
    INPUTS = {"anomalies": ChannelParameter(type=standard_artifacts.ExampleAnomalies)}
    OUTPUTS = {"report": ChannelParameter(type=ValidationReport)}


class ValidationGate(base_component.BaseComponent):
    SPEC_CLASS = ValidationGateSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, anomalies: types.BaseChannel):
        super().__init__(spec=ValidationGateSpec(anomalies=anomalies, report=types.Channel(type=ValidationReport)))
