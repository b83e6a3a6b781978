"""Serialized tf.Examples in one canonical byte form: the features sorted by name.

tfx-bsl's encoder writes a record's features in the order of a hash map whose seed changes from call to call,
so the same row could come out as different bytes in two calls: the same CSV, prepared twice, would give
different files, and two equal rows two different records. `canonical(records)` re-serializes them
deterministically. The tf.Example message is declared here (wire-compatible, in a pool of its own) so that
prepare-data still runs without importing TensorFlow.
"""
from __future__ import annotations

import functools

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "canonical_examples"


@functools.lru_cache(maxsize=1)
def _example_class():
    """The tf.Example message class (Example > Features > map<string, Feature> > Bytes/Float/Int64List)."""
    field_proto = descriptor_pb2.FieldDescriptorProto
    optional, repeated = field_proto.LABEL_OPTIONAL, field_proto.LABEL_REPEATED

    def message(name, *fields, map_entry=False, nested=(), oneof=""):
        """A message of `fields`: (name, type, label, message type or "", packed), numbered from 1; with
        `oneof`, every field belongs to that oneof."""
        result = descriptor_pb2.DescriptorProto(name=name, nested_type=list(nested))
        result.options.map_entry = map_entry
        if oneof:
            result.oneof_decl.add(name=oneof)
        for number, (field_name, kind, label, type_name, packed) in enumerate(fields, start=1):
            field = result.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                field.type_name = f".{_PACKAGE}.{type_name}"
            if packed:
                field.options.packed = True
            if oneof:
                field.oneof_index = 0
        return result

    proto = descriptor_pb2.FileDescriptorProto(name="canonical_examples.proto", package=_PACKAGE, syntax="proto3")
    proto.message_type.extend([
        message("BytesList", ("value", field_proto.TYPE_BYTES, repeated, "", False)),
        message("FloatList", ("value", field_proto.TYPE_FLOAT, repeated, "", True)),
        message("Int64List", ("value", field_proto.TYPE_INT64, repeated, "", True)),
        message("Feature", ("bytes_list", field_proto.TYPE_MESSAGE, optional, "BytesList", False),
                ("float_list", field_proto.TYPE_MESSAGE, optional, "FloatList", False),
                ("int64_list", field_proto.TYPE_MESSAGE, optional, "Int64List", False), oneof="kind"),
        message("Features", ("feature", field_proto.TYPE_MESSAGE, repeated, "Features.FeatureEntry", False),
                nested=[message("FeatureEntry", ("key", field_proto.TYPE_STRING, optional, "", False),
                                ("value", field_proto.TYPE_MESSAGE, optional, "Feature", False), map_entry=True)]),
        message("Example", ("features", field_proto.TYPE_MESSAGE, optional, "Features", False)),
    ])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.Example"))


def canonical(records: list[bytes]) -> list[bytes]:
    """Input: serialized tf.Examples. Output: the same Examples, each serialized with its features sorted by
    name (equal Examples give equal bytes, in any process)."""
    example = _example_class()
    return [example.FromString(record).SerializeToString(deterministic=True) for record in records]
