"""The project's custom artifact types under the names their KFP schema titles give them.

A custom type compiles to the KFP schema title `accel_tfx.<Name>` (KFP titles are `<namespace>.<Name>`), and
TFX's Kubeflow V2 entrypoint imports a custom type's class by its title (tfx#6102): `accel_tfx.ValidationReport`
must therefore be an importable class path inside every step's container.
"""
from components.core.artifacts import ExportedModel, ValidationReport

__all__ = ["ExportedModel", "ValidationReport"]
