"""The export report reads a .tflite file's structure in place (components/model_export/tflite.py `_model`): on a
small hand-built file with the awkward cases a converter can write, it reads what TFLite's object API reads."""
import numpy as np
from tensorflow.lite.python import schema_py_generated as schema
from tensorflow.lite.tools import flatbuffer_utils

from components.model_export import tflite


def _code(builtin: int, custom: bytes | None = None):
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = builtin
    code.customCode = custom
    return code


def _tensor(name: bytes, buffer: int, kind=schema.TensorType.FLOAT32):
    tensor = schema.TensorT()
    tensor.name, tensor.buffer, tensor.type, tensor.shape = name, buffer, kind, np.array([1], np.int32)
    return tensor


def _operator(code: int, inputs, outputs):
    op = schema.OperatorT()
    op.opcodeIndex, op.inputs, op.outputs = code, inputs, outputs
    return op


def _buffer(data):
    buffer = schema.BufferT()
    buffer.data = data
    return buffer


def awkward_file() -> bytes:
    """Three op codes (a builtin, a custom op with a name and one without), an optional input (-1), an op with no
    inputs vector and one with an empty one and no outputs, buffers with no data, 8 bytes and an empty vector."""
    model = schema.ModelT()
    model.version = 3
    model.operatorCodes = [_code(schema.BuiltinOperator.ADD), _code(schema.BuiltinOperator.CUSTOM, b"MyOp"),
                           _code(schema.BuiltinOperator.CUSTOM)]
    graph = schema.SubGraphT()
    graph.tensors = [_tensor(b"model/preprocessing/x", 1), _tensor(b"model/dense/out", 0),
                     _tensor(b"empty", 2, schema.TensorType.INT8)]
    graph.operators = [_operator(0, np.array([0, -1], np.int32), np.array([1], np.int32)),
                       _operator(1, None, np.array([2], np.int32)),
                       _operator(2, np.array([], np.int32), None)]
    graph.inputs, graph.outputs = np.array([0], np.int32), np.array([1], np.int32)
    model.subgraphs = [graph]
    model.buffers = [_buffer(None), _buffer(np.arange(8, dtype=np.uint8)), _buffer(np.array([], np.uint8))]
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _vector(values) -> tuple:
    return () if values is None else tuple(int(value) for value in values)


def test_the_structure_read_in_place_is_what_the_object_api_reads():
    flatbuffer = awkward_file()
    read, unpacked = tflite._model(flatbuffer), flatbuffer_utils.convert_bytearray_to_object(bytearray(flatbuffer))

    assert [(code.builtinCode, code.deprecatedBuiltinCode, code.customCode) for code in read.operatorCodes] == [
        (code.builtinCode, code.deprecatedBuiltinCode, code.customCode) for code in unpacked.operatorCodes]
    assert read.operatorCodes[1].customCode == b"MyOp" and read.operatorCodes[2].customCode is None
    [graph], [expected] = read.subgraphs, unpacked.subgraphs
    assert [(t.name, t.type, t.buffer) for t in graph.tensors] == [(t.name, t.type, t.buffer) for t in expected.tensors]
    assert [(op.opcodeIndex, op.inputs, op.outputs) for op in graph.operators] == [
        (op.opcodeIndex, _vector(op.inputs), _vector(op.outputs)) for op in expected.operators]
    assert graph.operators[0].inputs == (0, -1) and graph.operators[1].inputs == graph.operators[2].outputs == ()
    assert graph.outputs == (1,)
    assert read.buffer_sizes == tuple(None if buffer.data is None else len(buffer.data) for buffer in unpacked.buffers)
    assert read.buffer_sizes == (None, 8, 0)


def test_the_reports_questions_read_the_awkward_file():
    flatbuffer = awkward_file()
    assert tflite.operators(flatbuffer) == ["ADD", "custom:?", "custom:MyOp"]
    assert tflite.non_builtin_ops(flatbuffer) == ["custom:?", "custom:MyOp"]
    assert tflite.subgraph_count(flatbuffer) == 1
    # the 8 bytes feed the ADD whose output is no preprocessing tensor: weights; the empty buffer counts 0
    assert tflite.weight_bytes(flatbuffer) == {"weight_bytes": 8, "preprocessing_bytes": 0}
