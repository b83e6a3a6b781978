"""run_fn for TFX's Trainer: adapts TFX's FnArgs to `train.train` (see there for what training does).

Consumes (through FnArgs): train/eval file patterns, serving_model_dir, model_run_dir, base_model (the
latest blessed model's serving directory, for warm start; None when there is none), and custom_config:
the pipeline's TrainConfig as a dict plus `checkpoint_root`, where interrupted runs keep their checkpoints,
and `code_fingerprint`, the digest of the training code (it keys TFX's cache and the checkpoints).
Produces the SavedModel in serving_model_dir and training_report.json plus TensorBoard logs in model_run_dir.
"""
from __future__ import annotations

from components import contract
from components.settings import TrainConfig, section_from_dict
from components.trainer.checkpoints import checkpoint_dir_for
from components.trainer.train import TrainingJob, train

VERTEX_KEY_PREFIX = "ai_platform_"  # TFX's Vertex AI Trainer keys only say where the job runs: not settings


def train_config_from(custom_config: dict) -> tuple[TrainConfig, str, str | None]:
    """Input: the Trainer's custom_config. Output: (the TrainConfig it carries, the checkpoint root, the code
    fingerprint or None). Raises ValueError naming any key that is no TrainConfig field."""
    settings = {key: value for key, value in custom_config.items() if not key.startswith(VERTEX_KEY_PREFIX)}
    checkpoint_root = settings.pop(contract.CHECKPOINT_ROOT)
    code_fingerprint = settings.pop(contract.CODE_FINGERPRINT, None)
    return (section_from_dict(TrainConfig, settings, "Trainer custom_config", "training"), checkpoint_root,
            code_fingerprint)


def run_fn(fn_args) -> None:
    settings, checkpoint_root, code_fingerprint = train_config_from(fn_args.custom_config)
    train_files = list(fn_args.train_files)
    train(TrainingJob(settings=settings, train_files=train_files, eval_files=list(fn_args.eval_files),
                      serving_model_dir=fn_args.serving_model_dir, run_dir=fn_args.model_run_dir,
                      base_model=fn_args.base_model,
                      checkpoint_dir=checkpoint_dir_for(checkpoint_root, train_files, settings, code_fingerprint)))
