"""The resolvers' choices over a real MLMD store (pipeline/dag/resolvers.py): the drift reference is the newest
ValidationReport of data a blessed model was trained on (the evaluator's ModelBlessing of the same data says so),
or before any was blessed of data any model was trained on; never one of a span that produced no model or only
one unfit to serve, nor one of this run's own data."""
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
from tfx.types import standard_artifacts

from components.core import contract
from components.core.artifacts import ValidationReport
from pipeline.dag.resolvers import LatestOfBlessedData


def _store(tmp_path, evaluated: list[tuple[str, int]]):
    """An MLMD store holding a ModelBlessing (blessed or not) per (input fingerprint, blessed)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(tmp_path / "metadata.sqlite")
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    store = metadata_store.MetadataStore(config)
    blessing_type = store.put_artifact_type(metadata_store_pb2.ArtifactType(
        name=standard_artifacts.ModelBlessing.TYPE_NAME))
    for fingerprint, blessed in evaluated:
        blessing = metadata_store_pb2.Artifact(type_id=blessing_type, uri=str(tmp_path / fingerprint))
        blessing.custom_properties[contract.FINGERPRINT_PROPERTY].string_value = fingerprint
        blessing.custom_properties["blessed"].int_value = blessed
        store.put_artifacts([blessing])
    return store


def _report(artifact_id: int, fingerprint: str, span: int) -> ValidationReport:
    report = ValidationReport()
    report.id = artifact_id
    report.set_string_custom_property(contract.FINGERPRINT_PROPERTY, fingerprint)
    report.set_int_custom_property(contract.SPAN_PROPERTY, span)
    return report


def _resolved(store, fingerprint: str, reports) -> list[int]:
    key = contract.PREVIOUS_VALIDATION_REPORT
    return [report.id for report in LatestOfBlessedData(fingerprint).resolve_artifacts(store, {key: reports})[key]]


def test_the_drift_reference_is_the_newest_report_of_data_a_blessed_model_was_trained_on(tmp_path):
    reports = [_report(1, "span-1", 1), _report(2, "span-2", 2), _report(3, "span-3-three-rows", 3)]
    # Span 1's model was blessed; span 2's was not; span 3's three rows passed the gate and trained a model no
    # gate blessed: span 4 is compared with span 1.
    store = _store(tmp_path / "a", [("span-1", 1), ("span-2", 0), ("span-3-three-rows", 0)])
    assert _resolved(store, "span-4", reports) == [1]
    store = _store(tmp_path / "b", [("span-1", 1), ("span-2", 1)])
    assert _resolved(store, "span-4", reports) == [2]
    assert _resolved(store, "span-2", reports) == [1]  # a run of span 2's data again: never its own report
    # Before any model was blessed: the newest span a model was trained on; none trained: no reference.
    assert _resolved(_store(tmp_path / "c", [("span-1", 0), ("span-2", 0)]), "span-4", reports) == [2]
    assert _resolved(_store(tmp_path / "d", []), "span-4", reports) == []
