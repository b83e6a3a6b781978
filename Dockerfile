# The step image for the Kubeflow compile (`python -m pipeline compile --image ...`): every step runs
# TFX's Kubeflow v2 container entrypoint with this project installed.
# Base: TensorFlow's own GPU image of the pinned TF version (Python 3.11, CUDA and cuDNN inside).
FROM tensorflow/tensorflow:2.16.2-gpu

WORKDIR /pipeline
# Dependencies first (their layer is reused while only the code changes). tfx 1.16 says <3.11 in its
# metadata although its dependencies exist for 3.11; constraints.txt pins every package, which makes
# --ignore-requires-python safe. The base image's tensorflow==2.16.2 satisfies the pin and stays.
COPY setup.py constraints.txt ./
RUN mkdir pipeline components models accel_tfx \
    && touch pipeline/__init__.py components/__init__.py models/__init__.py accel_tfx/__init__.py \
    && pip install --no-cache-dir --ignore-requires-python -c constraints.txt '.[kfp,s3]' \
    && pip uninstall -y accel-tfx-pipeline
COPY pipeline/ pipeline/
COPY components/ components/
COPY models/ models/
COPY accel_tfx/ accel_tfx/
COPY schemas/ schemas/
RUN pip install --no-cache-dir --no-deps --ignore-requires-python .

# The same image is the Beam workers' container under Dataflow, Flink or Spark (the compile passes it as
# --sdk_container_image / --environment_config): Beam's worker boot program, from Beam's own image of the pinned
# Beam and Python, is its entrypoint. Pipeline steps name their own command, so they never run it.
COPY --from=apache/beam_python3.11_sdk:2.61.0 /opt/apache/beam /opt/apache/beam
ENTRYPOINT ["/opt/apache/beam/boot"]

# The compile points the bundled schema at /pipeline/schemas; TFX's entrypoint imports our executors, and our
# custom artifact types by their KFP schema titles (accel_tfx.<Name>).
ENV PYTHONPATH=/pipeline TF_CPP_MIN_LOG_LEVEL=1
