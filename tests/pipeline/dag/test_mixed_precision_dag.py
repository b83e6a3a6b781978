"""The real DAG with the paths a GPU or TPU host takes, forced on this CPU: a candidate trained in
mixed_bfloat16 (numerics that differ from plain float32, as mixed_float16 on a GPU does), so that the FP32
baseline really trains, the fp32_parity gate compares the two on the same examples, and the gates bless the
candidate or fall back to the baseline; then a next span whose candidate trained far too little, refused by
the vs_production gate against the model that run pushed, with the serving directory left byte-identical.

Elsewhere the real-DAG tests follow whatever the Trainer chose on the machine they run on (plain float32 on
a CPU without XLA gains), which leaves these paths untested on CPU-only CI. Keras's bfloat16 policy runs on
this CPU (natively where the CPU has bfloat16 instructions, emulated elsewhere).
"""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from components.core import contract
from pipeline.config import load_config
from pipeline.onboarding.example_data import write_taxi_span
from pipeline.dag.local_runner import run_local
from tests.pipeline.span_files import private_copy

pytestmark = pytest.mark.e2e

# A forced bfloat16 policy without XLA: XLA's compile would cost more than this short training takes.
BF16_TRAIN = {"epochs": 3, "precision": "mixed_bfloat16", "xla": "off"}
# Too little training and no warm start: a candidate that learned something (AUC about 0.74 here, well clear
# of the trivial predictor) and is far worse than the model in production (about 0.95).
STARVED_TRAIN = {"epochs": 1, "learning_rate": 1e-3, "warmup_steps": 0, "warm_start": False}


def _newest(config, node, key):
    folders = tf.io.gfile.glob(os.path.join(config.pipeline_root, node, key, "*"))
    return max(folders, key=lambda folder: int(os.path.basename(folder)))


def _read_json(folder, name):
    with open(os.path.join(folder, name)) as handle:
        return json.load(handle)


def _checks(report):
    return {(c["gate"], c["model"], c["metric"]): c for c in report["checks"]}


@pytest.fixture(scope="module")
def data_root(taxi_span_root, tmp_path_factory):
    """A private copy of the shared span-1 (the refusal stage adds span 2)."""
    return private_copy(taxi_span_root, tmp_path_factory.mktemp("bf16-data"))


@pytest.fixture(scope="module")
def bf16_run(data_root, tmp_path_factory):
    """The first run on span 1, its candidate in mixed_bfloat16: blessed and pushed (candidate or fallback)."""
    output = tmp_path_factory.mktemp("bf16-run")
    config = load_config(data_root=data_root, output_dir=str(output), train=BF16_TRAIN,
                         evaluate={"absolute_bar": 0.8}, export={"latency_examples": 50})
    summary = run_local(config)
    evaluation = _newest(config, "PrecisionEvaluator", contract.EVALUATION)
    return {"config": config, "summary": summary,
            "candidate_run": _newest(config, contract.TRAINER_NODE, contract.MODEL_RUN),
            "candidate_model": _newest(config, contract.TRAINER_NODE, contract.MODEL),
            "baseline_run": _newest(config, contract.FP32_BASELINE_NODE, contract.MODEL_RUN),
            "baseline_model": _newest(config, contract.FP32_BASELINE_NODE, contract.MODEL),
            "precision": _read_json(evaluation, contract.PRECISION_REPORT_FILE),
            "blessing": _newest(config, "PrecisionEvaluator", contract.BLESSING)}


