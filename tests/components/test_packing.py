"""The packed model (components/core/packing.py, models/packed.py): records dealt into folds by a keyed hash,
each copy's members trained only outside its fold, validation scored out of fold, the members' mean served and
saved; a module's packed network and a plain network built once per copy alike."""
import types

import keras
import numpy as np
import pytest
import tensorflow as tf

from components.core.packing import MembersOutput, PackedModel, fold_of, pack, served
from components.trainer.input_pipeline import in_holdout
from components.trainer.probing import training_step_ops
from models.packed import PackedDense, PackedEmbedding, members_count


def _packed_network(preprocessing, copies: int, members_per_copy: int = 2) -> keras.Model:
    """A small packed network: 3 shared numbers -> a sigmoid per member, `members_per_copy` members per copy."""
    members = copies * members_per_copy
    inputs = {"x": keras.Input(shape=(3,), name="x")}
    hidden = PackedDense(members, 8, activation="relu", input_scale=True)(inputs["x"])
    output = PackedDense(members, 1, batch_major=True)(hidden)
    return keras.Model(inputs, keras.layers.Activation("sigmoid", dtype="float32")(output))


def _plain_network(preprocessing) -> keras.Model:
    inputs = {"x": keras.Input(shape=(3,), name="x")}
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(inputs["x"]))


PACKED = types.SimpleNamespace(build_packed=_packed_network, build_model=None)  # a module that packs its members
PLAIN = types.SimpleNamespace(build_model=_plain_network)  # a module that builds one network


def _data(rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3)).astype(np.float32)
    y = (x[:, 0] + 0.5 * rng.normal(size=rows) > 0).astype(np.float32)
    return x, y


def _member_weights(model: PackedModel, module) -> list[np.ndarray]:
    """Per member j, its weights flattened into one vector (each layer's slice j, or copy j's network)."""
    if module is PLAIN:
        networks = [layer for layer in model.layers if isinstance(layer, keras.Model)]
        return [np.concatenate([w.reshape(-1) for w in network.get_weights()]) for network in networks]
    packed = [layer for layer in model.layers if isinstance(layer, PackedDense)]
    return [np.concatenate([np.asarray(w)[j].reshape(-1) for layer in packed for w in layer.get_weights()])
            for j in range(model.members)]


def test_each_record_has_one_fold_the_same_every_time_and_the_folds_are_even_and_apart_from_the_holdout():
    records = tf.constant([f"record {i}".encode() for i in range(8000)])
    folds = fold_of(records, 4).numpy()
    np.testing.assert_array_equal(folds, fold_of(records, 4).numpy())
    assert set(folds) == {0, 1, 2, 3} and np.bincount(folds).min() > 1800
    held_out = in_holdout(records, 0.25).numpy()
    # independent hashes: the holdout takes about a quarter of every fold
    assert all(0.2 < held_out[folds == fold].mean() < 0.3 for fold in range(4))


@pytest.mark.parametrize("module", [PACKED, PLAIN], ids=["packed", "per-copy"])
def test_a_copys_members_do_not_learn_from_the_records_of_its_own_fold(module):
    keras.utils.set_random_seed(1)
    model = pack(module, None, 3)
    assert isinstance(model, PackedModel) and model.copies == 3
    assert model.members == (6 if module is PACKED else 3)
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=keras.losses.BinaryCrossentropy())
    x, y = _data(64)
    before = _member_weights(model, module)
    model.train_on_batch({"x": x}, y, sample_weight=np.ones(64, np.float32))  # every record in fold 1
    after = _member_weights(model, module)
    per_copy = model.members // 3
    for member in range(model.members):
        unchanged = np.array_equal(before[member], after[member])
        assert unchanged == (member // per_copy == 1), member


@pytest.mark.slow
def test_validation_scores_each_record_by_its_copys_members_and_the_mean_is_served_and_saved(tmp_path):
    keras.utils.set_random_seed(2)
    model = pack(PACKED, None, 4)
    model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(), metrics=[keras.metrics.AUC(name="auc")])
    x, y = _data(2000)
    folds = np.asarray(fold_of(tf.constant([f"r{i}".encode() for i in range(2000)]), 4), np.float32)
    model.fit(tf.data.Dataset.from_tensor_slices(({"x": x}, y, folds)).batch(100), epochs=2, verbose=0)
    members = model.predict({"x": x}, verbose=0)[..., 0]  # [N, 8]: copy 0's 2 members, copy 1's, ...
    own = np.repeat(np.arange(4), 2)[None, :] == folds[:, None]
    out_of_fold = (members * own).sum(axis=1) / 2
    serving = served(model)
    np.testing.assert_allclose(serving.predict({"x": x}, verbose=0)[:, 0], members.mean(axis=1), rtol=1e-5, atol=1e-6)

    def auc(scores):
        metric = keras.metrics.AUC()
        metric.update_state(y, scores)
        return float(metric.result())

    validated = model.evaluate({"x": x}, y, sample_weight=folds, batch_size=2000, verbose=0, return_dict=True)
    assert validated["auc"] == pytest.approx(auc(out_of_fold), abs=1e-4)
    as_served = model.evaluate({"x": x}, y, batch_size=2000, verbose=0, return_dict=True)
    assert as_served["auc"] == pytest.approx(auc(members.mean(axis=1)), abs=1e-4) and as_served["auc"] != validated["auc"]
    clipped = np.clip(members, 1e-7, 1 - 1e-7)
    losses = -(y[:, None] * np.log(clipped) + (1 - y[:, None]) * np.log(1 - clipped))
    assert validated["loss"] == pytest.approx(losses[own].mean(), rel=1e-3)  # each member on its copy's fold
    assert as_served["loss"] == pytest.approx(losses.mean(), rel=1e-3)  # without folds: every member's loss
    serving.save(tmp_path / "served.keras")
    loaded = keras.saving.load_model(tmp_path / "served.keras")
    np.testing.assert_allclose(loaded.predict({"x": x[:50]}, verbose=0)[:, 0], members[:50].mean(axis=1), rtol=1e-6)
    assert loaded.get_weights()[0].shape == model.get_weights()[0].shape  # the served model's weights: the packed ones


