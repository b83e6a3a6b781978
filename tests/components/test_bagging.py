"""k-fold bagging inside one model (components/core/bagging.py): records dealt into folds by a keyed hash, each
copy trained only outside its fold, validation scored out of fold, the copies' mean served and saved."""
import keras
import numpy as np
import pytest
import tensorflow as tf

from components.core.bagging import COPY_NAME, FoldBag, bag, fold_of
from components.trainer.input_pipeline import in_holdout
from models.ensemble import EnsembleInputs, EnsembleModel, EnsembleOutputs, MembersMean


def _ensemble(members: int = 2) -> keras.Model:
    """A small TabM-mini: 3 inputs -> a sigmoid per member -> their mean."""
    inputs = {"x": keras.Input(shape=(3,), name="x")}
    hidden = keras.layers.Dense(8, activation="relu")(EnsembleInputs(members)(inputs["x"]))
    members_out = keras.layers.Activation("sigmoid", dtype="float32")(EnsembleOutputs(members, 1)(hidden))
    return EnsembleModel(inputs, MembersMean()(members_out))


def _plain() -> keras.Model:
    inputs = {"x": keras.Input(shape=(3,), name="x")}
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(inputs["x"]))


def _data(rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3)).astype(np.float32)
    y = (x[:, 0] + 0.5 * rng.normal(size=rows) > 0).astype(np.float32)
    return x, y


def test_each_record_has_one_fold_the_same_every_time_and_the_folds_are_even_and_apart_from_the_holdout():
    records = tf.constant([f"record {i}".encode() for i in range(8000)])
    folds = fold_of(records, 4).numpy()
    np.testing.assert_array_equal(folds, fold_of(records, 4).numpy())
    assert set(folds) == {0, 1, 2, 3} and np.bincount(folds).min() > 1800
    held_out = in_holdout(records, 0.25).numpy()
    # independent hashes: the holdout takes about a quarter of every fold
    assert all(0.2 < held_out[folds == fold].mean() < 0.3 for fold in range(4))


@pytest.mark.parametrize("build_copy", [_ensemble, _plain])
def test_a_copy_does_not_learn_from_the_records_of_its_own_fold(build_copy):
    keras.utils.set_random_seed(1)
    model = bag(build_copy, 3)
    assert isinstance(model, FoldBag) and model.folds == 3
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=keras.losses.BinaryCrossentropy())
    x, y = _data(64)
    before = {fold: [w.copy() for w in model.get_layer(COPY_NAME.format(fold)).get_weights()] for fold in range(3)}
    model.train_on_batch({"x": x}, y, sample_weight=np.ones(64, np.float32))  # every record in fold 1
    for fold in range(3):
        after = model.get_layer(COPY_NAME.format(fold)).get_weights()
        unchanged = all(np.array_equal(a, b) for a, b in zip(before[fold], after))
        assert unchanged == (fold == 1), fold


def test_validation_scores_each_record_by_the_copy_that_never_trained_on_it_and_serves_the_mean(tmp_path):
    keras.utils.set_random_seed(2)
    model = bag(_ensemble, 4)
    model.compile(optimizer="adam", loss=keras.losses.BinaryCrossentropy(), metrics=[keras.metrics.AUC(name="auc")])
    x, y = _data(2000)
    folds = np.asarray(fold_of(tf.constant([f"r{i}".encode() for i in range(2000)]), 4), np.float32)
    model.fit(tf.data.Dataset.from_tensor_slices(({"x": x}, y, folds)).batch(100), epochs=2, verbose=0)
    copies = np.stack([model.get_layer(COPY_NAME.format(f))({"x": x}).numpy()[:, 0] for f in range(4)], axis=1)
    out_of_fold = copies[np.arange(2000), folds.astype(int)]
    served = model.predict({"x": x}, verbose=0)[:, 0]
    np.testing.assert_allclose(served, copies.mean(axis=1), rtol=1e-5, atol=1e-6)

    def auc(scores):
        metric = keras.metrics.AUC()
        metric.update_state(y, scores)
        return float(metric.result())

    validated = model.evaluate({"x": x}, y, sample_weight=folds, batch_size=2000, verbose=0, return_dict=True)
    assert validated["auc"] == pytest.approx(auc(out_of_fold), abs=1e-4)
    as_served = model.evaluate({"x": x}, y, batch_size=2000, verbose=0, return_dict=True)
    assert as_served["auc"] == pytest.approx(auc(served), abs=1e-4) and as_served["auc"] != validated["auc"]
    # the validation loss: each member's loss on the records of its own copy's fold
    members = np.concatenate([keras.Model(model.get_layer(COPY_NAME.format(f)).inputs,
                                          model.get_layer(COPY_NAME.format(f)).layers[-2].output)({"x": x}).numpy()
                              for f in range(4)], axis=1)[..., 0]  # [N, 8]: copy 0's 2 members, copy 1's, ...
    own = np.repeat(np.arange(4), 2)[None, :] == folds[:, None]
    clipped = np.clip(members, 1e-7, 1 - 1e-7)
    losses = -(y[:, None] * np.log(clipped) + (1 - y[:, None]) * np.log(1 - clipped))
    assert validated["loss"] == pytest.approx(losses[own].mean(), rel=1e-3)
    model.save(tmp_path / "bag.keras")
    loaded = keras.saving.load_model(tmp_path / "bag.keras")
    assert isinstance(loaded, FoldBag) and loaded.folds == 4
    np.testing.assert_allclose(loaded.predict({"x": x[:50]}, verbose=0), served[:50, None], rtol=1e-6)


def test_a_column_named_like_a_copy_is_not_counted_as_one_and_training_metrics_score_the_mean_as_served():
    def build_copy():
        inputs = {"fold_7": keras.Input(shape=(3,), name="fold_7")}  # a column of cross-validation data
        return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(inputs["fold_7"]))

    keras.utils.set_random_seed(3)
    model = bag(build_copy, 3)
    assert model.folds == 3
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss=keras.losses.BinaryCrossentropy(),
                  metrics=[keras.metrics.AUC(name="auc")])
    x, y = _data(300)
    folds = np.asarray(fold_of(tf.constant([f"r{i}".encode() for i in range(300)]), 3), np.float32)
    served = model.predict({"fold_7": x}, verbose=0)[:, 0]
    trained = model.train_on_batch({"fold_7": x}, y, sample_weight=folds, return_dict=True)
    metric = keras.metrics.AUC()
    metric.update_state(y, served)
    assert trained["auc"] == pytest.approx(float(metric.result()), abs=1e-4)


def test_one_fold_is_the_model_itself():
    model = bag(_plain, 1)
    assert not isinstance(model, FoldBag) and len(model.layers) == 2
