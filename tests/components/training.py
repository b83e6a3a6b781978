"""Helpers for the tests that train with the GPU-aware trainer in this process."""
from components.trainer.train import TrainingJob, train
from pipeline.config import load_config


def settings(**overrides):
    """A small, fast TrainConfig (3 epochs of batches of 64) with `overrides` (any task: no absolute bar)."""
    return load_config(train={"epochs": 3, "batch_size": 64, "input_probe_steps": 20, **overrides},
                       evaluate={"absolute_bar": None}).train


def train_here(files, output, base_model=None, **overrides):
    """Trains in this process on {"train_files", "eval_files"}, writing under the folder `output`."""
    return train(TrainingJob(settings=settings(**overrides), serving_model_dir=str(output / "serving"),
                             run_dir=str(output / "run"), checkpoint_dir=str(output / "checkpoints"),
                             base_model=base_model, **files)).to_json()
