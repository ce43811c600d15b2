"""Stage 1: Kafka -> the raw archive in object storage (docs/archive.md).

Takes the pipeline's topics and an interval; gives raw segments (one Parquet file per offset range
of a partition) and a manifest per interval naming them. ``offsets`` plans the ranges,
``land`` copies them (``kafka`` reads Kafka), ``manifest`` records them. Every byte goes through
``storage.Storage`` and every path through ``layout``.
"""