def test_one_layer_per_depth_holds_every_member_and_the_graph_does_not_grow_with_the_members():
    sizes = {}
    for copies in (1, 4, 16):
        model = pack(PACKED, None, copies)
        dense = [layer for layer in model.layers if isinstance(layer, PackedDense)]
        sizes[copies] = (len(model.layers), len(model.trainable_weights))
        assert [layer.kernel.shape[0] for layer in dense] == [2 * copies] * 2
    assert len(set(sizes.values())) == 1, sizes  # the same layers and tensors whatever the members


@pytest.mark.slow
def test_a_training_step_runs_far_fewer_ops_packed_than_per_copy():
    """The ops one training step executes (a GPU launches a kernel for each): the packed network's do not grow
    with the copies, a network per copy's do."""
    x, y = _data(64)
    folds = np.arange(64, dtype=np.float32) % 8

    def ops_per_step(module) -> int:
        keras.utils.set_random_seed(4)
        model = pack(module, None, 8)
        model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy())
        return training_step_ops(model, ({"x": x}, y, folds))

    packed, per_copy = ops_per_step(PACKED), ops_per_step(PLAIN)
    assert packed * 2 < per_copy, (packed, per_copy)


def test_packed_embeddings_give_each_member_and_column_its_own_rows():
    layer = PackedEmbedding([5, 3], 2, 4)
    rows = layer([tf.constant([0, 2, 4]), tf.constant([1, 1, 2])]).numpy()
    assert rows.shape == (4, 3, 4)  # [members, N, columns x width]
    table = layer.embeddings.numpy().reshape(8, 4, 2)  # column 0's 5 rows, then column 1's 3
    for member in range(4):
        np.testing.assert_array_equal(rows[member, 1], np.concatenate([table[2, member], table[5 + 1, member]]))
        np.testing.assert_array_equal(rows[member, 2], np.concatenate([table[4, member], table[5 + 2, member]]))
    inputs = [keras.Input((), dtype="int64"), keras.Input((), dtype="int64")]
    assert members_count(keras.Model(inputs, PackedEmbedding([5, 3], 2, 4)(inputs))) == 4


def test_a_members_output_layer_of_the_wrong_width_is_named():
    from components.core.model_module import check_output_width
    from components.core.tasks import TaskError

    module = types.SimpleNamespace(TASK="multiclass", CLASSES=("a", "b", "c"), build_model=_plain_network)
    with pytest.raises(TaskError, match=r"build_model's output has shape \(None, 1\)"):
        check_output_width(module, pack(module, None, 2))
    module.build_packed = _packed_network
    with pytest.raises(TaskError, match=r"build_packed's output has shape \(None, 4, 1\)"):
        check_output_width(module, pack(module, None, 2))
    assert isinstance(pack(module, None, 2).layers[-1], MembersOutput)


def test_kernels_shared_by_groups_give_each_member_its_own_input_scales_and_bias_over_its_groups_kernel(tmp_path):
    """PackedDense(kernel_groups=G): member j computes (x * scale_j) @ kernel[j // (M / G)] + bias_j, its group's
    kernel shared by the group's members only, and saves and loads as it computes; it refuses what it cannot
    share."""
    rng = np.random.default_rng(4)
    x = rng.normal(size=(6, 5)).astype(np.float32)
    inputs = keras.Input(shape=(5,))
    layer = PackedDense(4, 3, input_scale=True, kernel_groups=2, name="first")
    model = keras.Model(inputs, layer(inputs))
    layer.bias.assign(rng.normal(size=(4, 1, 3)).astype(np.float32))
    kernel, scale, bias = (np.asarray(w) for w in (layer.kernel, layer.scale, layer.bias))
    assert kernel.shape == (2, 5, 3) and scale.shape == (4, 5)
    expected = np.stack([(x * scale[j]) @ kernel[j // 2] + bias[j] for j in range(4)])
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    model.save(tmp_path / "grouped.keras")
    loaded = keras.saving.load_model(tmp_path / "grouped.keras")
    assert loaded.get_layer("first").kernel_groups == 2
    np.testing.assert_allclose(loaded(x).numpy(), expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="need input_scale"):
        PackedDense(4, 3, kernel_groups=2)
    with pytest.raises(ValueError, match="do not divide"):
        PackedDense(4, 3, input_scale=True, kernel_groups=3)
    with pytest.raises(ValueError, match="features the members share"):
        PackedDense(4, 3, input_scale=True, kernel_groups=2)(keras.Input(shape=(2, 5)))
