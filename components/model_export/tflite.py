"""The device model: TFLite conversion, op audit, scoring and latency in LiteRT (TensorFlow only converts).

The device model takes raw features, one input per raw feature in its own dtype (strings as strings) under
the column's internal name (components/core/feature_names.py: the column's own name when that is a valid name,
as in every hand-written model), and carries the model's preprocessing (vocabularies, bins, normalization)
inside the file, so an app computes nothing itself and cannot drift from training. It is the trained
preprocessing and model traced together at batch size 1 (devices score one example at a time; every shape
is static, the converter folds the shape arithmetic away, and XNNPACK takes the float parts of the graph:
no op may output a string, whose dynamic size would keep XNNPACK off the whole graph), converted with
TFLite's builtin ops only: never the Flex delegate, which adds megabytes to an app and which LiteRT, the
standalone device runtime (`ai-edge-litert`), does not have.

Preprocessing stays exact in every variant: lookups and bins are integer ops that quantization never
touches, and full int8 quantizes the model core only (the preprocessing ops are kept out of the quantizer
by name, so normalization runs in float32 and the core's first op quantizes its output).
"""
from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import re
import statistics
import time
from typing import Iterable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from components.core import contract
from components.core.contract import TFLITE_VARIANTS
from components.core.feature_names import internal_names
from components.core.savedmodel import write_signatures
from components.native_stderr import native_stderr_to_log

PREPROCESSING_SCOPE = "raw_preprocessing"  # name scope of the preprocessing ops inside the device graph
_INPUT_DTYPE_NAMES = {tf.float32: "float32", tf.int64: "int64", tf.string: "string"}
_QUANTIZED_TYPES = ("INT8", "UINT8", "INT16", "INT4")


class ConversionError(RuntimeError):
    """A variant could not be converted with builtin ops only (the message names the ops at fault)."""


def write_device_savedmodel(preprocessing: keras.Model, model: keras.Model, inputs: dict, output_name: str,
                            export_dir: str) -> str:
    """Input: the fitted preprocessing (raw features -> model-ready tensors), the float32 model-ready model,
    the model module's INPUTS (name -> tf.io.FixedLenFeature), the output's name (the task's prediction_key)
    and a folder.

    Output: `export_dir`, a SavedModel whose serving_default takes one raw example (shape [1] per input,
    the feature's own dtype, the argument named by the column's internal name: device_input_names) and
    returns {output_name: [1, 1] or [1, K]}: the model's output for it, as the serving SavedModel's
    serving_raw signature computes it, with the preprocessing ops under PREPROCESSING_SCOPE. The
    preprocessing is handed a dict keyed by the column names."""
    names = device_input_names(inputs)
    # Keyed by column, as the preprocessing takes it; the signature's arguments carry the TensorSpec names.
    spec = {column: tf.TensorSpec([1], feature.dtype, name=names[column]) for column, feature in inputs.items()}

    @tf.function(input_signature=[spec])
    def probabilities(features):
        with tf.name_scope(PREPROCESSING_SCOPE):
            model_ready = preprocessing(features)
        return {output_name: tf.cast(model(model_ready, training=False), tf.float32)}

    # The .tflite file's one signature, under the serving name: raw features -> {output_name}.
    write_signatures(export_dir, [preprocessing, model], {contract.SERVING_SIGNATURE: probabilities})
    return export_dir


def device_input_names(columns: Iterable[str]) -> dict[str, str]:
    """Input: the model module's INPUTS (or their column names, all of them). Output: column -> the name of
    the device model's input it is passed as (its internal name, components/core/feature_names.py)."""
    return internal_names(list(columns))


