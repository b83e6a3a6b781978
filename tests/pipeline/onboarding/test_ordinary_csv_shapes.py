"""Ordinary CSV shapes a new user brings, each through the commands a user types: column names that are
Python keywords or internal words, a header repeated mid-file (two exports joined), rows without a label,
paths given where a folder is wanted, and files as they come: gzip-compressed, UTF-16, a workbook, a NUL. Each
ends as a user expects: trained and pushed, or an exit 2 whose message names the line, column or path and says
how to go on, with nothing written."""
import contextlib
import io
import os

import numpy as np
import pytest
import tensorflow as tf

from components.core.feature_names import RESERVED, internal_names
from pipeline.commands.cli import main as cli_main
from tests.config_text import taxi_config_text


def _cli(*argv) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()  # not capsys: a run's log handlers outlive one capture
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main(list(argv))
    return code, out.getvalue(), err.getvalue()


KEYWORD_COLUMNS = ("class", "label", "weight", "examples", "__index_level_0__", "self", "lambda")


def _keyword_table(rows: int = 1500, seed: int = 0) -> str:
    """Columns named like Python keywords and words the pipeline uses itself; the label `target.value`."""
    rng = np.random.default_rng(seed)
    kind, label, weight = rng.choice(["a", "b", "c"], rows), rng.normal(0, 1, rows), rng.uniform(1, 5, rows)
    examples, own, lam = rng.integers(0, 100, rows), rng.normal(0, 1, rows), rng.choice(["x", "y"], rows)
    target = 2 * label + weight + (kind == "a") * 3 + rng.normal(0, 0.3, rows)
    lines = [",".join(KEYWORD_COLUMNS + ("target.value",))]
    lines += [f"{kind[i]},{label[i]:.3f},{weight[i]:.3f},{examples[i]},{i},{own[i]:.3f},{lam[i]},{target[i]:.3f}"
              for i in range(rows)]
    return "\n".join(lines) + "\n"


def test_keywords_and_self_never_name_an_argument_and_other_valid_names_stay_as_they_are():
    names = internal_names(KEYWORD_COLUMNS)
    for column in ("class", "self", "lambda"):
        assert names[column] != column and names[column].isidentifier() and names[column] not in RESERVED
    assert {column: names[column] for column in ("label", "weight", "examples")} == {
        "label": "label", "weight": "weight", "examples": "examples"}


@pytest.mark.e2e
def test_columns_named_like_keywords_and_internal_words_train_and_serve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "kw.csv").write_text(_keyword_table())
    assert _cli("prepare-data", "--csv", "kw.csv", "--data", "data/kw")[0] == 0
    code, out, err = _cli("init", "--data", "data/kw", "--label", "target.value")
    assert code == 0, err
    assert "float features: label, self, weight" in out and "string features: class, lambda" in out, out
    config = (tmp_path / "kw.yaml").read_text()
    (tmp_path / "kw.yaml").write_text(config.replace("epochs: ", "epochs: 3  # was ", 1))
    code, out, err = _cli("run", "--config", "kw.yaml")
    assert code == 0 and "blessed: yes" in out, err[-3000:] + out[-3000:]
    pushed = next(line.split("pushed to: ", 1)[1] for line in out.splitlines() if "pushed to: " in line)
    names = internal_names(["class", "label", "weight", "examples", "self", "lambda"])
    row = {"class": np.array([b"a"]), "label": np.array([0.5], np.float32), "weight": np.array([2.0], np.float32),
           "examples": np.array([7]), "self": np.array([0.1], np.float32), "lambda": np.array([b"x"])}
    arguments = {names[column]: value for column, value in row.items()}
    served = tf.saved_model.load(pushed).signatures["serving_raw"](
        **{name: tf.constant(value) for name, value in arguments.items()})["predictions"].numpy().reshape(-1)

    from ai_edge_litert.interpreter import Interpreter
    runner = Interpreter(model_path=os.path.join(pushed, "model.tflite")).get_signature_runner()
    device = runner(**arguments)["predictions"].reshape(-1)
    assert np.isfinite(served).all() and device == pytest.approx(served, rel=0.05, abs=0.05)


