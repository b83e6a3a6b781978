"""MLMD as TFX records a run, read back (pipeline/runs/mlmd.py): each step's node id from its context's name,
"<pipeline name>.<node id>", whatever the pipeline's name holds (an older config's name may hold dots)."""
from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2

from pipeline.runs.mlmd import node_ids, runs_by_node


def _store(tmp_path):
    config = metadata_store_pb2.ConnectionConfig()
    config.sqlite.filename_uri = str(tmp_path / "metadata.sqlite")
    config.sqlite.connection_mode = metadata_store_pb2.SqliteMetadataSourceConfig.READWRITE_OPENCREATE
    return metadata_store.MetadataStore(config)


def _run(store, pipeline_name: str, run_id: str, nodes: list[str]) -> None:
    """Records one run of `nodes` as TFX does: a pipeline, a pipeline_run and a node context per execution."""
    types = {name: store.put_context_type(metadata_store_pb2.ContextType(name=name))
             for name in ("pipeline", "pipeline_run", "node")}
    execution_type = store.put_execution_type(metadata_store_pb2.ExecutionType(name="step"))

    def context(kind: str, name: str) -> metadata_store_pb2.Context:
        found = store.get_context_by_type_and_name(kind, name)
        if found is None:
            [context_id] = store.put_contexts([metadata_store_pb2.Context(type_id=types[kind], name=name)])
            found = store.get_contexts_by_id([context_id])[0]
        return found

    for node in nodes:
        execution = metadata_store_pb2.Execution(type_id=execution_type,
                                                 last_known_state=metadata_store_pb2.Execution.COMPLETE)
        store.put_execution(execution, [], [context("pipeline", pipeline_name), context("pipeline_run", run_id),
                                            context("node", f"{pipeline_name}.{node}")])


def test_node_ids_are_read_whatever_the_pipeline_name_holds(tmp_path):
    store = _store(tmp_path)
    nodes = ["TFRecordIngest", "Trainer", "AtomicPusher"]
    _run(store, "shop.v2.eu", "run-1", nodes)
    _run(store, "taxi-accel", "run-2", nodes[:2])
    [(run, by_node)] = runs_by_node(store, "shop.v2.eu")
    assert run.name == "run-1" and list(by_node) == nodes
    assert [node_ids(store, execution) for execution in by_node.values()] == [[node] for node in nodes]
    [(run, by_node)] = runs_by_node(store, "taxi-accel")
    assert run.name == "run-2" and list(by_node) == nodes[:2]