def input_conventions(inputs: dict, notes: dict[str, str] | None = None) -> list[dict]:
    """Input: the model module's INPUTS and, optionally, column -> a note on what to pass for it (a date
    column: "int64 seconds since 1970-01-01 UTC"). Output: per device input, what a caller passes: "name"
    (the column), "device_name" (the device model's input it is passed as), "dtype", "shape", and
    "missing_value": the value that stands for a missing feature (the default the SavedModel parses an
    absent feature as, so both treat it alike; None when the feature is required; the string "NaN" for a
    float NaN, which JSON cannot hold); with a note for the column, "note" as well."""
    notes = notes or {}
    unknown = sorted(set(notes) - set(inputs))
    if unknown:
        raise ValueError(f"notes name columns that are not inputs: {', '.join(map(repr, unknown))}")
    device_names = device_input_names(inputs)
    conventions = []
    for name, feature in inputs.items():
        default = feature.default_value
        if isinstance(default, bytes):
            default = default.decode()
        elif default is not None:
            default = np.asarray(default).reshape(-1)[0].item()
            if isinstance(default, float) and np.isnan(default):
                default = "NaN"
        convention = {"name": name, "device_name": device_names[name], "dtype": _INPUT_DTYPE_NAMES[feature.dtype],
                      "shape": [1], "missing_value": default}
        if name in notes:
            convention["note"] = notes[name]
        conventions.append(convention)
    return conventions


def convert(saved_model_dir: str, variant: str, representative: dict[str, np.ndarray] | None = None,
            float_output_layer: bool = False, float32_flatbuffer: bytes | None = None) -> bytes:
    """One variant of a device SavedModel (write_device_savedmodel) converted: DeviceConverter's convert, for a
    model converted once."""
    return DeviceConverter(saved_model_dir).convert(variant, representative, float_output_layer, float32_flatbuffer)


class DeviceConverter:
    """The TFLite converter of one device SavedModel (write_device_savedmodel), which it loads once for all the
    variants it converts, and converts the float32 variant once, whichever variant asks for it first (float16
    and full_int8 start from it): each variant's file is the same as a converter of its own would write."""

    def __init__(self, saved_model_dir: str):
        self.saved_model_dir = saved_model_dir
        self._converter = None  # loaded by the first variant the TFLite converter converts
        self._float32 = None  # the float32 variant's file, once converted

    def convert(self, variant: str, representative: dict[str, np.ndarray] | None = None,
                float_output_layer: bool = False, float32_flatbuffer: bytes | None = None) -> bytes:
        """Input: a variant name, (full_int8 only) raw calibration features, column -> array of N rows for every
        input of the model (keyed by column name, as DeviceInterpreter.predict takes them), whether full_int8
        and float16 keep the model's output layer in float32 (a regression output: an int8 one saturates
        outside the calibration range, a float16 constant beyond 65,504 overflows), and (float16 and full_int8)
        the float32 variant of the same SavedModel when converted elsewhere (else this converter's own): both
        start from that file. Output: the .tflite bytes.

        Every variant is converted with TFLITE_BUILTINS only (full int8: int8 kernels where the quantizer gives
        them, builtin float and integer kernels for the rest); ConversionError names any op that would need
        more. full_int8 quantizes all but the ops under PREPROCESSING_SCOPE (and the output layer when asked),
        float16 stores the weights of all but those in float16; inputs and output stay float."""
        if variant not in TFLITE_VARIANTS:
            raise ValueError(f"unknown TFLite variant {variant!r} (known: {', '.join(TFLITE_VARIANTS)})")
        if variant == "float16":  # the float32 file, its core's constants stored in float16: no second conversion
            flatbuffer = _float16_core(float32_flatbuffer or self.convert("float32"), float_output_layer)
        elif variant == "full_int8":  # the float32 file calibrated and quantized: no second conversion
            flatbuffer = _quantize_core(float32_flatbuffer or self.convert("float32"), representative,
                                        float_output_layer)
        elif variant == "float32":
            if self._float32 is None:
                self._float32 = self._converted(variant)
            flatbuffer = self._float32
        else:
            flatbuffer = self._converted(variant)
        outside = non_builtin_ops(flatbuffer)
        if outside:
            raise ConversionError(f"holds ops outside TFLite's builtins: {', '.join(outside)}")
        return flatbuffer

    def _converted(self, variant: str) -> bytes:
        """The TFLite converter's file for float32 or dynamic_int8 (convert's contract); every option a variant
        sets is set again for the next."""
        if self._converter is None:
            self._converter = tf.lite.TFLiteConverter.from_saved_model(self.saved_model_dir,
                                                                       signature_keys=[contract.SERVING_SIGNATURE])
        converter = self._converter
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        converter.allow_custom_ops = False
        converter.optimizations = [] if variant == "float32" else [tf.lite.Optimize.DEFAULT]
        try:
            with native_stderr_to_log(f"TFLite converter ({variant})"):
                return converter.convert()
        except Exception as error:  # the converter raises its own ConverterError, with the ops in its notes
            text = "\n".join([str(error), *getattr(error, "__notes__", [])])
            missing = sorted(set(re.findall(r"'tf\.(\w+)' op is neither a custom op nor a flex op", text)))
            if not missing:
                raise
            raise ConversionError(f"needs TensorFlow ops that TFLite's builtin kernels lack: {', '.join(missing)} "
                                  "(the model module must use device-safe preprocessing layers)") from error


