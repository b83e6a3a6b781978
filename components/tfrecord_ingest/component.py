"""TFRecordIngest: TFRecord files of tf.Example -> checked, split, counted standard Examples artifact.

Consumes: `input_base`, a directory of TFRecord files (gzip or plain, detected per file), or of
`span-N/` folders, of which the last `span_window` are read together. Runs as a Beam job with the
pipeline's `beam_pipeline_args` (one unit of work per input file), like TFX's ImportExampleGen.
Produces: `examples` (standard Examples: Split-train / Split-eval, gzip TFRecord; `span` = the latest span
read) with custom properties `train_examples`, `eval_examples`, `input_files`, `input_dir`, `spans`,
`input_fingerprint`, and `ingest_report.json` beside the splits.
"""
import json

from tfx import types
from tfx.dsl.components.base import base_component, executor_spec
from tfx.types import standard_artifacts
from tfx.types.component_spec import ChannelParameter, ComponentSpec, ExecutionParameter

from components.core import contract
from components.tfrecord_ingest import executor


class TFRecordIngestSpec(ComponentSpec):
    PARAMETERS = {
        contract.INPUT_BASE: ExecutionParameter(type=str),
        contract.EVAL_FRACTION: ExecutionParameter(type=float),
        contract.SPAN_WINDOW: ExecutionParameter(type=int),  # how many of the latest spans to read
        contract.SPLIT_LEAVES_OUT: ExecutionParameter(type=str, optional=True),
        # Digest of the input files: new data changes it, so the cache is not reused for new data.
        contract.INPUT_FINGERPRINT: ExecutionParameter(type=str),
    }
    INPUTS = {}
    OUTPUTS = {contract.EXAMPLES: ChannelParameter(type=standard_artifacts.Examples)}


class TFRecordIngest(base_component.BaseComponent):
    SPEC_CLASS = TFRecordIngestSpec
    EXECUTOR_SPEC = executor_spec.BeamExecutorSpec(executor.Executor)

    def __init__(self, input_base: str, eval_fraction: float, input_fingerprint: str, span_window: int = 1,
                 split_leaves_out: tuple[str, ...] = ()):
        super().__init__(spec=TFRecordIngestSpec(
            input_base=input_base, eval_fraction=eval_fraction, input_fingerprint=input_fingerprint,
            span_window=span_window, split_leaves_out=json.dumps(list(split_leaves_out)),
            examples=types.Channel(type=standard_artifacts.Examples)))
