"""PrecisionEvaluator throughput: model-examples/s of its executor on a set of Examples and models.

    .venv/bin/python bench/evaluator_speed.py --output OUTPUT_DIR [--config CONFIG] [--production] [--repeats 2]
    .venv/bin/python bench/evaluator_speed.py --examples URI --model URI --baseline-model URI
        [--production-model URI | --production] [--repeats 2]
    options: [--beam-arg=--direct_running_mode=in_memory ...] [--executor components.precision_evaluator.executor]
             [--work DIR]

With --output, the newest Examples (TFRecordIngest), candidate (Trainer) and FP32 baseline
(Fp32BaselineTrainer) of a finished `python -m pipeline run --output OUTPUT_DIR`, from its MLMD; or the
artifact folders given (an Examples folder with Split-eval/, Model folders with Format-Serving/). Runs the
evaluator executor's Do on them `--repeats` times, exactly as the pipeline does (the `evaluate` settings of
`--config`, by default the default config's; a Beam pipeline from the given Beam arguments, default the
pipeline's `--direct_running_mode=in_memory`).
`--production` scores the FP32 baseline a second time as the production model (three models, as on a run
with a blessed model). Prints, per run, the wall time of Do, eval examples x models / seconds, and the
candidate's overall AUC; the reports stay under `--work` (default: a temporary folder) for comparison. The runs
are appended as a record to bench/results/evaluator_speed.jsonl (bench/records.py).
"""
from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import records  # noqa: E402 - bench/records.py, beside this script

import tensorflow as tf  # noqa: E402
from tfx.components.util import examples_utils  # noqa: E402
from tfx.dsl.components.base import base_beam_executor  # noqa: E402
from tfx.proto import example_gen_pb2  # noqa: E402
from tfx.types import artifact_utils, standard_artifacts  # noqa: E402

from components.core import contract  # noqa: E402
from components.precision_evaluator import gates  # noqa: E402
from pipeline.runs import mlmd  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.dag.wiring import step_settings  # noqa: E402


def latest_inputs(output_dir: str, config_path: str | None) -> dict[str, object]:
    """Input: a pipeline output folder and its config (None: the default). Output: {"examples", "model",
    "baseline_model"}: the newest artifacts of TFRecordIngest, Trainer and Fp32BaselineTrainer in its MLMD, as
    TFX artifacts."""
    config = load_config(config_path, output_dir=output_dir)
    store = mlmd.open_store(config)
    if store is None:
        raise SystemExit(f"no MLMD under {output_dir}: run `python -m pipeline run --output {output_dir}` first")
    found = {}
    for key, node, output_key in (("examples", "TFRecordIngest", "examples"), ("model", "Trainer", "model"),
                                  ("baseline_model", "Fp32BaselineTrainer", "model")):
        artifact = mlmd.newest_output(store, config.pipeline_name, node, output_key)
        if artifact is None:
            raise SystemExit(f"no {node} output in {config.metadata_path}")
        artifact_type = store.get_artifact_types_by_id([artifact.type_id])[0]
        found[key] = artifact_utils.deserialize_artifact(artifact_type, artifact)
    return found


def artifacts_at(examples_uri: str, model_uris: dict[str, str]) -> dict[str, object]:
    """Input: an Examples folder (Split-<name>/ subfolders of TFRecord files) and {input key: Model folder}.
    Output: the same dict as latest_inputs, as TFX artifacts."""
    examples = standard_artifacts.Examples()
    examples.uri = examples_uri
    splits = sorted(name[len("Split-"):] for name in tf.io.gfile.listdir(examples_uri) if name.startswith("Split-"))
    examples.split_names = artifact_utils.encode_split_names([name.rstrip("/") for name in splits])
    examples_utils.set_payload_format(examples, example_gen_pb2.PayloadFormat.FORMAT_TF_EXAMPLE)
    found = {"examples": examples}
    for key, uri in model_uris.items():
        found[key] = standard_artifacts.Model()
        found[key].uri = uri
    return found


def eval_examples(examples) -> int:
    """The eval split's record count: as TFRecordIngest recorded it, else counted."""
    if examples.has_custom_property("eval_examples"):
        return int(examples.get_int_custom_property("eval_examples"))
    files = tf.io.gfile.glob(os.path.join(artifact_utils.get_split_uri([examples], "eval"), "*"))
    count = 0
    for path in files:
        with tf.io.gfile.GFile(path, "rb") as handle:
            gzip = handle.read(2) == b"\x1f\x8b"
        count += sum(1 for _ in tf.data.TFRecordDataset(path, compression_type="GZIP" if gzip else ""))
    return count


