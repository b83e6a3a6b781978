"""ValidationGate: TFDV anomalies in, a report out, and a stopped run on blocking anomalies."""
import csv
import os

import pytest
import tensorflow as tf
import tensorflow_data_validation as tfdv

from components.validation_gate import drift
from components.validation_gate import executor as gate
from pipeline.onboarding.example_data import bundled_taxi_csv, row_to_example

pytestmark = pytest.mark.slow  # TFDV statistics of real spans: seconds each, not in make test-fast

SCHEMA = os.path.join(os.path.dirname(__file__), "..", "..", "schemas", "taxi", "schema.pbtxt")


def _rows(count):
    with open(bundled_taxi_csv(), newline="") as handle:
        reader = csv.DictReader(handle)
        return [next(reader) for _ in range(count)]


def _statistics(tmp_path, examples, name="data"):
    path = str(tmp_path / f"{name}.tfrecord")
    with tf.io.TFRecordWriter(path) as writer:
        for example in examples:
            writer.write(example.SerializeToString())
    return tfdv.generate_statistics_from_tfrecord(path)


def _validate(tmp_path, examples):
    return tfdv.validate_statistics(_statistics(tmp_path, examples), tfdv.load_schema_text(SCHEMA))


def test_drift_is_measured_with_the_schema_comparators_and_only_a_shift_crosses_them(tmp_path):
    rows = _rows(4000)
    previous = _statistics(tmp_path, [row_to_example(row) for row in rows[:2000]], "previous")
    natural = _statistics(tmp_path, [row_to_example(row) for row in rows[2000:]], "natural")
    shifted_examples = [row_to_example(row) for row in rows[2000:]]
    for example in shifted_examples:
        fare = example.features.feature["fare"].float_list.value
        fare[:] = [3 * value + 5 for value in fare]
    shifted = _statistics(tmp_path, shifted_examples, "shifted")
    schema = tfdv.load_schema_text(SCHEMA)

    measured = drift.measure_drift(natural, previous, schema)
    assert [entry["measure"] for entry in measured["fare"]] == ["JENSEN_SHANNON_DIVERGENCE"]
    assert [entry["measure"] for entry in measured["payment_type"]] == ["L_INFTY"]
    assert drift.drifted(measured) == [], measured
    moved = drift.measure_drift(shifted, previous, schema)
    [(feature, fare)] = drift.drifted(moved)
    assert feature == "fare" and fare["value"] > fare["threshold"] == 0.3
    line = drift.describe_drift("train", "fare", fare, previous_span=4)
    assert "train: fare: drift Jensen-Shannon divergence" in line and "> threshold 0.300 vs span 4" in line
    accepting = float(line.rsplit("threshold: ", 1)[1].split()[0])
    assert fare["value"] < accepting <= fare["value"] + 0.02  # the setting that accepts this span, and no more
    assert 'feature { name: "fare" drift_comparator { jensen_shannon_divergence { threshold: ' in line


def test_clean_taxi_rows_pass_and_broken_ones_block_naming_each_feature(tmp_path):
    clean = [row_to_example(row) for row in _rows(300)]
    assert gate.summarize({"train": _validate(tmp_path, clean)})["blocking"] is False

    broken = [row_to_example(row) for row in _rows(300)]
    for example in broken[:50]:
        example.features.feature["payment_type"].bytes_list.value[0] = b"Bitcoin"  # outside the domain
    for example in broken[50:100]:
        example.features.feature["trip_start_hour"].int64_list.value[0] = 31  # outside 0..23
    report = gate.summarize({"eval": _validate(tmp_path, broken)})
    assert report["blocking"] is True
    assert {"payment_type", "trip_start_hour"} <= set(report["splits"]["eval"])
    message = gate.describe(report)
    assert "eval: payment_type:" in message and "eval: trip_start_hour:" in message


def test_a_feature_with_two_comparators_keeps_both_and_a_breach_of_either_blocks(tmp_path):
    """fare compared by L-infinity distance and by Jensen-Shannon divergence: a shift that breaches only the
    first (listed first in the schema, so a report keyed by feature alone would keep the second) blocks."""
    rows = _rows(4000)
    previous = _statistics(tmp_path, [row_to_example(row) for row in rows[:2000]], "previous")
    shifted_examples = [row_to_example(row) for row in rows[2000:]]
    for example in shifted_examples:
        example.features.feature["payment_type"].bytes_list.value[:] = [b"Cash"]
    shifted = _statistics(tmp_path, shifted_examples, "shifted")
    schema = tfdv.load_schema_text(SCHEMA)
    payment_type = tfdv.get_feature(schema, "payment_type")
    payment_type.drift_comparator.jensen_shannon_divergence.threshold = 0.99  # the second comparator: lenient

    measured = drift.measure_drift(shifted, previous, schema)
    by_measure = {entry["measure"]: entry for entry in measured["payment_type"]}
    assert set(by_measure) == {"L_INFTY", "JENSEN_SHANNON_DIVERGENCE"}
    assert by_measure["L_INFTY"]["drifted"] and not by_measure["JENSEN_SHANNON_DIVERGENCE"]["drifted"]
    assert [(feature, entry["measure"]) for feature, entry in drift.drifted(measured)] == [("payment_type", "L_INFTY")]
    report = {"blocking": False, "splits": {}, "drift": {"previous_span": 1, "splits": {"train": measured}}}
    message = gate.describe(report)
    assert "train: payment_type: drift L-infinity distance" in message
    assert 'name: "payment_type" drift_comparator { infinity_norm { threshold: ' in message
    assert "the config's schema_path" in message and "python -m pipeline run --config" in message


