"""run_fn for TFX's Trainer: adapts TFX's FnArgs to `train.train` (see there for what training does).

Consumes (through FnArgs): train/eval file patterns, serving_model_dir, model_run_dir, base_model (the
latest blessed model's serving directory, for warm start; None when there is none), and custom_config:
the pipeline's TrainConfig as a dict plus `checkpoint_root`, where interrupted runs keep their checkpoints.
Produces the SavedModel in serving_model_dir and training_report.json plus TensorBoard logs in model_run_dir.
"""
from __future__ import annotations

from components.trainer.train import TrainingJob, checkpoint_dir_for, train


def run_fn(fn_args) -> None:
    # TFX's Vertex AI Trainer keys (ai_platform_*) only say where the job runs: not training settings.
    settings = {key: value for key, value in fn_args.custom_config.items() if not key.startswith("ai_platform_")}
    checkpoint_root = settings.pop("checkpoint_root")
    train(TrainingJob(settings=settings, train_files=list(fn_args.train_files), eval_files=list(fn_args.eval_files),
                      serving_model_dir=fn_args.serving_model_dir, run_dir=fn_args.model_run_dir,
                      base_model=fn_args.base_model,
                      checkpoint_dir=checkpoint_dir_for(checkpoint_root, list(fn_args.train_files), settings)))