def _quantize_core(float32_flatbuffer: bytes, representative: dict[str, np.ndarray] | None,
                   float_output_layer: bool) -> bytes:
    """Full-integer quantization of the float32 file's core, everything but the preprocessing (and, with
    `float_output_layer`, the ops from the last fully connected layer to the output): calibrate on the
    representative raw examples, then quantize with those ops' outputs on the quantizer's deny list (the
    selective quantization of tf.lite.experimental.QuantizationDebugger, without its debug instrumentation).
    The file is the one the converter writes with its own full-integer calibration (the float model it
    calibrates is the float32 variant): here the conversion is not run a second time."""
    from tensorflow.lite.python import convert as lite_convert
    from tensorflow.lite.python.optimize import calibrator
    from tensorflow.lite.python import conversion_metadata_schema_py_generated as conversion
    from tensorflow.lite.tools import flatbuffer_utils

    if not representative:
        raise ValueError("full_int8 needs a representative dataset")
    rows = len(next(iter(representative.values())))
    names = device_input_names(representative)  # the calibrator feeds the signature's inputs by their names
    # An infinite float crashes the quantizer's calibration; the model reads it as missing, as it reads NaN.
    representative = {column: np.where(np.isinf(values), np.nan, values).astype(values.dtype)
                      if values.dtype.kind == "f" else values for column, values in representative.items()}
    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(float32_flatbuffer))
    _set_optimization_mode(model, conversion.ModelOptimizationMode.PTQ_FULL_INTEGER)
    float_model = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    with native_stderr_to_log("TFLite converter (full_int8)"):
        calibrated = calibrator.Calibrator(calibrator.add_intermediate_tensors(float_model)).calibrate(lambda: (
            {names[column]: _calibration_value(values[i]) if values.dtype == object else values[i:i + 1]
             for column, values in representative.items()} for i in range(rows)))
        denied = preprocessing_tensor_names(calibrated) + (
            output_layer_tensor_names(calibrated) if float_output_layer else [])
        return lite_convert.mlir_quantize(calibrated, input_data_type=tf.float32, output_data_type=tf.float32,
                                          denylisted_nodes=denied)


