"""bench/train_again.py --default: a default of the schema-driven model tried in a bench run sets that entry of
the defaults table (and the train setting init wrote from it), and the model the Trainer configures reads it."""

import pytest

from components.settings import TaskConfig
from tests.bench.scripts import bench_script


@pytest.fixture(scope="module")
def bench():
    with bench_script("train_again") as module:
        yield module


def test_a_default_sets_its_table_entry_and_the_train_setting_init_wrote_from_it(bench):
    entries = bench._assignments(["hidden_units=[64, 32]", "weight_decay=0.01", "date_codes=true"])
    table, train = bench.default_overrides(entries)
    assert table == {"hidden_units": (64, 32), "weight_decay": 0.01, "date_codes": True}
    assert train == {"weight_decay": 0.01}  # init writes it into the config the run carries
    for wrong, message in (("hiden_units=[8]", "hiden_units: not a default"),
                           ("max_epochs=300", "max_epochs shapes the plan .* --set")):
        with pytest.raises(SystemExit, match=message):
            bench.default_overrides(bench._assignments([wrong]))


def test_the_model_configured_while_training_again_reads_the_entry_and_the_table_is_restored(bench, tmp_path,
                                                                                            monkeypatch):
    import numpy as np

    from components.core.model_module import load_model_module
    from models import defaults
    from models.packed import PackedDense

    (tmp_path / "schema.pbtxt").write_text('feature { name: "x" type: FLOAT }\nfeature { name: "y" type: FLOAT }\n')

    def configured_as_the_trainer_does(*args):  # in place of the training: the model the Trainer would build
        module = load_model_module("models.tabular", TaskConfig(type="regression", label="y"),
                                   str(tmp_path / "schema.pbtxt"))
        sample = {name: np.linspace(0, 1, 100, dtype=np.float32) for name in ("x", "y")}
        network = module.build_packed(module.build_preprocessing(sample), 1)
        return {"widths": [layer.units for layer in network.layers if isinstance(layer, PackedDense)],
                "members": network.output.shape[1]}

    monkeypatch.setattr(bench, "_train_again", configured_as_the_trainer_does)
    table, _ = bench.default_overrides({"hidden_units": (24, 12), "members": 2})
    built = bench.train_again("run", "run.yaml", 0, {}, {}, str(tmp_path), table)
    assert built == {"widths": [24, 12, 1], "members": 2}
    assert defaults.defaults_for("regression").hidden_units == (256, 256)  # the table as it was
    assert bench.train_again("run", "run.yaml", 0, {}, {}, str(tmp_path))["widths"] == [256, 256, 1]