@pytest.fixture(scope="module")
def refused_run(bf16_run, data_root, tree_digest):
    """Span 2, trained from scratch for a few steps, against the pushed model; no absolute bar, so that only
    the comparison with production stands between this candidate and a push."""
    first = bf16_run["config"]
    write_taxi_span(data_root, span=2, max_rows=3000, first_row=3000, num_shards=2)
    config = load_config(data_root=data_root, output_dir=first.output_dir, train=STARVED_TRAIN,
                         evaluate={"absolute_bar": None}, export={"latency_examples": 50})
    versions, digest = sorted(os.listdir(config.push_dir)), tree_digest(config.push_dir)
    summary = run_local(config)
    evaluation = _newest(config, "PrecisionEvaluator", contract.EVALUATION)
    return {"config": config, "summary": summary,
            "versions_before": versions, "digest_before": digest,
            "versions_after": sorted(os.listdir(config.push_dir)), "digest_after": tree_digest(config.push_dir),
            "precision": _read_json(evaluation, contract.PRECISION_REPORT_FILE),
            "candidate_run": _newest(config, contract.TRAINER_NODE, contract.MODEL_RUN),
            "blessing": _newest(config, "PrecisionEvaluator", contract.BLESSING),
            "export": _read_json(_newest(config, "ModelExport", contract.EXPORTED_MODEL),
                                 contract.EXPORT_REPORT_FILE)}


def test_a_bfloat16_candidate_has_its_fp32_baseline_trained_beside_it(bf16_run):
    summary = bf16_run["summary"]
    assert [s.status for s in summary.steps] == ["ran"] * len(summary.steps), summary.steps
    candidate = _read_json(bf16_run["candidate_run"], contract.TRAINING_REPORT_FILE)
    baseline = _read_json(bf16_run["baseline_run"], contract.TRAINING_REPORT_FILE)
    assert (candidate["precision"], candidate["precision_reason"], candidate["xla"]) == (
        "mixed_bfloat16", "set in the config", False)
    # The baseline trained (no skip marker): the same training in plain float32 without XLA.
    assert "skipped" not in baseline, baseline
    assert not os.path.exists(os.path.join(bf16_run["baseline_model"], "Format-Serving",
                                           contract.SKIPPED_BASELINE_FILE))
    assert (baseline["precision"], baseline["xla"]) == ("float32", False)
    for key in ("train_examples", "global_batch", "total_steps", "steps_run"):
        assert baseline[key] == candidate[key], key
    assert baseline["final_metrics"]["val_auc"] > 0.8 and candidate["final_metrics"]["val_auc"] > 0.8
    assert "mixed_bfloat16" in summary.render()


def test_fp32_parity_compares_the_candidate_with_its_trained_baseline(bf16_run):
    report = bf16_run["precision"]
    assert report["fp32_parity"] == "compared"
    assert report["models"]["candidate"]["uri"] == bf16_run["candidate_model"]
    assert report["models"]["fp32_baseline"]["uri"] == bf16_run["baseline_model"]
    overall = report["metrics"]["overall"]
    assert overall["candidate"]["example_count"] == overall["fp32_baseline"]["example_count"] == report["eval_examples"]
    parity = _checks(report)[("fp32_parity", "candidate", "auc")]
    assert parity["reference_model"] == "fp32_baseline" and not parity["note"].startswith("n/a")
    low, high = parity["interval"]
    assert low < high and low <= parity["improvement"] <= high and parity["examples"] == report["eval_examples"]
    assert parity["tolerance"] == bf16_run["config"].evaluate.max_drop_vs_fp32
    assert parity["improvement"] == pytest.approx(parity["value"] - parity["reference"], abs=1e-9)
    # Exact AUC on the paired predictions vs TFMA's 10,000 thresholds, for each model.
    assert abs(parity["value"] - overall["candidate"]["auc"]) < 1e-3
    assert abs(parity["reference"] - overall["fp32_baseline"]["auc"]) < 1e-3
    assert parity["passed"] == (high >= -parity["tolerance"])
    # Different numerics, different models: the two do not score the eval split identically.
    assert overall["candidate"]["binary_crossentropy"] != overall["fp32_baseline"]["binary_crossentropy"]


