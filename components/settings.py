"""The pipeline's typed config, every default in one place: what each section of the YAML file may set.

`pipeline.config.load_config` reads YAML overrides into these dataclasses and checks them. They live here,
below the pipeline, because the components take their own sections as typed settings (the Trainer a
TrainConfig, the evaluator an EvaluateConfig, ModelExport an ExportConfig) and components never import
the pipeline.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from components.model_export.variants import TFLITE_VARIANTS

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass
class IngestConfig:
    eval_fraction: float = 1 / 3  # share of records hashed into the eval split (TFX's default 2:1)
    span_window: int = 1  # how many of the latest span-N folders one run reads together (1 = the latest)


@dataclass
class TrainConfig:
    model: str = "models.taxi"  # module with INPUTS, LABEL_INPUTS, make_label, build_preprocessing, build_model
    batch_size: int = 256  # per replica; the global batch is this times the replicas in sync
    epochs: int = 10  # passes over the training data
    learning_rate: float = 0.003  # for one replica's batch; scaled linearly with replicas x accumulation
    warmup_steps: int = 20  # linear learning-rate warmup from 0
    gradient_accumulation_steps: int = 1  # >1: apply gradients once per this many batches
    shuffle_buffer: int = 10_000
    cache_max_mb: int = 1024  # keep the records in memory after the first pass when they fit in this
    steps_per_execution: int = 10  # train steps per call into the device (less host overhead per step)
    strategy: str = "auto"  # auto | one_device | mirrored | multi_worker_mirrored | tpu
    precision: str = "auto"  # auto | float32 | mixed_float16 | mixed_bfloat16
    xla: str = "auto"  # auto (on for GPUs, TPUs and bf16 CPUs, when the model compiles) | on | off
    gpu_memory_growth: bool = True
    gpu_memory_limit_mb: int = 0  # per GPU; 0 = no limit
    checkpoint_every_steps: int = 0  # training interval, a checkpoint at its end; 0 = one pass over the data
    checkpoint_min_seconds: float = 30.0  # skip an interval's checkpoint until this long after the last one
    input_probe_steps: int = 200  # steps on in-memory batches to measure input wait; 0 = skip
    profile_from_step: int = 10  # TensorBoard profiler trace window start...
    profile_steps: int = 0  # ...and length in steps; 0 = no trace
    seed: int = 0  # weights init and shuffle order
    warm_start: bool = True  # start from the latest blessed model (its preprocessing and weights) when there is one


@dataclass
class EvaluateConfig:
    slice_feature: str = "payment_type"  # metrics are also reported per value of this feature ("" = none)
    min_auc: float = 0.9  # absolute bar a model must clear to be blessed
    max_auc_drop_vs_fp32: float = 0.005  # how far below the FP32 baseline's AUC the candidate may fall
    max_accuracy_drop_vs_fp32: float = 0.005  # ...and its binary accuracy
    max_auc_drop_vs_production: float = 0.01  # how far below the latest blessed model's AUC a model may fall
    max_accuracy_drop_vs_production: float = 0.01  # ...and its binary accuracy
    fallback_to_fp32: bool = True  # candidate fails FP32 parity, baseline passes the rest: bless the baseline


@dataclass
class ExportConfig:
    tflite_variants: list[str] = field(default_factory=lambda: list(TFLITE_VARIANTS))  # converted and evaluated
    max_tflite_auc_drop: float = 0.01  # a variant whose AUC falls further below the SavedModel's is rejected
    representative_examples: int = 300  # training examples that calibrate full-int8 quantization
    latency_examples: int = 300  # single-example invocations timed per variant (median reported)


@dataclass
class StepResources:
    cpu: float = 2.0  # vCPUs, requested and limited
    memory_gb: float = 8.0  # GB, requested and limited
    accelerator: str = ""  # e.g. NVIDIA_TESLA_T4 (Vertex AI) or nvidia.com/gpu (Kubeflow); "" = none
    accelerator_count: int = 0


@dataclass
class ResourcesConfig:
    """Per-step resources in the Kubeflow compile (the local runner uses this machine as it is)."""
    data: StepResources = field(default_factory=StepResources)  # ingest, statistics, validation, push
    training: StepResources = field(default_factory=lambda: StepResources(  # both Trainers
        cpu=8.0, memory_gb=32.0, accelerator="NVIDIA_TESLA_T4", accelerator_count=1))
    evaluation: StepResources = field(default_factory=lambda: StepResources(  # TFMA and the TFLite ladder
        cpu=4.0, memory_gb=16.0))
    # Multi-worker training (Kubeflow compile only): >1 runs each Trainer as a Vertex AI CustomJob of this many
    # replicas (a chief and workers, each with `training`'s accelerators on `training_machine_type`); Vertex
    # sets TF_CONFIG on each, and the Trainer picks MultiWorkerMirroredStrategy from it.
    training_workers: int = 1
    training_machine_type: str = "n1-standard-8"
    vertex_project: str = ""  # required when training_workers > 1
    vertex_region: str = "us-central1"


@dataclass
class PipelineConfig:
    pipeline_name: str = "taxi-accel"
    data_root: str = "data/taxi"  # TFRecord files, or span-N/ folders of them (see ingest.span_window)
    output_dir: str = "output"  # local: MLMD (SQLite), the run lock and reports; by default artifacts and serving too
    artifact_root: str = ""  # pipeline root, where artifacts live: a path or a URI (gs://, s3://); default <output_dir>/pipeline
    serving_dir: str = ""  # where blessed models are pushed, a path or a URI; default <output_dir>/serving
    schema_path: str = os.path.join(PROJECT_ROOT, "schemas", "taxi", "schema.pbtxt")
    enable_cache: bool = True
    beam_pipeline_args: list[str] = field(default_factory=lambda: ["--direct_running_mode=in_memory"])
    ingest: IngestConfig = field(default_factory=IngestConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    resources: ResourcesConfig = field(default_factory=ResourcesConfig)

    @property
    def pipeline_root(self) -> str:
        return self.artifact_root or os.path.join(self.output_dir, "pipeline")

    @property
    def metadata_path(self) -> str:
        return os.path.join(self.output_dir, "metadata.sqlite")

    @property
    def push_dir(self) -> str:
        return self.serving_dir or os.path.join(self.output_dir, "serving")
