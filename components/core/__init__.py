"""The light core under every part of the pipeline: what the steps, the model modules and the command line
share, and nothing that runs a step.

contract.py       every shared name: channel keys, parameters, properties, files, signatures, node ids, roles
tasks.py          what each task means (binary, multiclass, regression): one Task object per task
model_module.py   the model-module contract and its checked loader (components load models only through it)
records.py        typed records that steps hand each other (training report, model facts, evaluation, export)
paired.py         paired comparisons of two models on the same examples (the gates', and the TFLite ladder's)
artifacts.py      the pipeline's own artifact types
feature_names.py  internal names for any column name
artifact_files.py reading and writing artifact files on any filesystem (TFX's fileio)
packing.py        the packed model the Trainer trains: every fold copy's and member's weights in one network,
                  the folds, the out-of-fold scores, the members' mean served

The core imports no component, no model module, and neither TFMA nor Beam (tests/test_layers.py holds it
to that); TensorFlow and Keras only inside the functions that need them, but in the modules that define
Keras classes (task_layers.py, packing.py).
"""
