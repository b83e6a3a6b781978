"""Serialized tf.Examples in one canonical byte form: the features sorted by name.

tfx-bsl's encoder writes a record's features in the order of a hash map whose seed changes from call to call,
so the same row could come out as different bytes in two calls, and ingestion splits records by a hash of
their bytes: the same CSV, prepared twice, would be split two ways, and two identical rows could land one in
each split. `canonical(records)` re-serializes them deterministically. The tf.Example message is declared
here (wire-compatible, in a pool of its own) so that prepare-data still runs without importing TensorFlow.
"""
from __future__ import annotations

import functools

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "canonical_examples"


@functools.lru_cache(maxsize=1)
def _example_class():
    """The tf.Example message class (Example > Features > map<string, Feature> > Bytes/Float/Int64List)."""
    proto = descriptor_pb2.FileDescriptorProto(name="canonical_examples.proto", package=_PACKAGE, syntax="proto3")
    label, optional = descriptor_pb2.FieldDescriptorProto, descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL
    repeated = label.LABEL_REPEATED

    def message(name, *fields, map_entry=False, nested=()):
        result = descriptor_pb2.DescriptorProto(name=name, nested_type=list(nested))
        if map_entry:
            result.options.map_entry = True
        for number, (field_name, kind, field_label, type_name, packed) in enumerate(fields, start=1):
            field = result.field.add(name=field_name, number=number, type=kind, label=field_label)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if packed:
                field.options.packed = True
        return result

    proto.message_type.extend([
        message("BytesList", ("value", label.TYPE_BYTES, repeated, "", False)),
        message("FloatList", ("value", label.TYPE_FLOAT, repeated, "", True)),
        message("Int64List", ("value", label.TYPE_INT64, repeated, "", True)),
        message("Feature", ("bytes_list", label.TYPE_MESSAGE, optional, "BytesList", False),
                ("float_list", label.TYPE_MESSAGE, optional, "FloatList", False),
                ("int64_list", label.TYPE_MESSAGE, optional, "Int64List", False)),
        message("Features", ("feature", label.TYPE_MESSAGE, repeated, "Features.FeatureEntry", False),
                nested=[message("FeatureEntry", ("key", label.TYPE_STRING, optional, "", False),
                                ("value", label.TYPE_MESSAGE, optional, "Feature", False), map_entry=True)]),
        message("Example", ("features", label.TYPE_MESSAGE, optional, "Features", False)),
    ])
    # Feature's three lists are one oneof ("kind") in tf.Example; as plain fields they parse and write the same
    feature = proto.message_type[3]
    feature.oneof_decl.add(name="kind")
    for field in feature.field:
        field.oneof_index = 0
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Example"))


def canonical(records: list[bytes]) -> list[bytes]:
    """Input: serialized tf.Examples. Output: the same Examples, each serialized with its features sorted by
    name (equal Examples give equal bytes, in any process)."""
    example = _example_class()
    return [example.FromString(record).SerializeToString(deterministic=True) for record in records]
