"""Checkpoints of an interrupted training: where a job keeps them, and making one a kill cut off loadable.

Keras' BackupAndRestore (see callbacks.SpacedBackupAndRestore) writes them; a restarted job with the same
data and settings finds its directory again, repairs what a kill left half-written and resumes from it.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os

import tensorflow as tf
from absl import logging
from tfx.dsl.io import fileio

from components.core import artifact_files, contract
from components.settings import TrainConfig

BACKUP_METADATA = "training_metadata.json"  # written by keras.callbacks.BackupAndRestore...
BACKUP_WEIGHTS = "latest.weights.h5"  # ...with these weights; "<name>.bkp" holds the previous checkpoint


def checkpoint_dir_for(checkpoint_root: str, train_files: list[str], settings: TrainConfig,
                       code_fingerprint: str | None = None) -> str:
    """Output: a checkpoint directory under `checkpoint_root` that only a restart of the same job (same
    data, same settings, same code when `code_fingerprint` is given) finds again."""
    keyed = dataclasses.asdict(settings)
    if code_fingerprint is not None:  # hashed beside the settings, as when it travelled among them
        keyed[contract.CODE_FINGERPRINT] = code_fingerprint
    key = hashlib.sha256(json.dumps([sorted(train_files), keyed], sort_keys=True, default=str).encode())
    return os.path.join(checkpoint_root, key.hexdigest()[:16])


def repair_checkpoint(checkpoint_dir: str) -> str:
    """Makes a checkpoint that a kill interrupted mid-write loadable again. Output: what was done.

    Keras writes the weights, then the metadata (the interval reached), each after copying the previous
    pair to `.bkp`. A pair with unreadable weights or unreadable metadata is replaced by the previous
    pair; with no readable previous pair the checkpoint is dropped and training starts from step 0
    (Keras, and the resume step read from the metadata, would otherwise fail on every restart).
    """
    weights = os.path.join(checkpoint_dir, BACKUP_WEIGHTS)
    metadata = os.path.join(checkpoint_dir, BACKUP_METADATA)
    if not fileio.exists(weights) and not fileio.exists(metadata):
        return "intact"
    if _readable_checkpoint(weights, metadata):
        return "intact"
    if _readable_checkpoint(weights + ".bkp", metadata + ".bkp"):
        fileio.copy(weights + ".bkp", weights, overwrite=True)
        fileio.copy(metadata + ".bkp", metadata, overwrite=True)
        logging.warning("The checkpoint in %s was cut off by a kill; resuming from the previous checkpoint",
                        checkpoint_dir)
        return "restored previous"
    fileio.rmtree(checkpoint_dir)
    logging.warning("The only checkpoint in %s was cut off by a kill; training starts from step 0", checkpoint_dir)
    return "dropped"


def _readable_checkpoint(weights: str, metadata: str) -> bool:
    """True when the weights open as HDF5 and the metadata parses with an interval number."""
    import h5py
    try:
        with h5py.File(io.BytesIO(artifact_files.read_bytes(weights)), "r"):
            pass
        return isinstance(artifact_files.read_json(metadata).get("epoch", 0), int)
    except (OSError, ValueError, AttributeError, tf.errors.OpError):
        return False


def checkpointed_interval(checkpoint_dir: str) -> int:
    """The number of intervals the checkpoint holds (0 without one); call after repair_checkpoint."""
    path = os.path.join(checkpoint_dir, BACKUP_METADATA)
    return int(artifact_files.read_json(path).get("epoch", 0)) if fileio.exists(path) else 0
