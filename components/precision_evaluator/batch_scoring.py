"""A TFMA extractor that scores whole batches of serialized examples with every model, once per batch.

Input: TFMA's batched extracts (an Arrow RecordBatch from TFXIO with the serialized records in
tfma.ARROW_INPUT_COLUMN). Output: the same extracts plus, per model name, its transformed features (from
the ModelSpec's preprocessing functions, e.g. `transform_features`), its labels (`label_key` among them)
and its predictions (the ModelSpec's signature, e.g. `serving_default`, and its `prediction_key` output),
as numpy arrays with one row per example ([N] for one value per example, [N, K] for K class
probabilities): what TFMA's TransformedFeatures, Labels and Predictions extractors put in the extracts,
before TFMA unbatches them.

Each SavedModel is loaded once per Beam worker (shared between the DoFn instances of a process), so on
Dataflow, Flink or Spark every worker scores its share of the eval split.
"""
from __future__ import annotations

from typing import Any, Iterator

import apache_beam as beam
import numpy as np
import tensorflow as tf
import tensorflow_model_analysis as tfma
from apache_beam.utils import shared
from tensorflow_model_analysis.metrics import metric_util

from components.core import artifact_files, contract

STAGE_NAME = "ScoreBatches"


def extractor(eval_config: tfma.EvalConfig, model_paths: dict[str, str]) -> tfma.extractors.Extractor:
    """Input: the eval config (one ModelSpec per model) and {model name: SavedModel path}. Output: the TFMA
    extractor that adds transformed features, labels and predictions of every model to each batch."""
    missing = sorted({spec.name for spec in eval_config.model_specs} - set(model_paths))
    if missing:
        raise ValueError(f"no SavedModel path for model(s) {', '.join(missing)}")
    return tfma.extractors.Extractor(
        stage_name=STAGE_NAME,
        ptransform=beam.ParDo(_ScoreBatchFn(list(eval_config.model_specs), dict(model_paths), shared.Shared())))


class _LoadedModels:
    """The SavedModels of one worker process, by model name (a class: Beam's Shared holds weak references)."""

    def __init__(self, model_paths: dict[str, str]):
        artifact_files.register_filesystems_for(*model_paths.values())  # a worker may not know s3:// yet
        self.models = {name: tf.saved_model.load(path) for name, path in model_paths.items()}


class _ScoreBatchFn(beam.DoFn):
    def __init__(self, model_specs: list, model_paths: dict[str, str], shared_handle: shared.Shared):
        self._model_specs = model_specs
        self._model_paths = model_paths
        self._shared_handle = shared_handle
        self._models: dict[str, Any] = {}

    def setup(self):
        paths = self._model_paths
        self._models = self._shared_handle.acquire(lambda: _LoadedModels(paths)).models

    def process(self, extracts: dict) -> Iterator[dict]:
        batch = extracts[tfma.constants.ARROW_RECORD_BATCH_KEY]
        column = batch.column(batch.schema.get_field_index(tfma.constants.ARROW_INPUT_COLUMN)).flatten()
        if len(column) != batch.num_rows:
            raise ValueError(f"expected one serialized record per row, got {len(column)} for {batch.num_rows} rows")
        records = tf.constant(column.to_numpy(zero_copy_only=False), dtype=tf.string)
        transformed, labels, predictions = {}, {}, {}
        for spec in self._model_specs:
            model = self._models[spec.name]
            features: dict[str, np.ndarray] = {}
            for name in spec.preprocessing_function_names:
                features.update(_call(model, name, records))
            transformed[spec.name] = features
            labels[spec.name] = _label(spec, features, batch)
            signature = spec.signature_name or contract.SERVING_SIGNATURE  # TFMA's default too
            predictions[spec.name] = _prediction(spec, _call(model, signature, records), batch.num_rows)
        result = dict(extracts)
        result[tfma.constants.TRANSFORMED_FEATURES_KEY] = transformed
        result[tfma.constants.LABELS_KEY] = labels
        result[tfma.constants.PREDICTIONS_KEY] = predictions
        yield result


def _call(model, signature_name: str, records: tf.Tensor) -> dict[str, np.ndarray]:
    """Runs one signature (one input: the serialized examples) on a batch. Output: {output name: array}."""
    if signature_name not in model.signatures:
        raise ValueError(f"the model has no signature {signature_name!r} (it has {', '.join(model.signatures)})")
    function = model.signatures[signature_name]
    (input_name,) = function.structured_input_signature[1]
    return {name: value.numpy() for name, value in function(**{input_name: records}).items()}


def _one_per_example(values: np.ndarray, rows: int, what: str) -> np.ndarray:
    if values.size != rows:
        raise ValueError(f"{what}: expected one value per example ({rows}), got shape {values.shape}")
    return values.reshape(rows)


def _per_example(values: np.ndarray, rows: int, what: str) -> np.ndarray:
    """[N] for one value per example, [N, K] for K values per example."""
    if not values.shape or values.shape[0] != rows:
        raise ValueError(f"{what}: expected one row per example ({rows}), got shape {values.shape}")
    values = values.reshape(rows, -1)
    return values.reshape(rows) if values.shape[1] == 1 else values


def _label(spec, transformed: dict[str, np.ndarray], batch) -> np.ndarray:
    """The label as TFMA's LabelsExtractor finds it: `label_key` among the transformed features, else a raw
    feature of that name."""
    if spec.label_key in transformed:
        return _one_per_example(transformed[spec.label_key], batch.num_rows, f"{spec.name} label {spec.label_key}")
    index = batch.schema.get_field_index(spec.label_key)
    if index < 0:
        raise ValueError(f"{spec.name}: label {spec.label_key!r} is neither a transformed nor a raw feature")
    return _one_per_example(batch.column(index).flatten().to_numpy(zero_copy_only=False), batch.num_rows,
                            f"{spec.name} label {spec.label_key}")


def _prediction(spec, outputs: dict[str, np.ndarray], rows: int) -> np.ndarray:
    """The prediction as TFMA picks it from a signature's outputs: `prediction_key`, the only output, or one
    of the standard keys (probabilities, logistic, ...)."""
    if spec.prediction_key:
        if spec.prediction_key not in outputs:
            raise ValueError(f"{spec.name}: no output {spec.prediction_key!r} (outputs: {', '.join(outputs)})")
        values = outputs[spec.prediction_key]
    elif len(outputs) == 1:
        (values,) = outputs.values()
    else:
        _, values = metric_util.prepare_labels_and_predictions(None, outputs, "")
    return _per_example(np.asarray(values), rows, f"{spec.name} prediction")
