"""The HTML run report of the production run, rendered by headless Chromium (Debian's chromium package)."""
import glob
import html
import json
import os
import re
import shutil
import subprocess

import pytest

from components.model_export.executor import REPORT_FILE as EXPORT_REPORT
from components.precision_evaluator.gates import REPORT_FILE as PRECISION_REPORT

pytestmark = pytest.mark.e2e

# Records, once the page has loaded, whether each image decoded (the test's own addition to a copy).
IMAGE_PROBE = ("<script>addEventListener('load', () => { document.body.dataset.images = Array.from(document.images)"
               ".map(i => i.complete && i.naturalWidth > 0 ? 'ok' : 'broken').join(' '); });</script>")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium():
    path = shutil.which("chromium")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing: .ci/run installs Debian's chromium package")
        pytest.skip("Debian's chromium package is not installed (apt-get install -y chromium)")
    return path


def _rendered_text(page_path, tmp_path):
    """Input: an HTML file. Output: (the DOM Chromium built, as text without tags; the image probe's result)."""
    probed = tmp_path / "page.html"
    probed.write_text(open(page_path, encoding="utf-8").read().replace("</body>", IMAGE_PROBE + "</body>"))
    result = subprocess.run([_chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                             "--virtual-time-budget=5000", "--dump-dom", probed.as_uri()],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    images = re.search(r'<body[^>]*data-images="([^"]*)"', dom)
    text = html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom)))
    return text, (images.group(1).split() if images else [])


def test_report_renders_in_chromium_with_the_key_numbers_and_every_plot(production, tmp_path):
    text, images = _rendered_text(production.report, tmp_path)

    evaluation_dirs = glob.glob(os.path.join(production.config.pipeline_root, "PrecisionEvaluator", "evaluation", "*"))
    first_evaluation = min(evaluation_dirs, key=lambda folder: int(os.path.basename(folder)))
    precision = json.load(open(os.path.join(first_evaluation, PRECISION_REPORT)))
    export = json.load(open(os.path.join(production.pushed_dir, EXPORT_REPORT)))

    assert "Run report: taxi-accel" in text and "completed" in text
    assert f"Pushed to {production.pushed_dir}" in text
    assert f"Blessing: {precision['summary']}" in text
    overall = precision["metrics"]["overall"]
    assert f"overall {overall['candidate']['example_count']:,.0f} {overall['candidate']['auc']:.4f} " \
           f"{overall['fp32_baseline']['auc']:.4f}" in text  # the per-slice table's first row
    for check in precision["checks"]:
        assert f"{check['gate']} {check['model']} {check['metric']} {check['value']:.4f}" in text
    for name, variant in export["variants"].items():  # the TFLite ladder: size, latency, AUC per variant
        assert f"{name} {variant['size_bytes']:,} {variant['median_latency_us']:.1f} {variant['auc']:.4f}" in text
    for section in ("Steps", "Data", "Anomalies and drift", "Training", "Evaluation: candidate vs FP32 baseline",
                    "Export: TFLite ladder", "Push"):
        assert section in text
    assert "Split train:" in text and "Split eval:" in text
    # Statistics plots, string top values, training curves, TFLite ladder: each a decoded image.
    assert images == ["ok"] * 4, images


def test_a_blocked_run_report_shows_the_anomalies(tmp_path):
    from pipeline.run_report import render_html
    facts = {"pipeline": "taxi-accel", "run_id": "r1", "data_root": "/data", "started": "2026-11-22 00:00:00 UTC",
             "seconds": 3.0, "steps": [("TFRecordIngest", "ran", 1.0), ("ValidationGate", "failed", 0.1)],
             "anomalies": {"train": [("fare", "ERROR", "Unexpected data type", "Expected FLOAT, got BYTES")]},
             "validation": {}, "training": {}, "evaluation": {}, "export": {}, "pushed_to": None,
             "error": "BlockingAnomaliesError: train: fare: Unexpected data type"}
    page = tmp_path / "blocked.html"
    page.write_text(render_html(facts))

    text, images = _rendered_text(page, tmp_path)

    assert "FAILED: BlockingAnomaliesError" in text
    assert "train fare ERROR Unexpected data type Expected FLOAT, got BYTES" in text
    assert "The ValidationGate stopped the run before training" in text
    assert "No training in this run." in text and "Nothing pushed in this run" in text
    assert images == []