def _float16_core(float32_flatbuffer: bytes, float_output_layer: bool) -> bytes:
    """The float32 model with the core's constants stored in float16, each read through a DEQUANTIZE op, as
    TFLite's float16 quantization stores them, with the metadata the converter gives a float16 file
    (_float16_metadata). The converter would store every constant
    in float16, the preprocessing's too: a date's seconds since 1970 (about 1.7e9), a large median or a bin's
    edge overflow or round there, and the device model would read such a number wrongly. Here a constant stays
    float32 when a preprocessing op uses it (or, with `float_output_layer`, an op of the output layer), or when
    float16 cannot hold it."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.convert_bytearray_to_object(bytearray(float32_flatbuffer))
    kept = set(output_layer_tensor_names(float32_flatbuffer)) if float_output_layer else set()
    dequantize = schema.OperatorCodeT()
    dequantize.builtinCode, dequantize.deprecatedBuiltinCode = (schema.BuiltinOperator.DEQUANTIZE,) * 2
    dequantize.version = 3  # the DEQUANTIZE that reads float16
    model.operatorCodes.append(dequantize)
    replaced = set()  # buffers that held a float32 constant now stored in float16
    for graph in model.subgraphs:
        users = _consumers(graph)
        added = []
        for index, tensor in enumerate(list(graph.tensors)):
            data = model.buffers[tensor.buffer].data
            if tensor.type != schema.TensorType.FLOAT32 or data is None or index not in users:
                continue
            outputs = [graph.tensors[i].name.decode() for op in users[index] for i in _indices(op.outputs)]
            values = np.frombuffer(bytes(data), dtype=np.float32)
            if any(_is_preprocessing(name) or name in kept for name in outputs) or not np.isfinite(
                    values.astype(np.float16)).all():
                continue
            stored = schema.BufferT()
            stored.data = np.frombuffer(values.astype(np.float16).tobytes(), dtype=np.uint8)
            model.buffers.append(stored)
            half = schema.TensorT()
            half.name, half.shape, half.type = tensor.name + b"_float16", tensor.shape, schema.TensorType.FLOAT16
            half.buffer = len(model.buffers) - 1
            graph.tensors.append(half)
            replaced.add(tensor.buffer)
            tensor.buffer = 0  # TFLite's empty buffer: the value is computed now
            op = schema.OperatorT()
            op.opcodeIndex, op.inputs, op.outputs = len(model.operatorCodes) - 1, [len(graph.tensors) - 1], [index]
            added.append(op)
        graph.operators = added + graph.operators  # constants first: every op still follows its inputs
    for buffer in replaced - {tensor.buffer for graph in model.subgraphs for tensor in graph.tensors}:
        model.buffers[buffer].data = None
    _float16_metadata(model)
    return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


DEQUANTIZE_FLOAT16_RUNTIME = (1, 15, 0)  # the first TFLite runtime with version 3 of DEQUANTIZE (float16 in)


def _float16_metadata(model) -> None:
    """Turns a float32 file's metadata (a TFLite model object) into what the converter writes for float16
    quantization: the conversion options name PTQ_FLOAT16, `reduced_precision_support` says fp16accfp32
    (float16 storage, float32 accumulation), and the minimum runtime is at least DEQUANTIZE's for float16."""
    from tensorflow.lite.python import conversion_metadata_schema_py_generated as conversion

    _set_optimization_mode(model, conversion.ModelOptimizationMode.PTQ_FLOAT16)
    for entry in list(model.metadata or []):
        if entry.name == b"min_runtime_version":
            data = bytes(model.buffers[entry.buffer].data)
            version = data.rstrip(b"\0").decode()
            if tuple(int(part) for part in version.split(".")) < DEQUANTIZE_FLOAT16_RUNTIME:
                version = ".".join(map(str, DEQUANTIZE_FLOAT16_RUNTIME))
            _store_metadata(model, entry.name, version.encode().ljust(len(data), b"\0"))
    _store_metadata(model, b"reduced_precision_support", b"fp16accfp32")


def _set_optimization_mode(model, mode: int) -> None:
    """The conversion options in a TFLite model object's metadata name `mode` (a ModelOptimizationMode) as the
    one optimization applied, as the converter writes them for that quantization."""
    import flatbuffers
    from tensorflow.lite.python import conversion_metadata_schema_py_generated as conversion

    for entry in list(model.metadata or []):
        if entry.name == b"CONVERSION_METADATA":
            data = bytes(model.buffers[entry.buffer].data)
            options = conversion.ConversionMetadataT.InitFromObj(conversion.ConversionMetadata.GetRootAs(data, 0))
            options.options.modelOptimizationModes = [mode]
            builder = flatbuffers.Builder(0)
            builder.Finish(options.Pack(builder))
            _store_metadata(model, entry.name, bytes(builder.Output()))


