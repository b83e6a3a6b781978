"""`python -m pipeline doctor`: rules on described devices, real writability checks, and the command on this
machine (whatever it has) and on described ones."""
import dataclasses
import os
import sqlite3
import subprocess
import sys

import pytest

import components.trainer.device
from components.trainer.device import DeviceDescription, Gpu, choose_strategy, cpu_has_bf16, describe_devices
from pipeline.commands import doctor
from pipeline.commands.cli import main as cli_main
from pipeline.config import PROJECT_ROOT, load_config
from tests.config_text import taxi_config_text
from pipeline.runs.run_guard import exclusive_run
from pipeline.commands.doctor import check_config_against_devices, check_writable

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


def test_a_run_in_progress_is_a_warning_even_while_it_holds_mlmd(tmp_path):
    config = load_config(output_dir=str(tmp_path / "out"))
    assert check_writable(config) == []
    busy = sqlite3.connect(config.metadata_path)
    busy.execute("CREATE TABLE t (x)")
    busy.execute("BEGIN EXCLUSIVE")  # the running pipeline in the middle of an MLMD write
    try:
        with exclusive_run(config.output_dir):
            findings = check_writable(config)
    finally:
        busy.rollback()
        busy.close()
    assert [(f.severity, f.key) for f in findings] == [("warning", "output_dir")], findings
    assert "a run is in progress" in findings[0].message


def _doctor_here(capsys, tmp_path, config_text=""):
    """Runs `doctor` in this process (so a pinned device description applies). Output: (exit code, stdout)."""
    config = tmp_path / "config.yaml"
    config.write_text(taxi_config_text(config_text))
    capsys.readouterr()
    code = cli_main(["doctor", "--config", str(config), "--output", str(tmp_path / "out")])
    return code, capsys.readouterr().out


def _pin_devices(monkeypatch, device):
    """Makes the code read `device` wherever it describes this machine (CPU bf16 as this CPU has it)."""
    pinned = dataclasses.replace(device, cpu_bf16=cpu_has_bf16())
    monkeypatch.setattr(components.trainer.device, "describe_devices", lambda tf_config=None: pinned)
    return pinned


def _device_lines(device) -> list[str]:
    """The starts of the lines doctor prints for `device`'s GPUs (memory left out: nvidia-smi's)."""
    if not device.gpus:
        return ["GPUs: none visible"]
    return [f"GPU {index}: {gpu.name}, compute capability {gpu.compute_capability}, "
            for index, gpu in enumerate(device.gpus)]


def test_doctor_describes_the_devices_the_trainer_reads(capsys, tmp_path):
    device = describe_devices()  # what the Trainer reads on this machine: with or without GPUs
    code, out = _doctor_here(capsys, tmp_path)
    assert code == 0, out
    assert all(line in out for line in _device_lines(device)), out
    strategy = choose_strategy(device)
    assert f"strategy: {strategy.value} ({strategy.reason})" in out
    assert f"CPU bfloat16 (avx512_bf16/amx_bf16): {'yes' if device.cpu_bf16 else 'no'}" in out
    assert "XLA: available" in out and "writable" in out and "doctor: 0 error(s)" in out


def test_doctor_on_a_described_gpu_machine(monkeypatch, capsys, tmp_path):
    _pin_devices(monkeypatch, TWO_A100)
    code, out = _doctor_here(capsys, tmp_path, "train:\n  precision: mixed_float16\n")
    assert code == 0, out
    assert "GPU 0: NVIDIA A100-SXM4-40GB, compute capability (8, 0), " in out and "GPU 1: NVIDIA A100" in out
    assert "strategy: mirrored (2 local GPUs)" in out and "doctor: 0 error(s)" in out


def test_doctor_exits_nonzero_when_the_config_asks_for_a_gpu_the_machine_lacks(monkeypatch, capsys, tmp_path):
    pinned = _pin_devices(monkeypatch, CPU_ONLY)  # whatever GPUs this machine has, the code reads none
    code, out = _doctor_here(capsys, tmp_path, "train:\n  precision: mixed_float16\n")
    assert code == 1
    strategy = choose_strategy(pinned)
    assert all(line in out for line in _device_lines(pinned))
    assert f"strategy: {strategy.value} ({strategy.reason})" in out
    assert strategy.value == "one_device"
    assert "ERROR: train.precision: mixed_float16 asked for, but no GPU is visible" in out


def test_a_hung_nvidia_smi_is_a_warning_not_a_crash(monkeypatch, capsys, tmp_path):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "nvidia-smi").write_text("#!/bin/sh\nexec sleep 60\n")  # exec: the timeout kills the sleep itself
    (fake_bin / "nvidia-smi").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(doctor, "NVIDIA_SMI_TIMEOUT_S", 1)
    _pin_devices(monkeypatch, TWO_A100)
    memories, finding = doctor.gpu_memory_mb()
    assert memories == [] and (finding.severity, finding.key) == ("warning", "nvidia-smi")
    code, out = _doctor_here(capsys, tmp_path)
    assert code == 0, out
    assert "WARNING: nvidia-smi: did not answer within 1 s" in out and "memory unknown" in out


def test_a_malformed_tf_config_is_an_error_finding_naming_the_variable(monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {"worker": ["a:1"')
    code, out = _doctor_here(capsys, tmp_path)
    assert code == 1
    assert "ERROR: TF_CONFIG: TF_CONFIG is not valid JSON" in out and "workers in TF_CONFIG: 1" in out


LOGGING_VARIABLES = ("TF_CPP_MIN_LOG_LEVEL", "TF_CPP_MAX_VLOG_LEVEL", "TF_CPP_VMODULE", "PYTHONWARNINGS")


@pytest.mark.slow
def test_the_doctor_command_runs_in_a_fresh_process(tmp_path):
    # As a user runs it: without whatever logging settings the test's caller exported (a user who exports
    # TF_CPP_MIN_LOG_LEVEL gets what they asked for).
    env = {key: value for key, value in os.environ.items() if key not in LOGGING_VARIABLES}
    result = subprocess.run([sys.executable, "-m", "pipeline", "doctor", "--output", str(tmp_path / "out")],
                            capture_output=True, text=True, timeout=300, env=env, cwd=PROJECT_ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "TensorFlow 2.16.2" in result.stdout and "strategy: " in result.stdout
    assert "doctor: 0 error(s)" in result.stdout
    # Quiet: no C++ log line and no Python warning, which means nothing imports TensorFlow before the command
    # line has set TF_CPP_MIN_LOG_LEVEL (TensorFlow reads it once, at its first log line).
    assert result.stderr == "", result.stderr[-3000:]
