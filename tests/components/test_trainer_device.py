"""Strategy and precision choices as pure functions of described devices, on whatever hardware runs the suite."""
import dataclasses
import json

import pytest

from components.trainer.device import (DeviceDescription, Gpu, TfConfigError, choose_precision, choose_strategy,
                                       cpu_has_bf16, cpu_without_xla, describe_devices, workers_from_tf_config,
                                       xla_candidates)


def _gpus(*capabilities):
    return tuple(Gpu(f"GPU {i}", cc) for i, cc in enumerate(capabilities))


@pytest.mark.parametrize("capability, policy", [
    ((6, 1), "float32"), ((7, 0), "mixed_float16"), ((8, 0), "mixed_float16"), ((9, 0), "mixed_float16"),
])
def test_gpu_policy_follows_tensor_core_compute_capability(capability, policy):
    assert choose_precision(DeviceDescription(gpus=_gpus(capability)), xla=True).value == policy


def test_mixed_gpus_fall_back_to_float32_when_one_lacks_tensor_cores():
    assert choose_precision(DeviceDescription(gpus=_gpus((8, 0), (6, 1))), xla=True).value == "float32"


def test_xla_auto_is_timed_on_accelerators_and_left_off_on_cpus_where_the_fp32_baseline_would_cost_more():
    for accelerator in (DeviceDescription(gpus=_gpus((7, 5))), DeviceDescription(tpu_cores=8)):
        assert xla_candidates(accelerator, "auto") == ["on", "off"]
    for cpu in (DeviceDescription(), DeviceDescription(cpu_bf16=True)):
        assert xla_candidates(cpu, "auto") == ["off"]
        assert xla_candidates(cpu, "on") == ["on"] and xla_candidates(cpu, "off") == ["off"]
    assert "FP32 baseline" in cpu_without_xla(DeviceDescription(cpu_bf16=True))
    assert cpu_without_xla(DeviceDescription()) == "plain CPU: nothing for XLA to gain"


def test_tpu_and_bf16_cpu_get_bfloat16_but_bf16_cpu_only_with_xla():
    assert choose_precision(DeviceDescription(tpu_cores=8), xla=False).value == "mixed_bfloat16"
    assert choose_precision(DeviceDescription(cpu_bf16=True), xla=True).value == "mixed_bfloat16"
    assert choose_precision(DeviceDescription(cpu_bf16=True), xla=False).value == "float32"
    assert choose_precision(DeviceDescription(), xla=True).value == "float32"


def test_strategy_choice():
    assert choose_strategy(DeviceDescription()).value == "one_device"
    assert choose_strategy(DeviceDescription(gpus=_gpus((8, 0)))).value == "one_device"
    assert choose_strategy(DeviceDescription(gpus=_gpus((8, 0), (8, 0)))).value == "mirrored"
    assert choose_strategy(DeviceDescription(tpu_cores=8, gpus=_gpus((8, 0)))).value == "tpu"
    two_workers = json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                              "task": {"type": "worker", "index": 0}})
    device = DeviceDescription(num_workers=workers_from_tf_config(two_workers))
    assert choose_strategy(device).value == "multi_worker_mirrored"


def test_overrides_win_and_unknown_values_name_the_key():
    assert choose_strategy(DeviceDescription(gpus=_gpus((8, 0), (8, 0))), "one_device").value == "one_device"
    assert choose_precision(DeviceDescription(cpu_bf16=True), True, "float32").value == "float32"
    with pytest.raises(ValueError, match="train.strategy"):
        choose_strategy(DeviceDescription(), "horovod")
    with pytest.raises(ValueError, match="train.precision"):
        choose_precision(DeviceDescription(), True, "int8")


def test_tf_config_worker_count_and_cpu_flags(tmp_path):
    assert workers_from_tf_config(None) == 1
    assert workers_from_tf_config('{"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"]}}') == 3
    flags = tmp_path / "cpuinfo"
    flags.write_text("processor : 0\nflags : fpu sse avx512f avx512_bf16\n")
    assert cpu_has_bf16(str(flags)) is True
    flags.write_text("processor : 0\nflags : fpu sse avx2\n")
    assert cpu_has_bf16(str(flags)) is False


def test_this_machine_is_described_as_tensorflow_lists_it_and_serializes():
    import tensorflow as tf

    device = describe_devices()
    physical_gpus = tf.config.list_physical_devices("GPU")
    assert [gpu.name for gpu in device.gpus] == [
        tf.config.experimental.get_device_details(gpu).get("device_name", gpu.name) for gpu in physical_gpus]
    assert device.tpu_cores == len(tf.config.list_physical_devices("TPU"))
    stored = json.loads(json.dumps(dataclasses.asdict(device)))  # as the training report stores it
    assert stored["num_workers"] >= 1 and len(stored["gpus"]) == len(physical_gpus)


@pytest.mark.parametrize("tf_config, problem", [
    ('{"cluster": {"worker": ["a:1"', "not valid JSON"),
    ('["a:1", "b:2"]', "must be a JSON object"),
    ('{"cluster": "a:1,b:2"}', "'cluster' must be a JSON object"),
    ('{"cluster": {"worker": "a:1"}}', "cluster.worker must be a list"),
])
def test_malformed_tf_config_is_an_error_naming_the_variable(monkeypatch, tf_config, problem):
    from components.trainer.distribution import is_chief, worker_task

    with pytest.raises(TfConfigError, match=f"^TF_CONFIG.*{problem}"):
        workers_from_tf_config(tf_config)
    monkeypatch.setenv("TF_CONFIG", tf_config)
    with pytest.raises(TfConfigError, match="^TF_CONFIG"):
        describe_devices()
    if problem != "cluster.worker must be a list":  # the task part of that one is fine
        for read_task in (is_chief, worker_task):
            with pytest.raises(TfConfigError, match="^TF_CONFIG"):
                read_task()
    with pytest.raises(TfConfigError, match="^TF_CONFIG: task.index must be an integer"):
        worker_task('{"task": {"type": "worker", "index": "first"}}')


def test_gpu_memory_settings_reach_every_described_gpu(monkeypatch):
    """No GPU here: a described GPU stands in, and the calls TensorFlow would get are checked."""
    import tensorflow as tf

    from components.trainer.distribution import configure_gpus

    gpus = [tf.config.PhysicalDevice(name=f"/physical_device:GPU:{i}", device_type="GPU") for i in range(2)]
    calls = []
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: gpus if kind == "GPU" else [])
    monkeypatch.setattr(tf.config.experimental, "set_memory_growth", lambda gpu, on: calls.append(("growth", gpu.name, on)))
    monkeypatch.setattr(tf.config, "set_logical_device_configuration",
                        lambda gpu, configs: calls.append(("limit", gpu.name, [c.memory_limit for c in configs])))
    configure_gpus(memory_growth=True, memory_limit_mb=0)
    assert calls == [("growth", gpu.name, True) for gpu in gpus]
    calls.clear()
    configure_gpus(memory_growth=True, memory_limit_mb=4096)  # a limit replaces growth
    assert calls == [("limit", gpu.name, [4096]) for gpu in gpus]


def test_several_replicas_run_one_step_per_execution():
    """Keras 3 cannot run several steps per call under a multi-replica strategy (keras#19246)."""
    from components.trainer.distribution import supported_steps_per_execution

    assert supported_steps_per_execution(10, replicas=1) == 10
    assert supported_steps_per_execution(10, replicas=2) == 1
    assert supported_steps_per_execution(1, replicas=4) == 1