def test_a_column_the_schema_does_not_know_is_listed_and_does_not_block(tmp_path):
    """TFDV marks a feature missing from the schema as an ERROR (SCHEMA_NEW_COLUMN: a schema environment cannot
    hold a feature it does not list); the model, built from the schema, leaves such a column out, so the gate
    lists it and lets the span through. Any other ERROR still blocks."""
    examples = [row_to_example(row) for row in _rows(300)]
    for index, example in enumerate(examples):
        example.features.feature["tip_share"].float_list.value.append(index / 300)
    anomalies = _validate(tmp_path, examples)
    from tensorflow_metadata.proto.v0 import anomalies_pb2
    assert [reason.type for reason in anomalies.anomaly_info["tip_share"].reason] == [
        anomalies_pb2.AnomalyInfo.SCHEMA_NEW_COLUMN]
    assert anomalies.anomaly_info["tip_share"].severity == anomalies_pb2.AnomalyInfo.ERROR
    report = gate.summarize({"train": anomalies, "eval": anomalies})
    assert report["blocking"] is False and report["new_columns"] == ["tip_share"]
    assert report["splits"]["train"]["tip_share"] == {"blocking": False, "short": "New column", "new_column": True,
                                                      "description": "New column (column in data but not in schema)"}
    for example in examples[:50]:
        example.features.feature["payment_type"].bytes_list.value[0] = b"Bitcoin"  # outside the domain: blocks
    report = gate.summarize({"train": _validate(tmp_path, examples)})
    assert report["blocking"] is True and report["new_columns"] == ["tip_share"]
    message = gate.describe(report)
    assert "train: payment_type:" in message and "not blocking: new column(s) tip_share, not in the schema" in message


def _artifact(cls, uri, splits=(), **properties):
    from tfx.types import artifact_utils

    artifact = cls()
    artifact.uri = str(uri)
    tf.io.gfile.makedirs(artifact.uri)
    if splits:
        artifact.split_names = artifact_utils.encode_split_names(list(splits))
    for key, value in properties.items():
        artifact.set_int_custom_property(key, value) if isinstance(value, int) else \
            artifact.set_string_custom_property(key, value)
    return artifact


def _write_statistics(statistics, path: str) -> None:
    """As StatisticsGen writes a split's statistics: one DatasetFeatureStatisticsList, binary."""
    from tfx.utils import io_utils

    io_utils.write_bytes_file(path, statistics.SerializeToString())


def _split_files(root, per_split: dict, name: str, write) -> None:
    for split, value in per_split.items():
        tf.io.gfile.makedirs(os.path.join(str(root), f"Split-{split}"))
        write(value, os.path.join(str(root), f"Split-{split}", name))


def test_drift_of_a_span_of_a_few_rows_says_how_many_on_both_sides(tmp_path):
    """The real gate executor on a 3-row span against a 2,000-row one: the error names both spans' records."""
    import pytest
    from tfx.types import standard_artifacts
    from tfx.utils import io_utils

    from components.core import contract
    from components.core.artifacts import ValidationReport

    rows = [row_to_example(row) for row in _rows(2003)]
    for example in rows[2000:]:
        example.features.feature["fare"].float_list.value[:] = [500.0]  # three rows, far from the reference
    splits = {"train": (rows[:1500], rows[2000:2002]), "eval": (rows[1500:2000], rows[2002:])}
    reference = {split: _statistics(tmp_path, old, f"old-{split}") for split, (old, _) in splits.items()}
    current = {split: _statistics(tmp_path, new, f"new-{split}") for split, (_, new) in splits.items()}
    previous = _artifact(ValidationReport, tmp_path / "previous", span=1, spans="1")
    _split_files(tmp_path / "previous" / contract.STATISTICS_COPY_DIR, reference, contract.STATISTICS_FILE,
                 _write_statistics)
    statistics = _artifact(standard_artifacts.ExampleStatistics, tmp_path / "statistics", splits)
    _split_files(tmp_path / "statistics", current, contract.STATISTICS_FILE, _write_statistics)
    anomalies = _artifact(standard_artifacts.ExampleAnomalies, tmp_path / "anomalies", splits)
    _split_files(tmp_path / "anomalies", {split: _validate(tmp_path, new) for split, (_, new) in splits.items()},
                 contract.ANOMALIES_FILE,
                 lambda value, path: io_utils.write_bytes_file(path, value.SerializeToString()))
    schema = _artifact(standard_artifacts.Schema, tmp_path / "schema")
    tf.io.gfile.copy(SCHEMA, str(tmp_path / "schema" / "schema.pbtxt"))
    examples = _artifact(standard_artifacts.Examples, tmp_path / "examples", splits, spans="2", input_fingerprint="f")
    examples.span = 2
    report = _artifact(ValidationReport, tmp_path / "report")
    inputs = {contract.ANOMALIES: [anomalies], contract.STATISTICS: [statistics], contract.EXAMPLES: [examples],
              contract.SCHEMA: [schema], contract.PREVIOUS_VALIDATION_REPORT: [previous]}
    with pytest.raises(gate.BlockingAnomaliesError) as raised:
        gate.Executor().Do(inputs, {contract.VALIDATION_REPORT: [report]}, {})
    message = str(raised.value)
    assert "train: fare: drift Jensen-Shannon divergence" in message, message
    assert ("span 2 holds 3 record(s) (train 2, eval 1), against span 1's 2,000 record(s) (train 1,500, eval 500): "
            "drift over 3 record(s) says little. Is the span complete?") in message, message