def run_once(executor_class, inputs: dict, production: bool, beam_args: list[str], work: str,
             config_path: str | None) -> tuple[float, dict]:
    """One Do() of the executor. Output: (seconds, the precision report)."""
    os.makedirs(work, exist_ok=True)
    evaluation = standard_artifacts.ModelEvaluation()
    evaluation.uri = os.path.join(work, "evaluation")
    blessing = standard_artifacts.ModelBlessing()
    blessing.uri = os.path.join(work, "blessing")
    input_dict = {"examples": [inputs["examples"]], "model": [inputs["model"]],
                  "baseline_model": [inputs["baseline_model"]]}
    if production:
        input_dict["production_model"] = [inputs.get("production_model", inputs["baseline_model"])]
    config = load_config(config_path)
    settings = step_settings(config, config.evaluate).to_json()  # the record the pipeline hands the step
    context = base_beam_executor.BaseBeamExecutor.Context(beam_pipeline_args=beam_args,
                                                          tmp_dir=os.path.join(work, "tmp"))
    started = time.monotonic()
    executor_class(context).Do(input_dict, {"evaluation": [evaluation], "blessing": [blessing]},
                               {contract.SETTINGS: settings})
    seconds = time.monotonic() - started
    with open(os.path.join(evaluation.uri, contract.PRECISION_REPORT_FILE)) as handle:
        return seconds, json.load(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", help="output folder of a finished `python -m pipeline run`")
    parser.add_argument("--config", help="the run's config, for its pipeline name and evaluate settings "
                                         "(default: the default config)")
    parser.add_argument("--examples", help="an Examples folder (instead of, or overriding, --output's)")
    parser.add_argument("--model", help="the candidate Model folder")
    parser.add_argument("--baseline-model", help="the FP32 baseline Model folder")
    parser.add_argument("--production-model", help="a production Model folder (3 models)")
    parser.add_argument("--production", action="store_true",
                        help="also score a production model (3 models): the FP32 baseline again, if none is given")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--beam-arg", action="append", dest="beam_args", metavar="ARG",
                        help="a Beam pipeline argument (repeat); default --direct_running_mode=in_memory")
    parser.add_argument("--executor", default="components.precision_evaluator.executor",
                        help="module whose Executor class is timed")
    parser.add_argument("--work", help="where each run's evaluation and blessing go (default: a temporary folder)")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    executor_class = importlib.import_module(args.executor).Executor
    inputs = latest_inputs(args.output, args.config) if args.output else {}
    given = {key: uri for key, uri in (("model", args.model), ("baseline_model", args.baseline_model),
                                      ("production_model", args.production_model)) if uri}
    if args.examples or given:
        overrides = artifacts_at(args.examples or inputs["examples"].uri, given)
        inputs.update(overrides if args.examples else {key: overrides[key] for key in given})
    missing = {"examples", "model", "baseline_model"} - set(inputs)
    if missing:
        parser.error(f"give --output or {', '.join('--' + key.replace('_', '-') for key in sorted(missing))}")
    production = args.production or "production_model" in inputs
    beam_args = args.beam_args or ["--direct_running_mode=in_memory"]
    rows = eval_examples(inputs["examples"])
    models = 3 if production else 2
    work = args.work or tempfile.mkdtemp(prefix="evaluator_speed-")
    print(f"{args.executor}: {rows:,} eval examples x {models} models; Beam {' '.join(beam_args)}; "
          f"{os.cpu_count()} cores")
    print(f"{'run':>3} {'seconds':>8} {'model-examples/s':>17} {'candidate metric':>16}")
    runs = []
    for repeat in range(args.repeats):
        seconds, report = run_once(executor_class, inputs, production, beam_args,
                                   os.path.join(work, f"run-{repeat + 1}"), args.config)
        auc = report["metrics"][gates.OVERALL][gates.CANDIDATE][report["primary_metric"]]
        print(f"{repeat + 1:>3} {seconds:>8.1f} {rows * models / seconds:>17,.0f} {auc:>16.4f}", flush=True)
        runs.append({"seconds": seconds, "model_examples_per_s": rows * models / seconds, "candidate_metric": auc})
    records.append("evaluator_speed", f"{args.executor}, {rows:,} eval examples x {models} models", {
        "executor": args.executor, "eval_examples": rows, "models": models, "beam_args": beam_args,
        "metric": report["primary_metric"], "runs": runs})
    print(f"reports under {work}")


if __name__ == "__main__":
    main()