def _store_metadata(model, name: bytes, data: bytes) -> None:
    """`data` as the TFLite model object's metadata entry `name`: in the entry's own buffer, or in a new entry
    and buffer."""
    from tensorflow.lite.python import schema_py_generated as schema

    entry = next((entry for entry in model.metadata or [] if entry.name == name), None)
    if entry is None:
        model.buffers.append(schema.BufferT())
        entry = schema.MetadataT()
        entry.name, entry.buffer = name, len(model.buffers) - 1
        model.metadata = [*(model.metadata or []), entry]
    model.buffers[entry.buffer].data = np.frombuffer(data, dtype=np.uint8)


def _calibration_value(value: bytes) -> np.ndarray:
    """One string for TFLite's calibrator, which reads a string input only from a bytes array exactly as wide
    as the string: the Python objects that tf.Tensor.numpy() gives, or a wider fixed-width array, are each
    looked up as out of vocabulary, and the int8 ranges after the lookups come out wrong. The empty string
    cannot be given that way (a 1-byte array holds a NUL) and calibrates as an unknown value, which moves
    the full-int8 outputs by no measurable amount."""
    return np.array([value], dtype=np.bytes_)


@dataclasses.dataclass(frozen=True)
class _Code:
    builtinCode: int
    deprecatedBuiltinCode: int
    customCode: bytes | None


@dataclasses.dataclass(frozen=True)
class _Tensor:
    name: bytes
    type: int
    buffer: int


@dataclasses.dataclass(frozen=True)
class _Operator:
    opcodeIndex: int
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class _Graph:
    tensors: tuple[_Tensor, ...]
    operators: tuple[_Operator, ...]
    outputs: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class _Model:
    """What the report's questions read of a .tflite file, named as in TFLite's object API: operator codes, each
    subgraph's tensors (name, type, buffer), operators and outputs, and each buffer's size in bytes (None when it
    holds no data in the file: none at all, or, in a file of over 2 GB, data stored after the flatbuffer)."""
    operatorCodes: tuple[_Code, ...]
    subgraphs: tuple[_Graph, ...]
    buffer_sizes: tuple[int | None, ...]


def _int_vector(length: int, as_numpy) -> tuple[int, ...]:
    """A flatbuffer vector of integers as a tuple (the generated `XAsNumpy()` gives the int 0 for an absent one)."""
    return tuple(int(value) for value in as_numpy()) if length else ()


@functools.lru_cache(maxsize=8)  # the report asks several questions of each variant's file
def _model(flatbuffer: bytes) -> _Model:
    """The structure of a .tflite file (_Model), read in place: TFLite's object API would copy every field of
    every op, tensor and buffer into Python objects first (up to a second for a model of a few hundred ops)."""
    from tensorflow.lite.python import schema_py_generated as schema

    root = schema.Model.GetRootAs(flatbuffer, 0)
    codes = [root.OperatorCodes(i) for i in range(root.OperatorCodesLength())]
    graphs = []
    for index in range(root.SubgraphsLength()):
        graph = root.Subgraphs(index)
        tensors = [graph.Tensors(i) for i in range(graph.TensorsLength())]
        operators = [graph.Operators(i) for i in range(graph.OperatorsLength())]
        graphs.append(_Graph(
            tuple(_Tensor(tensor.Name(), tensor.Type(), tensor.Buffer()) for tensor in tensors),
            tuple(_Operator(op.OpcodeIndex(), _int_vector(op.InputsLength(), op.InputsAsNumpy),
                            _int_vector(op.OutputsLength(), op.OutputsAsNumpy)) for op in operators),
            _int_vector(graph.OutputsLength(), graph.OutputsAsNumpy)))
    buffers = [root.Buffers(i) for i in range(root.BuffersLength())]
    return _Model(tuple(_Code(code.BuiltinCode(), code.DeprecatedBuiltinCode(), code.CustomCode()) for code in codes),
                  tuple(graphs), tuple(None if buffer.DataIsNone() else buffer.DataLength() for buffer in buffers))


def _is_preprocessing(name: str) -> bool:
    return any(part.startswith(PREPROCESSING_SCOPE + "/") or f"/{PREPROCESSING_SCOPE}/" in part
               for part in name.split(";"))


