"""The pipeline's own artifact types (the rest are TFX's standard ones). Each TYPE_NAME is
`accel_tfx.<Name>`, the form KFP v2 schema titles need, and accel_tfx/ re-exports the class under that path
so a Kubeflow step can import it by its title."""
from tfx import types


class ValidationReport(types.Artifact):
    """validation_report.json: per split, the anomalies and drift found and whether each one blocks the run."""
    TYPE_NAME = "accel_tfx.ValidationReport"


class ExportedModel(types.Artifact):
    """saved_model/ (serving), tflite/<variant>.tflite (devices) and the export report."""
    TYPE_NAME = "accel_tfx.ExportedModel"
