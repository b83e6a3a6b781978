"""The labels of a split, read once: their counts go into the model's facts, and a label the task does not
allow stops training with a TaskError naming it."""
from __future__ import annotations

import numpy as np
import tensorflow as tf

from components.core.tasks import Task, TaskError
from components.core.datasets import record_dataset
from components.trainer.input_pipeline import list_files, record_compression
from components.core.model_module import ModelModule, check_label_dtype

BATCH = 4096


def read_labels(file_patterns: list[str], model_module: ModelModule, task: Task, split: str) -> np.ndarray:
    """Input: a split's TFRecord files, the model module, its task, the split's name. Output: every label
    (model_module.make_label on its LABEL_INPUTS), in file order.

    Raises TaskError naming the split and feature when a record lacks a feature the label is derived from
    (its parse default would stand in for a label nobody recorded), or naming the label when it is not of
    the task's kind (strings; floats for class ids) or not one the task and the module's CLASSES allow."""
    files = list_files(file_patterns)
    presence = {name: tf.io.VarLenFeature(spec.dtype) for name, spec in model_module.LABEL_INPUTS.items()}

    def parse(serialized):
        rows = tf.shape(serialized)[0]
        missing = {}
        for name, values in tf.io.parse_example(serialized, presence).items():
            per_row = tf.math.bincount(tf.cast(values.indices[:, 0], tf.int32), minlength=rows, maxlength=rows)
            missing[name] = tf.reduce_sum(tf.cast(per_row == 0, tf.int64))
        label = model_module.make_label(tf.io.parse_example(serialized, model_module.LABEL_INPUTS))
        return tf.reshape(label, [-1]), missing

    dataset = record_dataset(files, record_compression(files)).batch(BATCH).map(
        parse, num_parallel_calls=tf.data.AUTOTUNE)
    parts, missing_total, records = [], dict.fromkeys(presence, 0), 0
    for labels, missing in dataset.as_numpy_iterator():
        parts.append(labels)
        records += len(labels)
        for name, count in missing.items():
            missing_total[name] += int(count)
    for name, count in missing_total.items():
        if count:
            raise TaskError(f"{split} split: {count:,} of {records:,} records lack {name!r}, which the label "
                            f"{model_module.LABEL_KEY!r} is derived from")
    labels = np.concatenate(parts) if parts else np.zeros(0, task.label_dtype)
    check_label_dtype(model_module, labels.dtype)
    try:
        task.check_labels(labels, tuple(model_module.CLASSES), f"{split} split: label {model_module.LABEL_KEY!r}")
    except TaskError as error:
        bad = task.invalid_labels(labels, tuple(model_module.CLASSES))
        raise TaskError(f"{error}{_raw_values(files, model_module, bad)}: {task.label_advice()}") from None
    return labels


def _raw_values(files: list[str], model_module: ModelModule, bad: np.ndarray) -> str:
    """What the records whose labels are not allowed hold in the features the label is derived from: the
    most frequent values, with counts (read again only when reporting the error)."""
    values: dict[str, dict] = {name: {} for name in model_module.LABEL_INPUTS}
    dataset = record_dataset(files, record_compression(files)).batch(BATCH).map(
        lambda serialized: tf.io.parse_example(serialized, model_module.LABEL_INPUTS))
    position = 0
    for batch in dataset.as_numpy_iterator():
        rows = len(next(iter(batch.values())))
        for name, column in batch.items():
            for value in column.reshape(rows, -1)[bad[position:position + rows]][:, 0]:
                value = value.decode("utf-8", "replace") if isinstance(value, bytes) else value.item()
                values[name][value] = values[name].get(value, 0) + 1
        position += rows
    described = []
    for name, counts in values.items():
        common = sorted(counts.items(), key=lambda item: -item[1])[:5]
        described.append(f"{name!r}: " + ", ".join(f"{value!r} ({count:,})" for value, count in common))
    return f"; those records hold {'; '.join(described)}"
