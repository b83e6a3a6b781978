"""Every eval example's label and each model's prediction, gathered from the scored batches into one file
beside TFMA's output: what the paired comparisons of the gates (paired.py) read.

The gathering is a TFMA extractor that passes the extracts on unchanged, so TFMA's metrics and this file
come from one scoring of each batch. It works on any Beam runner: the arrays are combined on one worker
and written through TFX's filesystem layer into the evaluation artifact.
"""
from __future__ import annotations

import io
import os

import apache_beam as beam
import numpy as np
import tensorflow_model_analysis as tfma
from tfx.dsl.io import fileio

from components.core import artifact_files

STAGE_NAME = "GatherPerExample"
PER_EXAMPLE_FILE = "per_example_predictions.npz"  # labels, and one array of predictions per model
LABELS = "labels"


def gatherer(output_uri: str, label_model: str) -> tfma.extractors.Extractor:
    """Input: the evaluation folder, and the model whose labels are the truth (the candidate: its label
    function is the current one). Output: a TFMA extractor, to run after batch_scoring.py's, that writes
    <output_uri>/per_example_predictions.npz and passes every extract on unchanged."""
    return tfma.extractors.Extractor(stage_name=STAGE_NAME, ptransform=_Gather(output_uri, label_model))


@beam.ptransform_fn
def _Gather(extracts: beam.PCollection, output_uri: str, label_model: str) -> beam.PCollection:  # noqa: N802
    _ = (extracts
         | "LabelsAndPredictions" >> beam.Map(_arrays, label_model)
         | "Concatenate" >> beam.CombineGlobally(_ConcatenateFn())
         | "Write" >> beam.Map(_write, os.path.join(output_uri, PER_EXAMPLE_FILE)))
    return extracts | "PassOn" >> beam.Map(lambda extract: extract)


def _arrays(extracts: dict, label_model: str) -> dict[str, np.ndarray]:
    predictions = extracts[tfma.constants.PREDICTIONS_KEY]
    return {LABELS: np.asarray(extracts[tfma.constants.LABELS_KEY][label_model]),
            **{name: np.asarray(values) for name, values in predictions.items()}}


class _ConcatenateFn(beam.CombineFn):
    """Lists of per-batch arrays, by name, concatenated at the end (the rows of each batch stay aligned)."""

    def create_accumulator(self) -> dict[str, list]:
        return {}

    def add_input(self, accumulator, element):
        for name, values in element.items():
            accumulator.setdefault(name, []).append(values)
        return accumulator

    def merge_accumulators(self, accumulators):
        merged: dict[str, list] = {}
        for accumulator in accumulators:
            for name, parts in accumulator.items():
                merged.setdefault(name, []).extend(parts)
        return merged

    def extract_output(self, accumulator):
        return {name: np.concatenate(parts) for name, parts in accumulator.items()}


def _write(arrays: dict[str, np.ndarray], path: str) -> None:
    buffer = io.BytesIO()
    np.savez_compressed(buffer, **arrays)
    artifact_files.write_bytes(path, buffer.getvalue())


def read(output_uri: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Output: (the eval labels, {model name: its predictions}), example for example. FileNotFoundError
    when the evaluation holds no such file (an empty eval split)."""
    path = os.path.join(output_uri, PER_EXAMPLE_FILE)
    if not fileio.exists(path):
        raise FileNotFoundError(f"{path}: no per-example predictions (is the eval split empty?)")
    with np.load(io.BytesIO(artifact_files.read_bytes(path))) as arrays:
        values = {name: arrays[name] for name in arrays.files}
    return values.pop(LABELS), values
