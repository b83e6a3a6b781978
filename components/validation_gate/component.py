"""ValidationGate: schema anomalies and span-to-span drift -> ValidationReport, or a failed run.

Consumes: `anomalies` (ExampleValidator's output, one SchemaDiff.pb per split), `statistics` (this run's
ExampleStatistics), `schema` (the curated schema with its drift comparators), `examples` (only for its span
and fingerprint properties), and optionally `previous_report`: the last ValidationReport that passed and whose
data a blessed model was then trained on (before any model was blessed: any model; pipeline/dag/resolvers.py),
whose copy of its span's statistics is the drift reference.
Produces: `report` (ValidationReport) holding validation_report.json and a copy of this span's statistics
(`statistics/Split-*/FeatureStats.pb`); custom properties `blocking`, `span`, `spans`, `input_fingerprint`.
Fails the run (so nothing downstream, training included, runs) when any anomaly has ERROR severity (but a
column the schema does not know: the model leaves it out, and the report lists it under `new_columns`) or
any feature drifted past its comparator's threshold (the error says how many records each side holds); the
failed run publishes no report, so the next run still compares against the data the served model learned from.
"""
from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec

from components.core import contract
from components.core.artifacts import ValidationReport
from components.validation_gate import executor




class ValidationGateSpec(ComponentSpec):
    PARAMETERS = {}
    INPUTS = {
        contract.ANOMALIES: ChannelParameter(type=standard_artifacts.ExampleAnomalies),
        contract.STATISTICS: ChannelParameter(type=standard_artifacts.ExampleStatistics),
        contract.SCHEMA: ChannelParameter(type=standard_artifacts.Schema),
        contract.EXAMPLES: ChannelParameter(type=standard_artifacts.Examples),
        contract.PREVIOUS_VALIDATION_REPORT: ChannelParameter(type=ValidationReport, optional=True),
    }
    OUTPUTS = {contract.VALIDATION_REPORT: ChannelParameter(type=ValidationReport)}


class ValidationGate(base_component.BaseComponent):
    SPEC_CLASS = ValidationGateSpec
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(executor.Executor)

    def __init__(self, anomalies: types.BaseChannel, statistics: types.BaseChannel, schema: types.BaseChannel,
                 examples: types.BaseChannel, previous_report: types.BaseChannel | None = None):
        super().__init__(spec=ValidationGateSpec(
            anomalies=anomalies, statistics=statistics, schema=schema, examples=examples,
            previous_report=previous_report, report=types.Channel(type=ValidationReport)))