def preprocessing_tensor_names(flatbuffer: bytes) -> list[str]:
    """Names of the tensors that preprocessing ops produce in a converted model (their ops' outputs)."""
    model = _model(flatbuffer)
    names = set()
    for graph in model.subgraphs:
        for op in graph.operators:
            for index in _indices(op.outputs):
                name = graph.tensors[index].name.decode()
                if _is_preprocessing(name):
                    names.add(name)
    return sorted(names)


def output_layer_tensor_names(flatbuffer: bytes) -> list[str]:
    """Names of the tensors the output layers produce: walking back from each subgraph output along every
    path of ops that produce it, each path up to and including its last FULLY_CONNECTED or BATCH_MATMUL (the
    layer that sets the output's range: a packed network's members' output layer is one BATCH_MATMUL)."""
    model = _model(flatbuffer)
    op_names = _op_names(model)
    names = set()
    for graph in model.subgraphs:
        producer = _producers(graph)
        pending = [index for index in _indices(graph.outputs) if index in producer]
        while pending:
            index = pending.pop()
            name = graph.tensors[index].name.decode()
            if name in names:
                continue
            names.add(name)
            op = producer[index]
            if op_names[op.opcodeIndex] not in ("FULLY_CONNECTED", "BATCH_MATMUL"):
                pending.extend(i for i in _indices(op.inputs) if i in producer)
    return sorted(names)


def subgraph_count(flatbuffer: bytes) -> int:
    """The subgraphs of a .tflite file (one: the model runs as one graph, no control flow)."""
    return len(_model(flatbuffer).subgraphs)


def _producers(graph) -> dict[int, object]:
    """Tensor index -> the op of `graph` that outputs it."""
    return {index: op for op in graph.operators for index in _indices(op.outputs)}


def _consumers(graph) -> dict[int, list]:
    """Tensor index -> the ops of `graph` that take it as an input, in graph order."""
    consumers: dict[int, list] = {}
    for op in graph.operators:
        for index in _indices(op.inputs):
            consumers.setdefault(index, []).append(op)
    return consumers


def _indices(values) -> list[int]:
    return [int(i) for i in values if i >= 0] if values is not None else []


def _op_names(model) -> list[str]:
    """Per operator code of a model object: the builtin op's name, or "custom:<name>" for a custom op."""
    from tensorflow.lite.python import schema_py_generated as schema
    builtin = {code: name for name, code in vars(schema.BuiltinOperator).items() if not name.startswith("_")}
    names = []
    for code in model.operatorCodes:
        number = max(code.builtinCode, code.deprecatedBuiltinCode)
        if number == schema.BuiltinOperator.CUSTOM:
            names.append(f"custom:{code.customCode.decode() if code.customCode else '?'}")
        else:
            names.append(builtin.get(number, f"builtin:{number}"))
    return names


def operators(flatbuffer: bytes) -> list[str]:
    """Input: a .tflite file's bytes. Output: the sorted names of the ops it uses (its operator codes), a
    custom op (Flex ops are custom ops named Flex<Op>) as "custom:<name>"."""
    return sorted(set(_op_names(_model(flatbuffer))))


def non_builtin_ops(flatbuffer: bytes) -> list[str]:
    """The ops of a .tflite file that are not TFLite builtins (Flex or other custom ops): [] for a file any
    TFLite runtime runs as it is."""
    return [name for name in operators(flatbuffer) if name.startswith("custom:")]


