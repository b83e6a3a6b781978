"""run_fn for TFX's Trainer: adapts TFX's FnArgs to `train.train` (see there for what training does).

Consumes (through FnArgs): train/eval file patterns, serving_model_dir, model_run_dir, base_model (the
latest blessed model's serving directory, for warm start; None when there is none), and custom_config:
`settings`, the step's StepSettings (components/settings.py: the `train` and `task` config sections, the
model module, what it predicts) as JSON, `checkpoint_root`, where interrupted runs keep their checkpoints,
`code_fingerprint`, the digest of the training code (it keys TFX's cache and the checkpoints), and for the
FP32 baseline `candidate_run`, the candidate's ModelRun folder.
Produces the SavedModel in serving_model_dir and training_report.json plus TensorBoard logs in model_run_dir.
An FP32 baseline whose candidate trained in plain float32 without XLA is not trained again (the same model,
trained twice, would compare training noise, not precision): serving_model_dir then holds only
fp32_baseline_skipped.json, and the training report says why.
"""
from __future__ import annotations

import dataclasses
import os

from components.core import artifact_files, contract
from components.core.records import TrainingReport
from components.settings import StepSettings, TrainConfig
from components.trainer.checkpoints import checkpoint_dir_for
from components.trainer.train import TrainingJob, train

def step_settings_from(custom_config: dict) -> tuple[StepSettings, str, str | None]:
    """Input: the Trainer's custom_config. Output: (the step's settings record, its section a TrainConfig; the
    checkpoint root; the code fingerprint or None). Raises ValueError naming any key that is no field."""
    record = StepSettings.from_json(custom_config[contract.SETTINGS], TrainConfig, "Trainer")
    return record, custom_config[contract.CHECKPOINT_ROOT], custom_config.get(contract.CODE_FINGERPRINT)


def same_numerics_as_candidate(candidate_run: str, settings: TrainConfig) -> str:
    """Input: the candidate's ModelRun folder and this (baseline) training's settings. Output: why training
    again would give the candidate's own model ("" when the candidate's numerics differ: mixed precision or
    XLA, or this training is not plain float32 without XLA)."""
    if (settings.precision, settings.xla) != ("float32", "off"):
        return ""
    report = TrainingReport.from_json(artifact_files.read_json(os.path.join(candidate_run,
                                                                            contract.TRAINING_REPORT_FILE)))
    if report.precision == "float32" and not report.xla:
        return "candidate trained in float32 without XLA: it is its own FP32 baseline, not trained again"
    return ""


def candidate_variant(candidate_run: str, settings: TrainConfig) -> tuple[TrainConfig, str]:
    """Input: the candidate's ModelRun folder and the baseline's settings. Output: the settings and the model
    module's variant ("": the module's default) that train what the candidate served: with a search, its
    chosen variant alone, with the time budget that variant had."""
    report = TrainingReport.from_json(artifact_files.read_json(os.path.join(candidate_run,
                                                                            contract.TRAINING_REPORT_FILE)))
    chosen = next((tried for tried in report.candidates if tried["name"] == report.candidate), None)
    settings = dataclasses.replace(settings, search=False)
    if chosen:
        settings = dataclasses.replace(settings, time_budget_seconds=chosen["time_budget_seconds"])
    return settings, report.candidate


def write_skipped_baseline(serving_model_dir: str, model_run_dir: str, reason: str, candidate_run: str) -> None:
    """The outputs of a baseline that was not trained: the marker the evaluator reads (inside
    serving_model_dir, which TFX checks exists) and a training report that says why."""
    record = TrainingReport(skipped=True, skip_reason=reason, candidate_run=candidate_run).to_json()
    artifact_files.write_json(os.path.join(serving_model_dir, contract.SKIPPED_BASELINE_FILE), record)
    artifact_files.write_json(os.path.join(model_run_dir, contract.TRAINING_REPORT_FILE), record)


def run_fn(fn_args) -> None:
    record, checkpoint_root, code_fingerprint = step_settings_from(fn_args.custom_config)
    settings = record.section
    candidate_run = fn_args.custom_config.get(contract.CANDIDATE_RUN)
    reason = same_numerics_as_candidate(candidate_run, settings) if candidate_run else ""
    if reason:
        write_skipped_baseline(fn_args.serving_model_dir, fn_args.model_run_dir, reason, candidate_run)
        return
    candidate = ""
    if candidate_run:  # the FP32 baseline trains the candidate's chosen variant, with the budget it had
        settings, candidate = candidate_variant(candidate_run, settings)
    train_files = list(fn_args.train_files)
    train(TrainingJob(settings=settings, train_files=train_files, eval_files=list(fn_args.eval_files),
                      serving_model_dir=fn_args.serving_model_dir, run_dir=fn_args.model_run_dir,
                      base_model=fn_args.base_model, task_config=record.task,
                      schema_path=fn_args.schema_path,
                      checkpoint_dir=checkpoint_dir_for(checkpoint_root, train_files, settings, code_fingerprint),
                      candidate=candidate))