@pytest.mark.parametrize("later_span", [False, True], ids=["first_span", "a_later_span"])
def test_a_header_repeated_mid_file_exits_2_naming_its_line_and_writes_nothing(tmp_path, later_span):
    export = "x,y,label\n" + "".join(f"{i},{2 * i},{'yes' if i % 3 else 'no'}\n" for i in range(40))
    joined = export + " x , y,label\n" + export.split("\n", 1)[1]  # `cat a.csv b.csv`: line 42 is b's header
    data = tmp_path / "data"
    if later_span:  # the types are fixed by span 1, and span 2 is read with them
        (tmp_path / "one.csv").write_text(export)
        assert _cli("prepare-data", "--csv", str(tmp_path / "one.csv"), "--data", str(data))[0] == 0
    (tmp_path / "joined.csv").write_text(joined)
    span = "2" if later_span else "1"
    code, _, err = _cli("prepare-data", "--csv", str(tmp_path / "joined.csv"), "--data", str(data), "--span", span)
    assert code == 2, err
    assert "joined.csv: line 42 repeats the header row: two files joined into one?" in err, err
    assert "--span N" in err and not (data / f"span-{span}").exists()


def test_a_file_where_a_folder_is_wanted_and_a_missing_data_root_exit_2_saying_what_is_wanted(tmp_path):
    (tmp_path / "s.csv").write_text("x,label\n1,a\n2,b\n")
    code, _, err = _cli("init", "--data", str(tmp_path / "s.csv"), "--label", "label")
    assert code == 2 and "s.csv: a file; --data is the folder prepare-data wrote" in err, err
    code, _, err = _cli("prepare-data", "--csv", str(tmp_path / "s.csv"), "--data", str(tmp_path / "s.csv"))
    assert code == 2 and "s.csv: a file; --data names the folder the spans are written into" in err, err
    assert (tmp_path / "s.csv").read_text() == "x,label\n1,a\n2,b\n"
    (tmp_path / "c.yaml").write_text(taxi_config_text("train: {epochs: 1}\n"))
    code, _, err = _cli("run", "--config", str(tmp_path / "c.yaml"), "--data", str(tmp_path / "nowhere"),
                        "--output", str(tmp_path / "out"))
    assert code == 2 and "data error: " in err and "nowhere: input directory does not exist" in err, err
    assert not (tmp_path / "out" / "serving").exists()  # no step ran (the run report says it never started)


def test_the_missing_tokens_prepare_data_was_given_reach_the_model_through_init(tmp_path, monkeypatch):
    """`prepare-data --na` tokens are recorded with the data; `init` writes them into the config's task section,
    where the schema-driven model reads them (and serves them as missing); the default tokens stay implicit."""
    from components.core.model_module import load_model_module
    from pipeline.config import load_config

    monkeypatch.chdir(tmp_path)
    rows = ["color,size,label"] + [f"{['red', 'blue', 'unknown', ''][i % 4]},{i % 7},{i % 2}" for i in range(400)]
    (tmp_path / "t.csv").write_text("\n".join(rows) + "\n")
    assert _cli("prepare-data", "--csv", "t.csv", "--data", "data/t", "--na", "unknown,n.a.")[0] == 0
    code, _, err = _cli("init", "--data", "data/t", "--label", "label")
    assert code == 0, err
    config = load_config("t.yaml")
    assert config.task.missing_tokens == ["unknown", "n.a."]
    module = load_model_module(config.train.model, config.task, config.schema_path)
    assert {"unknown", "UNKNOWN", "Unknown"} <= set(module.missing_spellings)
    assert _cli("prepare-data", "--csv", "t.csv", "--data", "data/d")[0] == 0
    assert _cli("init", "--data", "data/d", "--label", "label", "--name", "d")[0] == 0
    assert "missing_tokens" not in (tmp_path / "d.yaml").read_text()  # the default tokens: the default setting


