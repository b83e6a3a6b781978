"""`python -m pipeline doctor`: rules on described devices, real writability checks, and the real command here."""
import os
import sqlite3
import subprocess
import sys

import pytest

from components.trainer.device import DeviceDescription, Gpu, cpu_has_bf16
from pipeline.config import load_config
from pipeline.run_guard import exclusive_run
from pipeline.doctor import check_config_against_devices, check_writable

CPU_ONLY = DeviceDescription()
TWO_A100 = DeviceDescription(gpus=(Gpu("NVIDIA A100-SXM4-40GB", (8, 0)),) * 2)
TPU_V3 = DeviceDescription(tpu_cores=8)


def _errors(findings):
    return {finding.key for finding in findings if finding.severity == "error"}


@pytest.mark.parametrize("train, device, failing_key", [
    ({"strategy": "tpu"}, CPU_ONLY, "train.strategy"),
    ({"strategy": "tpu"}, TPU_V3, None),
    ({"strategy": "multi_worker_mirrored"}, TWO_A100, "train.strategy"),
    ({"strategy": "multi_worker_mirrored"}, DeviceDescription(num_workers=2), None),
    ({"precision": "mixed_float16"}, CPU_ONLY, "train.precision"),
    ({"precision": "mixed_float16"}, TWO_A100, None),
    ({}, CPU_ONLY, None),
])
def test_config_asking_for_missing_hardware_is_an_error(train, device, failing_key):
    findings = check_config_against_devices(load_config(train=train), device, xla_works=True)
    assert _errors(findings) == ({failing_key} if failing_key else set())


def test_xla_asked_for_but_not_compiling_is_an_error():
    config = load_config(train={"xla": "on"})
    assert _errors(check_config_against_devices(config, CPU_ONLY, xla_works=False)) == {"train.xla"}
    assert not check_config_against_devices(load_config(), CPU_ONLY, xla_works=False)  # auto falls back


def test_unwritable_output_and_locked_mlmd_are_errors(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    findings = check_writable(load_config(output_dir=str(blocker / "out")))
    assert _errors(findings) == {"output_dir"} and "not writable" in findings[0].message

    config = load_config(output_dir=str(tmp_path / "out"))
    assert check_writable(config) == []
    holder = sqlite3.connect(config.metadata_path)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN EXCLUSIVE")  # another process in the middle of a write
    try:
        findings = check_writable(config)
    finally:
        holder.rollback()
        holder.close()
    assert _errors(findings) == {"output_dir"} and "locked" in findings[0].message

    with exclusive_run(config.output_dir):  # a pipeline run holds the directory
        findings = check_writable(config)
    assert not _errors(findings) and findings[0].severity == "warning" and "a run is in progress" in findings[0].message
    assert check_writable(config) == []


def _doctor(tmp_path, config_text=""):
    config = tmp_path / "config.yaml"
    config.write_text(config_text)
    return subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--config", str(config),
                           "--output", str(tmp_path / "out")], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_doctor_describes_this_machine_and_passes_with_the_defaults(tmp_path):
    result = _doctor(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "TensorFlow 2.16.2" in out and "GPUs: none visible" in out
    assert f"CPU bfloat16 (avx512_bf16/amx_bf16): {'yes' if cpu_has_bf16() else 'no'}" in out
    assert "strategy: one_device (no accelerator: one CPU device)" in out
    assert "XLA: available" in out and "writable" in out and "doctor: 0 error(s)" in out


def test_doctor_exits_nonzero_when_the_config_asks_for_a_gpu(tmp_path):
    result = _doctor(tmp_path, "train:\n  precision: mixed_float16\n")
    assert result.returncode == 1
    assert "ERROR: train.precision: mixed_float16 asked for, but no GPU is visible" in result.stdout
