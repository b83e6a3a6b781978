"""Training throughput on this machine: a plain Keras float32 loop vs the Trainer's automatic configuration,
and how much faster a device could be before this host starves it.

    .venv/bin/python bench/trainer_throughput.py [--models models.taxi models.taxi_wide] [--epochs 40] [--copies 1,10]
                                                 [--packing | --only-packing] [--folds 8] [--batches 32,64,256]

For each model, on the bundled taxi data as gzip TFRecords (shards 0-2 train, shard 3 eval):
- plain: per-example `parse_single_example`, preprocessing inside the model, float32, no XLA, one step per
  call, no cache;
- trainer, float32: the Trainer (`components.trainer.train.train`) with precision float32 and XLA off;
- trainer, auto: the Trainer with every choice automatic (on a CPU: float32 without XLA).
models.tabular, the schema-driven model, predicts the fare from the other taxi features (tips left out); it
has no plain loop (nan).
Prints examples/s of each, the auto/plain ratio, and the auto run's input-wait fraction: 1 - (throughput on
the real TFRecord input / throughput on the same batches served from memory); then, per model and scale
(the taxi data written --copies times over, as bench/scale.py writes it), the host ceiling (examples/s the
Trainer's input pipeline alone delivers, no model), the model's examples/s on batches already in memory, and
their ratio: how many times faster an accelerator could be before it would wait for input. With --packing (or
`--only-packing`), the schema-driven model bagged over --folds folds as the Trainer trains it, one packed network
(its members' weights with a member axis, one batched product per layer) beside the same members built as one
network per copy, at the same batch (each of --batches), widths and members: examples/s on in-memory batches (best of --repeats
timings of --packing-steps steps) and the TensorFlow ops one training step runs (components.trainer.probing.
training_step_ops: on a GPU, a kernel launch each). Each model's figures
(and each model and scale's) are appended as records to bench/results/trainer_throughput.jsonl (bench/records.py).
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import glob
import math
import os
import sys
import tempfile
import time
import types

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, PROJECT_ROOT)

import keras  # noqa: E402
import records  # noqa: E402 - bench/records.py, beside this script
import tensorflow as tf  # noqa: E402

from components.trainer.train import ADAPT_SAMPLE_SIZE, TrainingJob, read_sample, train  # noqa: E402
from components.core.model_module import load_model_module  # noqa: E402
from pipeline.config import load_config  # noqa: E402
from pipeline.onboarding.example_data import write_taxi_span  # noqa: E402


def plain_keras_throughput(model_name: str, train_files: list[str], batch_size: int, steps: int) -> float:
    """Examples/s of the plain loop over `steps` steps (after 20 warm-up steps)."""
    module = load_model_module(model_name)
    spec = {**module.INPUTS, **module.LABEL_INPUTS}
    keras.config.set_dtype_policy("float32")
    preprocessing = module.build_preprocessing(read_sample(train_files, module.INPUTS, ADAPT_SAMPLE_SIZE))
    core = module.build_model(preprocessing)
    inputs = {name: keras.Input(shape=(), dtype=tensor.dtype, name=name) for name, tensor in preprocessing.input.items()}
    model = keras.Model(inputs, core(preprocessing(inputs)))
    model.compile(keras.optimizers.Adam(0.003), "binary_crossentropy", jit_compile=False, steps_per_execution=1)
    records = tf.data.TFRecordDataset(train_files, compression_type="GZIP")
    examples = records.map(lambda record: tf.io.parse_single_example(record, spec))
    dataset = examples.map(lambda f: ({name: f[name] for name in module.INPUTS}, module.make_label(f)))
    dataset = dataset.shuffle(10_000).repeat().batch(batch_size)
    model.fit(dataset, steps_per_epoch=20, epochs=1, verbose=0)
    start = time.perf_counter()
    model.fit(dataset, steps_per_epoch=steps, epochs=1, verbose=0)
    return steps * batch_size / (time.perf_counter() - start)


SCHEMA_DRIVEN = "models.tabular"  # on the taxi data: the fare as a regression from the other features but tips
FARE_SCHEMA = os.path.join(PROJECT_ROOT, "schemas", "taxi_fare", "schema.pbtxt")


def trainer_report(model_name: str, files: dict, output: str, **overrides) -> dict:
    task = {"type": "regression", "label": "fare", "exclude": ["tips"]} if model_name == SCHEMA_DRIVEN else {}
    config = load_config(train={"model": model_name, **overrides}, evaluate={"absolute_bar": None}, task=task,
                         **({"schema_path": FARE_SCHEMA} if task else {}))
    settings = config.train
    schema_driven = {"task_config": config.task, "schema_path": FARE_SCHEMA} if task else {}
    return train(TrainingJob(settings=settings, serving_model_dir=os.path.join(output, "serving"),
                             run_dir=os.path.join(output, "run"), checkpoint_dir=os.path.join(output, "ckpt"),
                             **files, **schema_driven)).to_json()


def packing_comparison(files: dict, folds: int, batch_size: int, steps: int, repeats: int) -> list[dict]:
    """The schema-driven model (the fare from the taxi features) bagged over `folds` folds, packed and per copy,
    on the same in-memory batches of model-ready tensors (each record's fold drawn at random). Output: per form,
    its examples/s (the best of `repeats` timings of `steps` steps, after a warm-up) and ops per training step."""
    import numpy as np

    from components.core.packing import pack
    from components.trainer.probing import training_step_ops

    config = load_config(train={"model": SCHEMA_DRIVEN}, evaluate={"absolute_bar": None}, schema_path=FARE_SCHEMA,
                         task={"type": "regression", "label": "fare", "exclude": ["tips"]})
    module = load_model_module(SCHEMA_DRIVEN, config.task, FARE_SCHEMA)
    keras.config.set_dtype_policy("float32")
    sample = read_sample(files["train_files"], {**module.INPUTS, **module.LABEL_INPUTS}, ADAPT_SAMPLE_SIZE)
    preprocessing = module.build_preprocessing(sample)
    ready = preprocessing({name: tf.constant(sample[name]) for name in module.INPUTS})
    labels = module.make_label({"fare": tf.constant(sample["fare"])})
    fold_ids = tf.constant(np.random.default_rng(0).integers(0, folds, len(sample["fare"])), tf.float32)
    batches = tf.data.Dataset.from_tensor_slices((ready, labels, fold_ids)).batch(batch_size, drop_remainder=True)
    batches = batches.cache().repeat()
    single = copy.copy(module)  # per copy: each network one member
    single.defaults = dataclasses.replace(module.defaults, members=1)
    one_network = types.SimpleNamespace(build_model=single.build_model)  # pack builds it once per copy
    results = []
    for form, built in (("packed", module), ("one network per copy", one_network)):
        keras.utils.set_random_seed(0)
        model = pack(built, preprocessing, folds)
        optimizer = keras.optimizers.AdamW(module.defaults.learning_rate, weight_decay=module.defaults.weight_decay)
        model.compile(optimizer=optimizer, loss=module.make_loss(),
                      steps_per_execution=10)
        model.fit(batches, steps_per_epoch=20, epochs=1, verbose=0)  # trace and compile
        timings = []
        for _ in range(repeats):
            started = time.perf_counter()
            model.fit(batches, steps_per_epoch=steps, epochs=1, verbose=0)
            timings.append(steps * batch_size / (time.perf_counter() - started))
        ops = training_step_ops(model, next(iter(batches)))
        results.append({"form": form, "members": model.members, "examples_per_s": max(timings),
                        "examples_per_s_timings": timings, "ops_per_step": ops})
        print(f"batch {batch_size}, {form}: {model.members} members over {folds} copies, {max(timings):,.0f} examples/s "
              f"(timings {', '.join(f'{t:,.0f}' for t in timings)}), {ops:,} ops per training step", flush=True)
    packed, per_copy = results
    print(f"packed / per copy: {packed['examples_per_s'] / per_copy['examples_per_s']:.2f}x the examples/s, "
          f"{packed['ops_per_step'] / per_copy['ops_per_step']:.2f}x the ops per step", flush=True)
    records.append("trainer_throughput", f"{SCHEMA_DRIVEN}, packed and per copy, {folds} folds, batch {batch_size}",
                   {"model": SCHEMA_DRIVEN, "folds": folds, "batch": batch_size, "steps": steps, "runs": results})
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["models.taxi", "models.taxi_wide", SCHEMA_DRIVEN],
                        help=f"model modules; {SCHEMA_DRIVEN} predicts the fare from the taxi schema")
    parser.add_argument("--epochs", type=int, default=40, help="passes over the 11k training rows per trainer run")
    parser.add_argument("--plain-steps", type=int, default=300)
    parser.add_argument("--probe-steps", type=int, default=400, help="in-memory steps for the input-wait figure")
    parser.add_argument("--copies", default="1", help="scales of the taxi data for the host-ceiling table, e.g. 1,10")
    parser.add_argument("--packing", action="store_true", help="also compare packed with one network per copy")
    parser.add_argument("--only-packing", action="store_true", help="only that comparison")
    parser.add_argument("--folds", type=int, default=8, help="the comparison's folds (copies)")
    parser.add_argument("--batches", default="32,64,256", help="the comparison's batch sizes, e.g. 32,256")
    parser.add_argument("--packing-steps", type=int, default=300, help="the comparison's timed steps")
    parser.add_argument("--repeats", type=int, default=3, help="the comparison's timings per form")
    args = parser.parse_args()

    work = tempfile.mkdtemp(prefix="bench-trainer-")
    span_dir, rows = write_taxi_span(work, span=1)
    shards = sorted(glob.glob(os.path.join(span_dir, "*.gz")))
    files = {"train_files": shards[:3], "eval_files": shards[3:]}
    batch_size = load_config().train.batch_size
    print(f"{rows} taxi rows as {len(shards)} gzip TFRecord shards in {span_dir}; batch {batch_size}", flush=True)
    if args.packing or args.only_packing:
        for batch in (int(size) for size in args.batches.split(",")):
            packing_comparison(files, args.folds, batch, args.packing_steps, args.repeats)
        if args.only_packing:
            return

    rows_out = []
    for model_name in args.models:
        plain = (float("nan") if model_name == SCHEMA_DRIVEN else  # the plain loop needs a hand-written module
                 plain_keras_throughput(model_name, files["train_files"], batch_size, args.plain_steps))
        fp32 = trainer_report(model_name, files, os.path.join(work, model_name, "fp32"), epochs=args.epochs,
                              precision="float32", xla="off", input_probe_steps=args.probe_steps)
        auto = trainer_report(model_name, files, os.path.join(work, model_name, "auto"), epochs=args.epochs,
                              input_probe_steps=args.probe_steps)
        rows_out.append((model_name, plain, fp32, auto))
        records.append("trainer_throughput", f"{model_name}, plain and Trainer", {"model": model_name, "runs": [{
            "plain_examples_per_s": None if math.isnan(plain) else plain,
            "float32_examples_per_s": fp32["examples_per_second"], "auto_examples_per_s": auto["examples_per_second"],
            "auto": f"{auto['precision']}, XLA {'on' if auto['xla'] else 'off'}",
            "input_wait_fraction": auto["input_wait_fraction"],
            "in_memory_examples_per_s": auto["in_memory_examples_per_second"]}]})
        print(f"{model_name}: plain {plain:,.0f} ex/s | trainer float32 {fp32['examples_per_second']:,.0f} ex/s | "
              f"trainer auto ({auto['precision']}, XLA {'on' if auto['xla'] else 'off'}) "
              f"{auto['examples_per_second']:,.0f} ex/s", flush=True)

    print("\nmodel              plain ex/s  trainer fp32  trainer auto  auto/plain  auto/fp32  input wait  "
          "in-memory ex/s")
    for model_name, plain, fp32, auto in rows_out:
        print(f"{model_name:18s} {plain:10,.0f}  {fp32['examples_per_second']:12,.0f}  "
              f"{auto['examples_per_second']:12,.0f}  {auto['examples_per_second'] / plain:9.2f}x  "
              f"{auto['examples_per_second'] / fp32['examples_per_second']:8.2f}x  "
              f"{100 * auto['input_wait_fraction']:9.1f}%  {auto['in_memory_examples_per_second']:14,.0f}")
    for model_name, _, _, auto in rows_out:
        print(f"{model_name} auto: {auto['strategy']}, {auto['precision']}, XLA {auto['xla']} ({auto['xla_reason']}), "
              f"steps per execution {auto['steps_per_execution']}, preprocessed tensors cached in "
              f"{auto.get('input_cache') or 'none'}")
    host_ceiling_table(args, work)


def host_ceiling_table(args, work: str) -> None:
    """Per model and scale: the input pipeline alone, the model on in-memory batches, their ratio, the input
    wait and the Trainer's seconds (each scale's data written as bench/scale.py writes it)."""
    from scale import write_copies

    print("\n| model | rows | host ceiling (ex/s) | model in memory (ex/s) | ratio | input wait | Trainer s |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for copies in (int(c) for c in args.copies.split(",")):
        root = os.path.join(work, f"x{copies}")
        rows = write_copies(root, copies)
        shards = sorted(glob.glob(os.path.join(root, "span-1", "*.gz")))
        files = {"train_files": shards[:-1] or shards, "eval_files": shards[-1:]}
        epochs = max(2, args.epochs // copies)
        for model_name in args.models:
            started = time.perf_counter()
            auto = trainer_report(model_name, files, os.path.join(root, model_name), epochs=epochs,
                                  input_probe_steps=args.probe_steps)
            seconds = time.perf_counter() - started
            host, model = auto["host_examples_per_second"], auto["in_memory_examples_per_second"]
            records.append("trainer_throughput", f"{model_name}, host ceiling, {copies}x", {
                "model": model_name, "copies": copies, "rows": rows, "runs": [{
                    "host_examples_per_s": host, "in_memory_examples_per_s": model, "ratio": host / model,
                    "input_wait_fraction": auto["input_wait_fraction"], "trainer_s": seconds}]})
            print(f"| {model_name} | {rows:,} | {host:,.0f} | {model:,.0f} | {host / model:.1f}x | "
                  f"{100 * auto['input_wait_fraction']:.1f}% | {seconds:.0f} |", flush=True)


if __name__ == "__main__":
    main()