def _span_bytes(span_dir) -> dict[str, bytes]:
    return {path.name: path.read_bytes() for path in sorted(span_dir.glob("data-*.tfrecord.gz"))}


TABLE = "city\tprice\twhen\tlabel\n" + "".join(f"{['Köln', 'Zürich', 'Łódź', 'São Paulo'][i % 4]}\t{i * 1.5}\t"
                                                f"2024-01-{1 + i % 28:02d}\t{'ab'[i % 2]}\n" for i in range(60))


@pytest.mark.parametrize("name, encode", [
    ("t.csv.gz", lambda text: __import__("gzip").compress(text.encode("utf-8"))),
    ("t.txt", lambda text: text.encode("utf-16")),  # Excel's "Unicode text": UTF-16 with a byte-order mark, tabs
    ("t_le.txt", lambda text: text.encode("utf-16-le")),  # without a byte-order mark
    ("t.txt.gz", lambda text: __import__("gzip").compress(text.encode("utf-16"))),
], ids=["gzip", "utf16", "utf16_without_bom", "gzip_utf16"])
def test_a_gzip_or_utf16_file_is_read_as_its_utf8_text_is(tmp_path, name, encode):
    (tmp_path / "t.csv").write_text(TABLE, encoding="utf-8")
    assert _cli("prepare-data", "--csv", str(tmp_path / "t.csv"), "--data", str(tmp_path / "plain"))[0] == 0
    (tmp_path / name).write_bytes(encode(TABLE))
    code, out, err = _cli("prepare-data", "--csv", str(tmp_path / name), "--data", str(tmp_path / "other"))
    assert code == 0, err
    assert "wrote 60 tf.Examples" in out and "delimiter '\\t'" in out, out
    assert _span_bytes(tmp_path / "other" / "span-1") == _span_bytes(tmp_path / "plain" / "span-1")
    bad = TABLE.replace("Łódź\t3.0\t", "Łódź\t3.0\t\t", 1)  # one cell too many on line 4
    (tmp_path / name).write_bytes(encode(bad))
    code, _, err = _cli("prepare-data", "--csv", str(tmp_path / name), "--data", str(tmp_path / "bad"))
    assert code == 2 and f"{name}: line 4: 5 cells where the header names 4 columns" in err, err


def test_a_workbook_a_nul_character_or_another_encoding_exits_2_naming_what_the_file_is(tmp_path):
    (tmp_path / "t.xlsx").write_bytes(b"PK\x03\x04" + bytes(200))
    code, _, err = _cli("prepare-data", "--csv", str(tmp_path / "t.xlsx"), "--data", str(tmp_path / "x"))
    assert code == 2 and ("t.xlsx: a ZIP archive (an Excel .xlsx workbook is one), not CSV text; save it as CSV "
                          "(UTF-8)") in err, err
    (tmp_path / "nul.csv").write_bytes(b"name,label\nab,1\ncd,0\nx\x00y,1\n")
    code, _, err = _cli("prepare-data", "--csv", str(tmp_path / "nul.csv"), "--data", str(tmp_path / "nul"))
    assert code == 2 and ("nul.csv: line 4: column 'name' holds a NUL character (byte 0) in 'x\\x00y', which no "
                          "text holds") in err, err
    assert not (tmp_path / "nul").exists()
    (tmp_path / "latin.csv").write_bytes("name,label\nKöln,1\n".encode("latin-1"))
    code, _, err = _cli("prepare-data", "--csv", str(tmp_path / "latin.csv"), "--data", str(tmp_path / "latin"))
    assert code == 2 and "latin.csv: not UTF-8 text" in err, err
    assert "UTF-16 and gzip-compressed files are read too" in err, err
