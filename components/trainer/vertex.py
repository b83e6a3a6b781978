"""The Trainer run as a Vertex AI CustomJob of several replicas (multi-worker training): TFX's Vertex AI
Trainer executor launches the job, and every replica runs components/trainer/executor.py's Executor.
A module of its own: importing it loads Google Cloud's client libraries, which a local run never needs."""
from __future__ import annotations

from tfx.dsl.components.base import executor_spec
from tfx.extensions.google_cloud_ai_platform.trainer import executor as vertex_executor

from components.trainer.component import Trainer
from components.trainer.executor import Executor


class VertexExecutor(vertex_executor.GenericExecutor):
    """Launches the CustomJob; its replicas run Executor (with the candidate's ModelRun, when given)."""

    def _GetExecutorClass(self):
        return Executor


class VertexTrainer(Trainer):
    EXECUTOR_SPEC = executor_spec.ExecutorClassSpec(VertexExecutor)
