"""Writing a SavedModel of a few signatures over Keras models, without walking every layer.

Keras's ExportArchive looks through each tracked model's every layer for lookup tables before it saves, which
for a table's preprocessing of a few hundred layers takes seconds (most of the Trainer's and of ModelExport's
export time on a wide table). The pipeline's own layers hold no table; when a model module's layers do (e.g.
keras.layers.StringLookup), the functions capture a resource nothing tracks and the save falls back to
ExportArchive, which finds it.
"""
from __future__ import annotations

import keras
import tensorflow as tf


def write_signatures(export_dir: str, models: list[keras.Model], signatures: dict) -> None:
    """Input: a folder, the Keras models whose variables the functions read, and signature name -> a
    tf.function with an input signature (one traced concrete function each). Output: `export_dir`, a SavedModel
    whose `signatures` are those functions, with the models' variables."""
    root = tf.Module()
    root.model_variables = [getattr(variable, "value", variable) for model in models for variable in model.variables]
    try:
        tf.saved_model.save(root, export_dir, signatures={name: function.get_concrete_function()
                                                          for name, function in signatures.items()})
    except (AssertionError, ValueError) as error:
        if "untracked" not in str(error) and "track" not in str(error).lower():
            raise
        archive = keras.export.ExportArchive()  # a lookup table somewhere: Keras finds and tracks it
        for model in models:
            archive.track(model)
        for name, function in signatures.items():
            archive.add_endpoint(name, function)
        archive.write_out(export_dir, verbose=False)