def quantized_preprocessing_ops(flatbuffer: bytes) -> list[str]:
    """Preprocessing ops of a converted model that compute in a quantized type (int8, int16, ...): [] when
    lookups, bins and normalization run in their exact types. Each entry: "<OP> -> <output tensor>".
    The QUANTIZE ops that take the preprocessing's float outputs into the int8 core are the core's inputs,
    not preprocessing (the converter names their outputs after their inputs), and so are those that take such
    an int8 input to another scale (a part of the core that reads the preprocessing at a scale of its own)."""
    from tensorflow.lite.python import schema_py_generated as schema
    type_names = {code: name for name, code in vars(schema.TensorType).items() if not name.startswith("_")}
    model = _model(flatbuffer)
    op_names = _op_names(model)
    found = []
    for graph in model.subgraphs:
        core_inputs = set()  # tensors a QUANTIZE op gives the core: from a float, or from another such tensor
        for op in graph.operators:
            tensors = [graph.tensors[i] for i in _indices(op.outputs)]
            if op_names[op.opcodeIndex] == "QUANTIZE" and all(
                    type_names[graph.tensors[i].type] == "FLOAT32" or i in core_inputs for i in _indices(op.inputs)):
                core_inputs.update(_indices(op.outputs))
                continue
            if any(_is_preprocessing(t.name.decode()) for t in tensors) and any(
                    type_names[t.type] in _QUANTIZED_TYPES for t in tensors):
                found.append(f"{op_names[op.opcodeIndex]} -> {tensors[0].name.decode()}")
    return found


def weight_bytes(flatbuffer: bytes) -> dict[str, int]:
    """Bytes in the model's constant buffers, split in two:
    "weight_bytes": the model's weights, biases and embedding tables (what quantization shrinks);
    "preprocessing_bytes": the preprocessing's constants (vocabularies, normalization constants), consumed
    only by preprocessing ops, which no variant quantizes.
    The rest of a .tflite file is graph structure (tensors, names, operators, signatures)."""
    model = _model(flatbuffer)
    op_names = _op_names(model)
    buffer_use: dict[int, set[bool]] = {}  # buffer index -> {consumed by preprocessing?} over its consumers
    for graph in model.subgraphs:
        produced, consumers = _producers(graph), _consumers(graph)

        def preprocessing_consumer(op) -> bool:
            name = op_names[op.opcodeIndex]
            if name.startswith("HASHTABLE"):  # the tables, their keys and values: preprocessing by nature
                return True
            outputs = _indices(op.outputs)
            if name == "DEQUANTIZE":  # a constant stored in a smaller type: judged by who uses the value
                uses = [user for index in outputs for user in consumers.get(index, [])]
                return bool(uses) and all(preprocessing_consumer(user) for user in uses)
            return any(_is_preprocessing(graph.tensors[index].name.decode()) for index in outputs)

        for index, tensor in enumerate(graph.tensors):
            size = model.buffer_sizes[tensor.buffer] if tensor.buffer < len(model.buffer_sizes) else None
            if size is None or index in produced:
                continue
            uses = {preprocessing_consumer(op) for op in consumers.get(index, [])} or {False}
            buffer_use.setdefault(tensor.buffer, set()).update(uses)
    totals = {"weight_bytes": 0, "preprocessing_bytes": 0}
    for buffer, uses in buffer_use.items():
        key = "preprocessing_bytes" if uses == {True} else "weight_bytes"
        totals[key] += model.buffer_sizes[buffer]
    return totals


def runtime_name() -> str:
    """The TFLite runtime DeviceInterpreter uses: LiteRT (ai-edge-litert), else TensorFlow's interpreter."""
    try:
        return f"LiteRT (ai-edge-litert {importlib.metadata.version('ai-edge-litert')})"
    except importlib.metadata.PackageNotFoundError:
        return f"tf.lite.Interpreter (TensorFlow {tf.__version__}; ai-edge-litert is not installed)"


def _new_interpreter(flatbuffer: bytes, default_delegates: bool = True):
    """A LiteRT interpreter (TensorFlow's without ai-edge-litert) of one thread for `flatbuffer`; with
    `default_delegates` False, without the delegate the runtime applies by default (XNNPACK on a CPU)."""
    try:
        from ai_edge_litert.interpreter import Interpreter, OpResolverType
    except ImportError:
        Interpreter, OpResolverType = tf.lite.Interpreter, tf.lite.experimental.OpResolverType
    resolver = OpResolverType.AUTO if default_delegates else OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES
    return Interpreter(model_content=flatbuffer, num_threads=1, experimental_op_resolver_type=resolver)


