"""The one place tidelake talks to an Iceberg catalog (and calls ``load_catalog``).

Upstream names are data: an upstream table ``db.table`` becomes the Iceberg table
``<namespace>.<encoded db>.<encoded table>`` (percent-encoded, so any upstream name maps to
exactly one identifier), stored at ``<warehouse>/<namespace>/<encoded db>/<encoded table>``,
with the upstream names kept in its properties.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.exceptions import NamespaceAlreadyExistsError, NoSuchTableError
from pyiceberg.schema import Schema
from pyiceberg.table import Table

from cdc_codecs import ConfigError
from spark import layout
from spark.config import PipelineConfig
from spark.iceberg.layout import table_layout

UPSTREAM_DATABASE = "tidelake.upstream.database"
UPSTREAM_TABLE = "tidelake.upstream.table"
KEY_COLUMNS = "tidelake.key-columns"
PIPELINE = "tidelake.pipeline"


def catalog_properties(config: PipelineConfig) -> dict[str, str]:
    """tidelake's defaults (embedded SQLite next to a local archive), then the configured ones."""
    props: dict[str, str] = {"type": config.catalog.type}
    url = config.storage.url
    if config.catalog.type == "sql":
        if url.startswith("s3://"):
            if "uri" not in config.catalog.properties:
                raise ConfigError(
                    f"pipeline {config.name}: catalog.properties.uri is required when storage is S3 "
                    "(a shared SQL catalog, e.g. postgresql+psycopg2://user@host/db)"
                )
            props["warehouse"] = f"{url.rstrip('/')}/warehouse"
        else:
            root = Path(urlparse(url).path if url.startswith("file://") else url).resolve()
            root.mkdir(parents=True, exist_ok=True)
            props["uri"] = f"sqlite:///{root / 'catalog.db'}"
            props["warehouse"] = (root / "warehouse").as_uri()
    if url.startswith("s3://"):
        s = config.storage
        key = s.access_key_id or os.environ.get("AWS_ACCESS_KEY_ID")
        secret = s.secret_access_key or os.environ.get("AWS_SECRET_ACCESS_KEY")
        props.update({k: v for k, v in {
            "s3.endpoint": s.endpoint_url, "s3.region": s.region or os.environ.get("AWS_REGION") or "us-east-1",
            "s3.access-key-id": key, "s3.secret-access-key": secret,
        }.items() if v})
    props.update(config.catalog.properties)
    return props


def open_catalog(config: PipelineConfig) -> Catalog:
    catalog = load_catalog(f"tidelake-{config.name}", **catalog_properties(config))
    try:
        catalog.create_namespace(config.namespace)
    except NamespaceAlreadyExistsError:
        pass
    return catalog


def identifier(config: PipelineConfig, database: str, table: str) -> tuple[str, str]:
    return (config.namespace, f"{layout.encode_name(database)}.{layout.encode_name(table)}")


def table_location(catalog: Catalog, config: PipelineConfig, database: str, table: str) -> str:
    warehouse = str(catalog.properties.get("warehouse", "")).rstrip("/")
    return f"{warehouse}/{layout.encode_name(config.namespace)}/{layout.encode_name(database)}/{layout.encode_name(table)}"


def load_table(catalog: Catalog, config: PipelineConfig, database: str, table: str) -> Table | None:
    try:
        return catalog.load_table(identifier(config, database, table))
    except NoSuchTableError:
        return None


def create_table(catalog: Catalog, config: PipelineConfig, database: str, table: str, schema: Schema, keys: tuple[str, ...],
                 buckets: int | None = None) -> Table:
    """Create the Iceberg table for upstream ``database.table``, laid out by ``[layout]`` (or ``buckets``).

    Raises:
        LayoutUnavailable: a bucketed layout without pyiceberg-core; nothing is created.
    """
    partition_spec, sort_order = table_layout(schema, keys, config.layout.buckets if buckets is None else buckets)
    return catalog.create_table(
        identifier(config, database, table),
        schema=schema,
        location=table_location(catalog, config, database, table),
        partition_spec=partition_spec,
        sort_order=sort_order,
        properties={
            UPSTREAM_DATABASE: database,
            UPSTREAM_TABLE: table,
            KEY_COLUMNS: json.dumps(list(keys)),
            PIPELINE: config.name,
            "format-version": "2",
        },
    )


def pipeline_tables(catalog: Catalog, config: PipelineConfig) -> list[Table]:
    return [catalog.load_table(i) for i in sorted(catalog.list_tables(config.namespace))]


def upstream_name(table: Table) -> tuple[str, str]:
    props: dict[str, Any] = table.properties
    return props[UPSTREAM_DATABASE], props[UPSTREAM_TABLE]