def test_the_blessing_is_what_the_parity_check_decided_and_that_model_is_pushed(bf16_run):
    report, config = bf16_run["precision"], bf16_run["config"]
    facts = bf16_run["summary"].facts
    checks = _checks(report)
    parity = checks[("fp32_parity", "candidate", "auc")]
    assert checks[("beats_trivial", "candidate", "auc")]["passed"]
    assert report["blessed"] is True and facts.blessed is True
    assert os.path.exists(os.path.join(bf16_run["blessing"], "BLESSED"))
    if parity["passed"]:
        assert report["chosen_model"] == "candidate" and all(c["passed"] for c in checks.values())
        assert report["summary"] == "candidate blessed: every gate passed"
    else:  # the fallback: the baseline passed its own gates and is blessed instead
        assert report["chosen_model"] == "fp32_baseline" and "FP32 baseline blessed instead" in report["summary"]
        assert all(c["passed"] for (_, model, _), c in checks.items() if model == "fp32_baseline")
    chosen = report["models"][report["chosen_model"]]
    # The pushed version is the chosen model's export: its SavedModel scores raw tf.Examples in float32.
    assert facts.pushed_to and os.listdir(config.push_dir) == [os.path.basename(facts.pushed_to)]
    info = _read_json(facts.pushed_to, contract.PUSH_INFO_FILE)
    assert info["source_model"] == chosen
    eval_files = tf.io.gfile.glob(os.path.join(_newest(config, "TFRecordIngest", contract.EXAMPLES), "Split-eval", "*"))
    records = list(tf.data.TFRecordDataset(eval_files, compression_type="GZIP").take(200).as_numpy_iterator())
    outputs = tf.saved_model.load(facts.pushed_to).signatures[contract.SERVING_SIGNATURE](examples=tf.constant(records))
    probabilities = outputs["probabilities"].numpy().reshape(-1)
    assert probabilities.dtype == np.float32 and len(probabilities) == len(records)
    assert ((probabilities >= 0) & (probabilities <= 1)).all()
    assert "blessed: yes" in bf16_run["summary"].render()


def test_a_genuinely_better_production_model_refuses_the_candidate_and_nothing_is_pushed(bf16_run, refused_run):
    report, facts = refused_run["precision"], refused_run["summary"].facts
    first = bf16_run["precision"]
    # The production model is the one the first run blessed and pushed.
    assert report["models"]["production"] == first["models"][first["chosen_model"]]
    candidate = _read_json(refused_run["candidate_run"], contract.TRAINING_REPORT_FILE)
    assert candidate["warm_start"]["applied"] is False
    assert candidate["learning_rate"] == pytest.approx(1e-3 * candidate["replicas"])  # scaled with the replicas
    vs_production = _checks(report)[("vs_production", "candidate", "auc")]
    assert vs_production["reference_model"] == "production" and vs_production["passed"] is False
    # Refused on the evidence: the whole interval lies below the production model by more than the tolerance.
    low, high = vs_production["interval"]
    assert vs_production["tolerance"] == refused_run["config"].evaluate.max_drop_vs_production
    assert low <= vs_production["improvement"] <= high < -vs_production["tolerance"]
    overall = report["metrics"]["overall"]
    assert abs(vs_production["reference"] - overall["production"]["auc"]) < 1e-3
    assert vs_production["value"] < vs_production["reference"]
    # It is production that refuses it: every other gate passed (it beats the trivial predictor; a candidate
    # whose numerics differ may also fail fp32_parity, and then its FP32 baseline is refused by production too).
    assert all(c["passed"] for c in report["checks"] if c["gate"] not in ("vs_production", "fp32_parity"))
    assert report["summary"].startswith("candidate not blessed: failed ") and "vs_production" in report["summary"]
    assert report["blessed"] is False and report["chosen_model"] is None and facts.blessed is False
    assert all(not c["passed"] for c in report["checks"] if c["gate"] == "vs_production")
    assert os.path.exists(os.path.join(refused_run["blessing"], "NOT_BLESSED"))
    assert not os.path.exists(os.path.join(refused_run["blessing"], "BLESSED"))
    # Nothing exported or pushed: the serving directory holds exactly the first version, byte for byte.
    assert refused_run["export"]["exported"] is False and facts.pushed_to is None
    assert refused_run["versions_after"] == refused_run["versions_before"] == [
        os.path.basename(bf16_run["summary"].facts.pushed_to)]
    assert refused_run["digest_after"] == refused_run["digest_before"]
    rendered = refused_run["summary"].render()
    assert "candidate not blessed" in rendered and "nothing pushed" in rendered
