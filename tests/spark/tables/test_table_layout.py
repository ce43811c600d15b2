"""[layout] buckets: bucket(first key column, N) and a sort order on the key, opt-in."""

from __future__ import annotations

import pytest
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import DoubleType, LongType, NestedField, StringType

from cdc_codecs import ConfigError
from spark.tables import catalog as cat
from spark.config import PipelineConfig
from spark.tables import internals
from spark.tables.errors import LayoutUnavailable
from spark.tables.table_layout import BUCKET_FIELD, table_layout

SCHEMA = Schema(NestedField(1, "tenant", StringType(), required=False), NestedField(2, "id", LongType(), required=False),
                NestedField(3, "score", DoubleType(), required=False))


def config(tmp_path, layout: dict | None = None) -> PipelineConfig:
    doc = {"name": "shop", "kafka": {"bootstrap_servers": "localhost:9092"}, "topics": [{"name": "t", "protocol": "canal-json"}],
           "storage": {"url": str(tmp_path / "archive")}}
    if layout is not None:
        doc["layout"] = layout
    return PipelineConfig.from_mapping(doc, "pipeline.toml")


def test_the_default_is_todays_layout(tmp_path):
    assert config(tmp_path).layout.buckets == 0
    assert table_layout(SCHEMA, ("id",), 0) == (UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER)
    assert table_layout(SCHEMA, (), 16) == (UNPARTITIONED_PARTITION_SPEC, UNSORTED_SORT_ORDER)  # key-less


def test_layout_config_is_checked(tmp_path):
    assert config(tmp_path, {"buckets": 32}).layout.buckets == 32
    with pytest.raises(ConfigError, match="pipeline.toml: layout.buckets: expected 0 \\(unpartitioned\\) to 65536, found -1"):
        config(tmp_path, {"buckets": -1})
    with pytest.raises(ConfigError, match="layout.bucket: unknown key"):
        config(tmp_path, {"bucket": 4})
    with pytest.raises(ConfigError, match="layout.buckets: expected int"):
        config(tmp_path, {"buckets": "8"})


def test_a_key_bucket_cannot_hash_is_sorted_but_not_bucketed():
    spec, order = table_layout(SCHEMA, ("score", "id"), 8)
    assert spec == UNPARTITIONED_PARTITION_SPEC
    assert [f.source_id for f in order.fields] == [3, 2]


def test_bucketing_without_pyiceberg_core_fails_before_creating_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(internals, "pyiceberg_core_available", lambda: False)
    cfg = config(tmp_path, {"buckets": 8})
    catalog = cat.open_catalog(cfg)
    with pytest.raises(LayoutUnavailable, match=r"buckets = 8: .*bucket\(tenant, 8\).*pyiceberg-core"):
        cat.create_table(catalog, cfg, "db", "orders", SCHEMA, ("tenant", "id"))
    assert cat.load_table(catalog, cfg, "db", "orders") is None
    table = cat.create_table(catalog, cfg, "db", "orders", SCHEMA, ("tenant", "id"), buckets=0)  # the override
    assert table.spec().is_unpartitioned()


def test_a_bucketed_table_is_partitioned_by_the_first_key_column_and_sorted_by_the_key(tmp_path):
    cfg = config(tmp_path, {"buckets": 8})
    catalog = cat.open_catalog(cfg)
    table = cat.create_table(catalog, cfg, "db", "orders", SCHEMA, ("tenant", "id"))
    [field] = table.spec().fields
    assert (field.source_id, field.transform, field.name) == (1, BucketTransform(8), BUCKET_FIELD)
    assert [f.source_id for f in table.sort_order().fields] == [1, 2]


def test_lay_out_moves_a_table_to_a_new_key_and_back_reusing_specs_and_orders(tmp_path):
    from pyiceberg.catalog.sql import SqlCatalog

    from spark.tables.table_layout import lay_out

    catalog = SqlCatalog("t", uri=f"sqlite:///{tmp_path / 'c.db'}", warehouse=(tmp_path / "w").as_uri())
    catalog.create_namespace("ns")
    spec, order = table_layout(SCHEMA, ("tenant",), 4)
    table = catalog.create_table("ns.t", schema=SCHEMA, partition_spec=spec, sort_order=order)
    shape = lambda t: ([f.source_id for f in t.spec().fields], [f.source_id for f in t.sort_order().fields])  # noqa: E731
    with table.transaction() as tx:  # cleared, then laid out again, in one transaction
        lay_out(tx, (), 0)
        lay_out(tx, ("id", "tenant"), 4)
    table = catalog.load_table("ns.t")
    assert shape(table) == ([2], [2, 1])
    assert [f.name for f in table.spec().fields] == [BUCKET_FIELD]
    with table.transaction() as tx:
        lay_out(tx, ("tenant",), 4)
    table = catalog.load_table("ns.t")
    assert shape(table) == ([1], [1]) and table.spec().spec_id == 0  # the first spec again, not a copy
    before = table.metadata_location
    with table.transaction() as tx:
        lay_out(tx, ("tenant",), 4)  # already laid out so: nothing staged
    assert catalog.load_table("ns.t").metadata_location == before