class DeviceInterpreter:
    """One converted model in LiteRT, the device runtime (TensorFlow's interpreter when ai-edge-litert is not
    installed), fed one raw example at a time as an app would; `output_name` is the output it reads.
    `columns`: the model module's INPUTS (or all their column names); features are then keyed by column
    name and each is set on the input named by its internal name (device_input_names). Without `columns`,
    features are keyed by the device model's input names themselves."""

    def __init__(self, flatbuffer: bytes, output_name: str, columns: Iterable[str] | None = None):
        self._flatbuffer = flatbuffer
        self.default_delegates = True  # False once XNNPACK (LiteRT's default CPU delegate) refused the model
        try:
            self._open()
        except RuntimeError as error:
            if not self._without_default_delegates(error):
                raise
        runner = self._interpreter.get_signature_runner(contract.SERVING_SIGNATURE)
        indices = {name: detail["index"] for name, detail in runner.get_input_details().items()}
        self._output = runner.get_output_details()[output_name]["index"]
        del runner  # it must not outlive allocate/invoke checks on the interpreter
        if columns is None:
            self._inputs = indices
            return
        names = device_input_names(columns)
        if sorted(names.values()) != sorted(indices):
            raise ValueError(f"the device model's inputs {sorted(indices)} are not those of the columns "
                             f"{sorted(names)} ({sorted(names.values())})")
        self._inputs = {column: indices[name] for column, name in names.items()}  # column -> input tensor

    def _open(self) -> None:
        with native_stderr_to_log("TFLite interpreter"):
            self._interpreter = _new_interpreter(self._flatbuffer, self.default_delegates)
            self._interpreter.allocate_tensors()

    def _without_default_delegates(self, error: RuntimeError) -> bool:
        """When XNNPACK refused the model (it can fail to prepare a node the builtin kernels run), the
        interpreter again without it: True; False for any other error."""
        if not self.default_delegates or "XNNPACK" not in str(error):
            return False
        logging.warning("TFLite: XNNPACK refused the model (%s); running it with the builtin kernels alone",
                        str(error).strip()[:300])
        self.default_delegates = False
        self._open()
        return True

    def _set_example(self, features: dict[str, np.ndarray], row: int) -> None:
        for name, index in self._inputs.items():
            self._interpreter.set_tensor(index, features[name][row:row + 1])

    def _invoke(self, features: dict[str, np.ndarray], row: int) -> None:
        """Sets row `row` of `features` and runs the model on it (without XNNPACK should XNNPACK refuse it)."""
        self._set_example(features, row)
        try:
            self._interpreter.invoke()
        except RuntimeError as error:
            if not self._without_default_delegates(error):
                raise
            self._set_example(features, row)
            self._interpreter.invoke()

    def predict(self, features: dict[str, np.ndarray]) -> np.ndarray:
        """Input: raw features, column name (see the class) -> array of N rows (strings as bytes). Output: the
        model's outputs, [N] for one value per example, [N, K] for K class probabilities."""
        return self.predict_timed(features, 0)[0]

    def predict_timed(self, features: dict[str, np.ndarray], timed: int) -> tuple[np.ndarray, float | None]:
        """predict's outputs, and the median wall time of one invoke() over the first `timed` rows (inputs set
        outside the timing; None when no row was timed). The first row runs once more before the timing: a
        delegate is prepared on the first run."""
        rows = len(next(iter(features.values())))
        if rows and timed:
            self._invoke(features, 0)
        outputs, timings = [], []
        for row in range(rows):
            if row < timed:
                self._set_example(features, row)
                start = time.perf_counter()
                self._interpreter.invoke()
                timings.append(time.perf_counter() - start)
            else:
                self._invoke(features, row)
            outputs.append(self._interpreter.get_tensor(self._output).reshape(-1).copy())
        out = np.stack(outputs).astype(np.float32) if outputs else np.zeros((0, 1), np.float32)
        return (out.reshape(rows) if out.shape[1] == 1 else out), (statistics.median(timings) if timings else None)
