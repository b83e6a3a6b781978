"""The schema `init` writes: TFDV's statistics of the sampled records (pipeline/onboarding/span_columns.py),
the schema TFDV infers from them, curated for the ValidationGate and the schema-driven model.
"""
from __future__ import annotations

NUMBER_DRIFT = 0.3  # Jensen-Shannon divergence over quantile histograms (as the taxi schema)
CATEGORY_DRIFT = 0.15  # L-infinity distance between the value distributions


def curated_schema(statistics, label: str, excluded: set[str], dates: set[str],
                   sometimes_missing: set[str] = frozenset()) -> str:
    """TFDV's inferred schema, curated: environments with the label in TRAINING only and unconstrained (its
    classes and presence are the config's, checked by the Trainer); string features open to new values (no
    domain: a new category is measured as drift and reported; list the values in a string_domain to refuse
    others); dates marked as times (UNIX seconds); a drift comparator on the label and every feature the model
    uses, but dates (a date moves on by nature); a feature the model leaves out keeps its type and nothing else
    (a rare one may be absent from a whole split, and its values may change freely). `sometimes_missing`: the
    features absent from some record (the statistics may have seen a sample in which they never were): no
    feature of them is required in every record."""
    import tensorflow_data_validation as tfdv
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    schema = tfdv.infer_schema(statistics)
    schema.default_environment[:] = ["TRAINING", "SERVING"]
    for feature in schema.feature:
        feature.ClearField("domain_info")  # inferred string domains would refuse every new category
        if feature.name == label:
            feature.not_in_environment.append("SERVING")
            feature.ClearField("presence")
        if feature.name in excluded:  # no input of the model: only its type is checked
            for constraint in ("presence", "value_count", "shape"):
                feature.ClearField(constraint)
            continue
        if feature.name in sometimes_missing:
            feature.ClearField("shape")  # a fixed shape requires the feature in every record
            feature.presence.ClearField("min_fraction")
            feature.value_count.min, feature.value_count.max = 1, 1
        if feature.name in dates:
            feature.time_domain.integer_format = schema_pb2.TimeDomain.UNIX_SECONDS
        elif feature.type == schema_pb2.BYTES:
            feature.drift_comparator.infinity_norm.threshold = CATEGORY_DRIFT
        else:
            comparator = feature.drift_comparator.jensen_shannon_divergence
            comparator.threshold = NUMBER_DRIFT
            comparator.source.type = comparator.source.QUANTILES
    del schema.string_domain[:]
    header = ("# Curated by `python -m pipeline init` from TFDV statistics of the data: presence as seen; string\n"
              "# features open to new values (add a string_domain to refuse values outside a list); dates as UNIX\n"
              "# seconds; a drift comparator on the label and every other feature the model uses (L-infinity on\n"
              "# strings, Jensen-Shannon over quantiles on numbers); the label in the TRAINING environment only,\n"
              "# its classes in the config; a left-out feature checked for its type only.\n"
              "# Edit it to tighten or loosen what the ValidationGate blocks on.\n")
    return header + text_format.MessageToString(schema, as_utf8=True)


def sample_statistics(sample: list[bytes], label: str):
    """TFDV statistics of a sample of serialized tf.Examples, computed in memory (no Beam pipeline): what the
    schema is inferred from, and the label's numbers (label_numbers). The label gets TFDV's whole numeric
    statistics; every other feature what the schema needs (types, presence, value counts, string values), its
    numeric histograms left at one bucket: TFDV builds each from a thousand quantiles in Python, seconds for a
    wide table, and nothing here reads them. What a sample cannot know (which columns are ever missing, or
    multi-valued) comes from read_columns' full pass: see curated_schema."""
    import pyarrow as pa
    import tensorflow_data_validation as tfdv
    from tensorflow_data_validation.statistics.stats_impl import generate_statistics_in_memory
    from tensorflow_data_validation.types import FeaturePath
    from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

    record_batch = ExamplesToRecordBatchDecoder().DecodeBatch(sample)
    statistics = generate_statistics_in_memory(record_batch, tfdv.StatsOptions(
        use_sketch_based_topk_uniques=True, num_histogram_buckets=1, num_quantiles_histogram_buckets=1))
    if label in record_batch.schema.names:
        label_only = pa.RecordBatch.from_arrays([record_batch.column(record_batch.schema.get_field_index(label))],
                                                [label])
        whole = generate_statistics_in_memory(label_only, tfdv.StatsOptions(use_sketch_based_topk_uniques=True))
        path = FeaturePath([label])
        tfdv.get_feature_stats(statistics.datasets[0], path).CopyFrom(tfdv.get_feature_stats(whole.datasets[0], path))
    return statistics
